//! Requests in flight to one endpoint from one worker: from the pick until the first response
//! headers arrive. A stream's later messages do not wait on the endpoint, so a minutes-long
//! server-streaming or bidirectional RPC counts only until the server starts answering; and a
//! request that gets no headers at all stops counting after a bound: counts are kept per epoch of
//! `bound / 2`, and when a new epoch begins the counts of the epoch two before it are dropped, so
//! such a request leaves the count between `bound / 2` and `bound` after it was sent. Releasing a
//! request whose epoch was dropped changes nothing.

/// Two epoch buckets: requests sent in an even epoch and in an odd one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inflight {
    by_parity: [u32; 2],
}

impl Inflight {
    pub fn count(&self) -> u32 {
        self.by_parity[0].saturating_add(self.by_parity[1])
    }

    /// A request sent in `epoch`.
    pub fn add(&mut self, epoch: u64) {
        let b = &mut self.by_parity[(epoch % 2) as usize];
        *b = b.saturating_add(1);
    }

    /// The request sent in `epoch` got its first response headers or ended; `current` is the epoch now.
    pub fn release(&mut self, epoch: u64, current: u64) {
        if epoch.saturating_add(1) >= current {
            let b = &mut self.by_parity[(epoch % 2) as usize];
            *b = b.saturating_sub(1);
        }
    }

    /// The epoch moved from `old` to `new`: what was sent two or more epochs before `new` stops
    /// counting. True if that dropped a request still counted.
    pub fn advance(&mut self, old: u64, new: u64) -> bool {
        let before = *self;
        if new >= old.saturating_add(2) {
            self.by_parity = [0, 0];
        } else if new == old + 1 {
            self.by_parity[(new % 2) as usize] = 0;
        }
        *self != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_until_released_and_at_most_two_epochs() {
        let mut f = Inflight::default();
        f.add(4);
        f.add(4);
        f.add(5);
        assert_eq!(f.count(), 3);
        f.release(4, 5);
        assert_eq!(f.count(), 2);
        // Epoch 6 begins: the epoch-4 request still waiting stops counting, epoch 5's stays.
        assert!(f.advance(5, 6));
        assert_eq!(f.count(), 1);
        f.release(4, 6);
        assert_eq!(f.count(), 1, "a dropped request's release changes nothing");
        f.release(5, 6);
        assert_eq!(f.count(), 0);
        f.release(5, 6);
        assert_eq!(f.count(), 0, "never below zero");
    }

    #[test]
    fn a_jump_over_epochs_drops_everything() {
        let mut f = Inflight::default();
        f.add(1);
        f.add(2);
        assert!(f.advance(2, 9));
        assert_eq!(f.count(), 0);
        assert!(!f.advance(9, 9));
        f.add(9);
        assert!(!f.advance(9, 9));
        assert_eq!(f.count(), 1, "no epoch change, nothing dropped");
        assert!(!f.advance(9, 10), "epoch 9's request still counts in epoch 10");
        assert!(f.advance(10, 11));
        assert!(!f.advance(11, 12), "nothing left to drop");
    }
}
