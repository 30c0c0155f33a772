//! How much weights-page work requesters may have done: a token bucket per principal (or peer
//! address) of `PAGE_UNITS_PER_S` units a second, holding at most twice that, and one for all
//! requesters together of `ALL_PAGE_UNITS_PER_S`, likewise; a unit is one cluster or one endpoint
//! of a page (what its copies and JSON cost, `weights_page.rs`). A page is built only while both
//! buckets hold its units (or are full: a page larger than a burst is allowed then, and the debt
//! waits it out), so a requester polling pages back to back gets `PAGE_UNITS_PER_S` units a second
//! of them and 429 for the rest, and any number of pollers together cost at most
//! `ALL_PAGE_UNITS_PER_S` units a second of the aggregator's core, however fast they ask (they can
//! keep other inspectors waiting; the reports are not in these buckets). Pure: time is an
//! argument.
//! Hand-written: tower's rate limit keeps one bucket for all callers, counts requests rather than
//! their cost, and waits rather than refusing.

use std::collections::HashMap;
use std::sync::Mutex;

/// Units a second per requester: one of the largest pages (8,192 endpoints and 64 clusters,
/// about 12 ms of one core to copy and serialise in the benchmark) a second, with the scan of
/// the names of a full book (4,096 clusters, `weights_page::scan_units`) that finds it.
pub const PAGE_UNITS_PER_S: f64 = 8_192.0 + 64.0 + 64.0;
/// Units a second for all requesters together: two of the largest pages.
pub const ALL_PAGE_UNITS_PER_S: f64 = 2.0 * PAGE_UNITS_PER_S;
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

/// The buckets: one per requester, one for all.
#[derive(Debug)]
pub struct PageRate {
    /// Units a second (per requester, for all), each bucket holding at most twice its rate.
    rate: f64,
    all_rate: f64,
    max_requesters: usize,
    buckets: Mutex<(Bucket, HashMap<String, Bucket>)>,
}

impl Default for PageRate {
    fn default() -> Self {
        PageRate::new(PAGE_UNITS_PER_S, ALL_PAGE_UNITS_PER_S, MAX_REQUESTERS)
    }
}

impl PageRate {
    pub fn new(rate: f64, all_rate: f64, max_requesters: usize) -> PageRate {
        let (rate, all_rate) = (rate.max(1.0), all_rate.max(1.0));
        let all = Bucket { units: 2.0 * all_rate, at_us: 0 };
        PageRate { rate, all_rate, max_requesters, buckets: Mutex::new((all, HashMap::new())) }
    }

    /// Take `units` from `requester`'s bucket and the one for all at `now_us` if each holds
    /// `min(units, its burst)`; else how long until both will.
    pub fn take(&self, requester: &str, units: usize, now_us: u64) -> Result<(), RetryAfterMs> {
        let mut guard = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (all, buckets) = &mut *guard;
        let (rate, burst) = (self.rate, 2.0 * self.rate);
        if !buckets.contains_key(requester) && buckets.len() >= self.max_requesters {
            buckets.retain(|_, b| b.at(now_us, rate, burst) < burst);
            if buckets.len() >= self.max_requesters {
                return Err(RetryAfterMs(1_000));
            }
        }
        let mine = buckets.get(requester).map_or(burst, |b| b.at(now_us, rate, burst));
        let everyone = all.at(now_us, self.all_rate, 2.0 * self.all_rate);
        let short = |held: f64, rate: f64| ((units as f64).min(2.0 * rate) - held).max(0.0) / rate;
        let wait_s = short(mine, rate).max(short(everyone, self.all_rate));
        if wait_s > 0.0 {
            return Err(RetryAfterMs((wait_s * 1e3).ceil() as u64));
        }
        buckets.insert(requester.to_string(), Bucket { units: mine - units as f64, at_us: now_us });
        *all = Bucket { units: everyone - units as f64, at_us: now_us };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requester_gets_the_burst_then_the_rate_and_others_keep_theirs() {
        let rate = PageRate::new(1_000.0, 1e9, 16);
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
        let rate = PageRate::new(1_000.0, 1e9, 16);
        assert_eq!(rate.take("a", 5_000, 0), Ok(()));
        // 3,000 units owed, then 2,000 to fill again: 5 s.
        assert_eq!(rate.take("a", 5_000, 0), Err(RetryAfterMs(5_000)));
        assert!(rate.take("a", 1, 2_999_000).is_err());
        assert_eq!(rate.take("a", 1, 3_001_000), Ok(()));
    }

    #[test]
    fn beyond_the_requesters_a_new_one_waits_for_an_idle_bucket() {
        let rate = PageRate::new(1_000.0, 1e9, 2);
        assert_eq!(rate.take("a", 2_000, 0), Ok(()));
        assert_eq!(rate.take("b", 2_000, 0), Ok(()));
        assert_eq!(rate.take("c", 1, 0), Err(RetryAfterMs(1_000)));
        // Once a's bucket is full again (2 s), its place is free.
        assert_eq!(rate.take("c", 1, 2_000_000), Ok(()));
        assert!(rate.take("b", 2_000, 2_000_000).is_ok());
    }

    #[test]
    fn any_number_of_requesters_together_get_the_rate_for_all() {
        // Each may have 1,000 a second, all together 1,500 (bursts: 2,000 and 3,000).
        let rate = PageRate::new(1_000.0, 1_500.0, 64);
        assert_eq!(rate.take("a", 2_000, 0), Ok(()));
        assert_eq!(rate.take("b", 1_000, 0), Ok(()));
        // c's own bucket is full, the one for all is empty: 1,000 wait 2/3 s of its rate.
        assert_eq!(rate.take("c", 1_000, 0), Err(RetryAfterMs(667)));
        // Fifty requesters asking 100 units every 10 ms for 10 s get 1,500 a second in all.
        let mut served = 0;
        for step in 0..1_000u64 {
            for who in 0..50 {
                served += usize::from(rate.take(&format!("p{who}"), 100, 1_000_000 + step * 10_000).is_ok());
            }
        }
        // 1 s of refill before the first step (1,500) and 9.99 s after it (14,985): 164 pages.
        assert_eq!(served, 164);
    }
}
