//! The requests in flight at one endpoint as its own (server-role) sidecar counts them, for the
//! load stamp of each response (see `stamp`). A request counts from its request headers until its
//! response headers leave, or until its stream ends without any (reset, timeout), and at most for
//! the in-flight bound, exactly as a client worker counts (`inflight`: epochs of `bound / 2`).
//!
//! Envoy runs one VM per worker thread, and a request stays on one worker. Each VM counts its own
//! requests exactly and publishes that count to the other VMs (shared data) at its tick, when the
//! count changed (and every tick while it is not zero, which doubles as liveness). The stamp is
//! `own now + the sum of the other VMs' last published counts`: exact with one worker, and with
//! several it is off by at most what the other workers' counts moved in the last one or two ticks
//! (a count published at one VM's tick is read at the next tick of another). A published count
//! older than `live_us` belongs to a VM that stopped ticking and is left out.

use tailweight_picker::Inflight;

/// One VM's published count, as stored in shared data: `count` (u32 LE) then `at_us` (u64 LE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedCount {
    pub count: u32,
    pub at_us: u64,
}

impl PublishedCount {
    pub const ENCODED_LEN: usize = 12;

    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut bytes = [0u8; Self::ENCODED_LEN];
        bytes[..4].copy_from_slice(&self.count.to_le_bytes());
        bytes[4..].copy_from_slice(&self.at_us.to_le_bytes());
        bytes
    }

    /// None unless `bytes` is exactly what `encode` writes.
    pub fn decode(bytes: &[u8]) -> Option<PublishedCount> {
        if bytes.len() != Self::ENCODED_LEN {
            return None;
        }
        let count = u32::from_le_bytes(bytes[..4].try_into().ok()?);
        let at_us = u64::from_le_bytes(bytes[4..].try_into().ok()?);
        Some(PublishedCount { count, at_us })
    }
}

/// One VM's view of the endpoint's requests in flight.
#[derive(Debug, Clone)]
pub struct ServerInflight {
    own: Inflight,
    epoch_us: u64,
    /// The in-flight epoch now (None before the first request or tick).
    epoch: Option<u64>,
    /// The other VMs' live published counts, summed at the last tick.
    others: u32,
    /// The count last published by this VM.
    published: Option<u32>,
}

impl ServerInflight {
    /// `bound_us`: a request without response headers stops counting after at most this long.
    pub fn new(bound_us: u64) -> Self {
        ServerInflight {
            own: Inflight::default(),
            epoch_us: (bound_us / 2).max(1),
            epoch: None,
            others: 0,
            published: None,
        }
    }

    /// Move to the epoch of `now_us`, dropping what was sent two epochs before it.
    fn advance(&mut self, now_us: u64) -> u64 {
        let epoch = now_us / self.epoch_us;
        let old = *self.epoch.get_or_insert(epoch);
        if epoch > old {
            self.own.advance(old, epoch);
            self.epoch = Some(epoch);
        }
        epoch.max(old)
    }

    /// A request arrived at `now_us`; returns its epoch, for `leave`.
    pub fn enter(&mut self, now_us: u64) -> u64 {
        let epoch = self.advance(now_us);
        self.own.add(epoch);
        epoch
    }

    /// The request that entered in `epoch` sent its response headers, or ended without.
    pub fn leave(&mut self, epoch: u64, now_us: u64) {
        let current = self.advance(now_us);
        self.own.release(epoch, current);
    }

    /// This VM's requests in flight.
    pub fn own(&self) -> u32 {
        self.own.count()
    }

    /// The stamp's request count: this VM's own in flight now plus the other VMs' as last read.
    pub fn requests_in_flight(&self) -> u32 {
        self.own().saturating_add(self.others)
    }

    /// At a tick: what this VM should publish now, if anything (its count changed since it last
    /// published, or is not zero and needs its liveness renewed).
    pub fn count_to_publish(&mut self, now_us: u64) -> Option<PublishedCount> {
        self.advance(now_us);
        let count = self.own();
        if self.published == Some(count) && count == 0 {
            return None;
        }
        self.published = Some(count);
        Some(PublishedCount { count, at_us: now_us })
    }

    /// At a tick: the other VMs' published counts; those older than `live_us` are left out.
    pub fn set_others(&mut self, others: impl IntoIterator<Item = PublishedCount>, now_us: u64, live_us: u64) {
        let live_after = now_us.saturating_sub(live_us);
        self.others =
            others.into_iter().filter(|p| p.at_us >= live_after).fold(0u32, |sum, p| sum.saturating_add(p.count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND_US: u64 = 10_000_000;

    #[test]
    fn counts_requests_until_they_leave() {
        let mut s = ServerInflight::new(BOUND_US);
        let a = s.enter(1_000);
        let b = s.enter(2_000);
        let c = s.enter(3_000);
        assert_eq!(s.requests_in_flight(), 3);
        s.leave(b, 4_000);
        assert_eq!(s.requests_in_flight(), 2, "the stamp of b's response: a and c remain");
        s.leave(a, 5_000);
        s.leave(c, 6_000);
        assert_eq!(s.requests_in_flight(), 0);
        s.leave(c, 7_000);
        assert_eq!(s.requests_in_flight(), 0, "never below zero");
    }

    #[test]
    fn a_request_that_never_leaves_stops_counting_after_the_bound() {
        let mut s = ServerInflight::new(BOUND_US);
        let stuck = s.enter(0);
        s.enter(BOUND_US / 2 + 1);
        assert_eq!(s.own(), 2);
        // Two epochs after the stuck one began, only the later request counts.
        s.enter(BOUND_US);
        assert_eq!(s.own(), 2);
        s.leave(stuck, BOUND_US + 1);
        assert_eq!(s.own(), 2, "its late release changes nothing");
        // A tick long after: everything older than the bound is gone.
        assert_eq!(s.count_to_publish(10 * BOUND_US), Some(PublishedCount { count: 0, at_us: 10 * BOUND_US }));
        assert_eq!(s.own(), 0);
    }

    #[test]
    fn publishes_on_change_and_while_busy_and_sums_live_siblings() {
        let mut s = ServerInflight::new(BOUND_US);
        assert_eq!(s.count_to_publish(100), Some(PublishedCount { count: 0, at_us: 100 }), "first tick: say 0");
        assert_eq!(s.count_to_publish(200), None, "idle and unchanged: nothing to write");
        let e = s.enter(250);
        assert_eq!(s.count_to_publish(300), Some(PublishedCount { count: 1, at_us: 300 }));
        assert_eq!(s.count_to_publish(400), Some(PublishedCount { count: 1, at_us: 400 }), "busy: renewed");
        s.leave(e, 450);
        assert_eq!(s.count_to_publish(500), Some(PublishedCount { count: 0, at_us: 500 }));
        let siblings = [
            PublishedCount { count: 4, at_us: 900 },
            PublishedCount { count: 2, at_us: 1_000 },
            PublishedCount { count: 7, at_us: 100 },
        ];
        s.enter(1_000);
        s.set_others(siblings, 1_000, 500);
        assert_eq!(s.requests_in_flight(), 1 + 4 + 2, "the stale sibling is left out");
        s.set_others([], 1_000, 500);
        assert_eq!(s.requests_in_flight(), 1);
    }

    #[test]
    fn published_counts_round_trip_and_bad_bytes_are_refused() {
        let p = PublishedCount { count: 3, at_us: 1_234_567 };
        assert_eq!(PublishedCount::decode(&p.encode()), Some(p));
        assert_eq!(PublishedCount::decode(&p.encode()[..11]), None);
        assert_eq!(PublishedCount::decode(&[]), None);
    }
}
