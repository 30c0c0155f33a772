//! How much weights-page work each requester may have done: a token bucket per principal (or peer
//! address) of `PAGE_UNITS_PER_S` units a second, holding at most `PAGE_UNITS_BURST`; a unit is
//! one cluster or one endpoint of a page (what its copies and JSON cost, `weights_page.rs`). A page
//! is built only while its requester's bucket holds its units (or is full: a page larger than the
//! burst is allowed then, and the debt waits it out), so a requester polling pages back to back
//! gets `PAGE_UNITS_PER_S` units a second of them and 429 for the rest, and the serialisation
//! work of `k` such pollers is at most `k x PAGE_UNITS_PER_S` units a second, however fast they
//! ask. Pure: time is an argument.
//! Hand-written: tower's rate limit keeps one bucket for all callers, counts requests rather than
//! their cost, and waits rather than refusing.

use std::collections::HashMap;
use std::sync::Mutex;

/// Units a second per requester: one of the largest pages (8,192 endpoints and 64 clusters,
/// about 12 ms of one core to copy and serialise) a second.
pub const PAGE_UNITS_PER_S: f64 = 8_192.0 + 64.0;
/// Units a requester may use at once.
pub const PAGE_UNITS_BURST: f64 = 2.0 * PAGE_UNITS_PER_S;
/// Requesters with a bucket at most; beyond, a new one finds room only once a bucket is full
/// again (its requester idle), else it is refused.
pub const MAX_REQUESTERS: usize = 4_096;

/// A refused page: milliseconds until the requester's bucket holds its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfterMs(pub u64);

#[derive(Debug, Clone, Copy)]
struct Bucket {
    units: f64,
    at_us: u64,
}

impl Bucket {
    /// The units it holds at `now_us`: `min(burst, units + rate x elapsed)`.
    fn at(self, now_us: u64, rate: f64, burst: f64) -> f64 {
        (self.units + rate * now_us.saturating_sub(self.at_us) as f64 / 1e6).min(burst)
    }
}

/// The buckets, by requester.
#[derive(Debug)]
pub struct PageRate {
    rate: f64,
    burst: f64,
    max_requesters: usize,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Default for PageRate {
    fn default() -> Self {
        PageRate::new(PAGE_UNITS_PER_S, PAGE_UNITS_BURST, MAX_REQUESTERS)
    }
}

impl PageRate {
    pub fn new(rate: f64, burst: f64, max_requesters: usize) -> PageRate {
        PageRate { rate: rate.max(1.0), burst: burst.max(1.0), max_requesters, buckets: Mutex::default() }
    }

    /// Take `units` from `requester`'s bucket at `now_us` if it holds `min(units, burst)`; else
    /// how long until it will.
    pub fn take(&self, requester: &str, units: usize, now_us: u64) -> Result<(), RetryAfterMs> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (rate, burst) = (self.rate, self.burst);
        if !buckets.contains_key(requester) && buckets.len() >= self.max_requesters {
            buckets.retain(|_, b| b.at(now_us, rate, burst) < burst);
            if buckets.len() >= self.max_requesters {
                return Err(RetryAfterMs(1_000));
            }
        }
        let bucket = buckets.entry(requester.to_string()).or_insert(Bucket { units: burst, at_us: now_us });
        let held = bucket.at(now_us, rate, burst);
        let needed = (units as f64).min(burst);
        if held < needed {
            return Err(RetryAfterMs(((needed - held) / rate * 1e3).ceil() as u64));
        }
        *bucket = Bucket { units: held - units as f64, at_us: now_us };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requester_gets_the_burst_then_the_rate_and_others_keep_theirs() {
        let rate = PageRate::new(1_000.0, 2_000.0, 16);
        assert_eq!(rate.take("a", 1_500, 0), Ok(()));
        // 500 left: 600 more wait 100 ms of the rate.
        assert_eq!(rate.take("a", 600, 0), Err(RetryAfterMs(100)));
        assert_eq!(rate.take("a", 600, 100_000), Ok(()));
        // Another requester has its own bucket.
        assert_eq!(rate.take("b", 2_000, 100_000), Ok(()));
        // Back to back, a requester gets the rate: 10 s of 100-unit pages every 10 ms ...
        let mut served = 0;
        for step in 0..1_000u64 {
            served += usize::from(rate.take("c", 100, step * 10_000).is_ok());
        }
        // ... the burst and 1,000 units a second after it: 20 + 10 x 10 pages (the last due at 10 s).
        assert_eq!(served, 20 + 99);
    }

    #[test]
    fn a_page_larger_than_the_burst_is_served_from_a_full_bucket_and_its_debt_waited_out() {
        let rate = PageRate::new(1_000.0, 2_000.0, 16);
        assert_eq!(rate.take("a", 5_000, 0), Ok(()));
        // 3,000 units owed, then 2,000 to fill again: 5 s.
        assert_eq!(rate.take("a", 5_000, 0), Err(RetryAfterMs(5_000)));
        assert!(rate.take("a", 1, 2_999_000).is_err());
        assert_eq!(rate.take("a", 1, 3_001_000), Ok(()));
    }

    #[test]
    fn beyond_the_requesters_a_new_one_waits_for_an_idle_bucket() {
        let rate = PageRate::new(1_000.0, 2_000.0, 2);
        assert_eq!(rate.take("a", 2_000, 0), Ok(()));
        assert_eq!(rate.take("b", 2_000, 0), Ok(()));
        assert_eq!(rate.take("c", 1, 0), Err(RetryAfterMs(1_000)));
        // Once a's bucket is full again (2 s), its place is free.
        assert_eq!(rate.take("c", 1, 2_000_000), Ok(()));
        assert!(rate.take("b", 2_000, 2_000_000).is_ok());
    }
}
