//! When each worker's plugin ticks. Envoy gives a dynamic module no per-worker timer outside a
//! stream, so one ticker (`ticker`) wakes the main thread at the shortest period any worker asked
//! for, and the workers whose tick is due tick there. Time is an argument.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The schedule behind a lock (workers set periods from their threads, the main thread takes due
/// ticks), with the ticker's wake-up period published for its thread.
pub struct Ticks {
    schedule: Mutex<TickSchedule>,
    wake_ms: Arc<AtomicU64>,
}

impl Ticks {
    pub fn new(workers: usize) -> Ticks {
        Ticks { schedule: Mutex::new(TickSchedule::new(workers)), wake_ms: Arc::default() }
    }

    /// The wake-up period in milliseconds (0: no worker ticks), for the ticker's thread.
    pub fn wake_ms(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.wake_ms)
    }

    pub fn set_period(&self, worker: usize, period_ms: u64) {
        let mut schedule = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        schedule.set_period(worker, period_ms);
        self.wake_ms.store(schedule.wake_period_ms().unwrap_or(0), Ordering::Relaxed);
    }

    pub fn take_due(&self, now_us: u64) -> Vec<usize> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner()).take_due(now_us)
    }
}

/// Each worker's period and next tick.
#[derive(Debug)]
pub struct TickSchedule {
    entries: Vec<TickEntry>,
}

#[derive(Debug, Clone, Copy)]
struct TickEntry {
    period_ms: u64,
    /// 0: at the next wake-up.
    due_us: u64,
}

impl TickSchedule {
    /// `workers` workers, none ticking until it sets a period.
    pub fn new(workers: usize) -> TickSchedule {
        TickSchedule { entries: vec![TickEntry { period_ms: 0, due_us: 0 }; workers] }
    }

    /// A worker's new period (0 stops its ticks); its next tick is one new period after its last.
    pub fn set_period(&mut self, worker: usize, period_ms: u64) {
        if let Some(e) = self.entries.get_mut(worker) {
            let last_us = e.due_us.saturating_sub(e.period_ms * 1_000);
            e.period_ms = period_ms;
            e.due_us = if e.due_us == 0 { 0 } else { last_us + period_ms * 1_000 };
        }
    }

    /// The workers due at `now_us`, each moved to its next tick: one period after the tick it was
    /// due for, so a period that is not a multiple of the wake-up keeps its rate on average; but
    /// never at or before now, so a main thread that was busy does not make a worker tick twice in
    /// a row.
    pub fn take_due(&mut self, now_us: u64) -> Vec<usize> {
        let mut due = Vec::new();
        for (worker, e) in self.entries.iter_mut().enumerate() {
            if e.period_ms > 0 && e.due_us <= now_us {
                due.push(worker);
                let next = e.due_us + e.period_ms * 1_000;
                e.due_us = if next > now_us { next } else { now_us + e.period_ms * 1_000 };
            }
        }
        due
    }

    /// How long the ticker sleeps between wake-ups: the shortest period asked for (None: no worker
    /// ticks).
    pub fn wake_period_ms(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.period_ms).filter(|&p| p > 0).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    #[test]
    fn each_worker_ticks_at_its_own_period() {
        let mut s = TickSchedule::new(3);
        assert_eq!(s.wake_period_ms(), None);
        assert!(s.take_due(0).is_empty(), "no period, no tick");
        s.set_period(0, 100);
        s.set_period(1, 250);
        assert_eq!(s.wake_period_ms(), Some(100));
        assert_eq!(s.take_due(1_000 * MS), vec![0, 1], "first wake-up: every ticking worker");
        let mut ticks = [0u32; 3];
        for step in 1..=10 {
            for w in s.take_due(1_000 * MS + step * 100 * MS) {
                ticks[w] += 1;
            }
        }
        assert_eq!(ticks, [10, 4, 0]);
    }

    #[test]
    fn a_new_period_counts_from_the_last_tick_and_zero_stops() {
        let mut s = TickSchedule::new(1);
        s.set_period(0, 1_000);
        assert_eq!(s.take_due(10_000 * MS), vec![0]);
        s.set_period(0, 200);
        assert!(s.take_due(10_150 * MS).is_empty());
        assert_eq!(s.take_due(10_200 * MS), vec![0], "one new period after the last tick");
        s.set_period(0, 0);
        assert!(s.take_due(99_000 * MS).is_empty());
        assert_eq!(s.wake_period_ms(), None);
    }

    #[test]
    fn a_late_wake_up_ticks_once() {
        let mut s = TickSchedule::new(1);
        s.set_period(0, 100);
        assert_eq!(s.take_due(0), vec![0]);
        assert_eq!(s.take_due(1_000 * MS), vec![0], "ten periods late: one tick");
        assert!(s.take_due(1_050 * MS).is_empty());
        s.set_period(7, 100);
        assert_eq!(s.wake_period_ms(), Some(100), "an unknown worker is ignored");
    }
}
