//! The engine's event queue, which the policies also set their timers on (through `Ctx`).

use std::collections::BinaryHeap;

/// A policy's own wake-up: `kind` is the policy's to define, `arg` usually a client index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    pub kind: u8,
    pub arg: u32,
}

/// The event queue: (time, payload) pairs popped earliest first; equal times pop in payload order,
/// so a run is a pure function of its inputs.
#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
}

/// Payload kinds (top byte).
pub const EV_DONE: u64 = 1;
pub const EV_REJECT: u64 = 2;
pub const EV_TIMER: u64 = 3;
pub const EV_WINDOW: u64 = 4;
pub const EV_SCENARIO: u64 = 5;

impl Queue {
    pub fn push(&mut self, at_ns: u64, kind: u64, value: u64) {
        debug_assert!(value < 1 << 56);
        self.heap.push(std::cmp::Reverse((at_ns, kind << 56 | value)));
    }

    pub fn timer(&mut self, at_ns: u64, timer: Timer) {
        self.push(at_ns, EV_TIMER, (timer.kind as u64) << 32 | timer.arg as u64);
    }

    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|r| r.0 .0)
    }

    /// (time, kind, value)
    pub fn pop(&mut self) -> Option<(u64, u64, u64)> {
        self.heap.pop().map(|std::cmp::Reverse((t, p))| (t, p >> 56, p & ((1 << 56) - 1)))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

pub fn timer_of(value: u64) -> Timer {
    Timer { kind: (value >> 32) as u8, arg: value as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_pops_in_time_then_payload_order() {
        let mut q = Queue::default();
        q.push(5, EV_DONE, 9);
        q.push(3, EV_REJECT, 1);
        q.timer(5, Timer { kind: 2, arg: 7 });
        q.push(5, EV_DONE, 4);
        assert_eq!(q.pop(), Some((3, EV_REJECT, 1)));
        assert_eq!(q.pop(), Some((5, EV_DONE, 4)));
        assert_eq!(q.pop(), Some((5, EV_DONE, 9)));
        let (t, kind, value) = q.pop().unwrap();
        assert_eq!((t, kind, timer_of(value)), (5, EV_TIMER, Timer { kind: 2, arg: 7 }));
        assert!(q.is_empty());
    }
}
