//! How often a VM ticks (publishes its snapshot, folds in the other VMs' snapshots and the
//! aggregator's views, elects the VM that reports): every `sync_interval_ms` while requests arrive
//! fast, less often as they thin out, so that a tick has some requests' worth of news to fold in.
//! A tick costs about the same whatever it folds in; at a few requests per second, ticks at the
//! busy rate would cost a sidecar more CPU than its requests.

/// Requests a tick should have arrived since the last one (its news to fold in).
pub const REQUESTS_PER_TICK: u64 = 20;
/// The slowest tick is this many sync intervals, and at most `SLOWEST_TICK_CAP_MS`.
pub const SLOWEST_TICK_FACTOR: u64 = 5;
pub const SLOWEST_TICK_CAP_MS: u64 = 1_000;

/// The slowest tick period (an idle VM's, and what liveness between VMs is judged by):
/// `max(sync_ms, min(SLOWEST_TICK_FACTOR x sync_ms, SLOWEST_TICK_CAP_MS))`.
pub fn slowest_tick_ms(sync_ms: u64) -> u64 {
    sync_ms.saturating_mul(SLOWEST_TICK_FACTOR).min(SLOWEST_TICK_CAP_MS).max(sync_ms)
}

/// The tick period for a VM that handled `requests_per_s` over its last tick: the longest
/// `sync_ms x 2^k` (k >= 0) not above `REQUESTS_PER_TICK x 1000 / requests_per_s` ms, capped at
/// `slowest_tick_ms(sync_ms)`. Powers of two keep the period on a few steady levels while the rate
/// wobbles; an idle VM (0 requests) ticks at the slowest period.
pub fn tick_period_ms(requests_per_s: u64, sync_ms: u64) -> u64 {
    let slowest = slowest_tick_ms(sync_ms);
    let Some(wanted) = (REQUESTS_PER_TICK * 1_000).checked_div(requests_per_s) else { return slowest };
    let mut period = sync_ms.max(1);
    while period.saturating_mul(2) <= wanted && period < slowest {
        period = period.saturating_mul(2);
    }
    period.min(slowest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_vms_tick_every_sync_interval() {
        for rps in [100, 150, 1_000, 100_000] {
            assert_eq!(tick_period_ms(rps, 200), 200, "{rps} rps");
        }
    }

    #[test]
    fn the_period_doubles_as_requests_thin_out_up_to_the_slowest() {
        // 20 requests per tick: 50 rps -> 400 ms, 25 rps -> 800 ms, 12 rps -> 1.6 s, capped at 1 s.
        assert_eq!(tick_period_ms(99, 200), 200);
        assert_eq!(tick_period_ms(50, 200), 400);
        assert_eq!(tick_period_ms(30, 200), 400);
        assert_eq!(tick_period_ms(25, 200), 800);
        assert_eq!(tick_period_ms(20, 200), 800);
        assert_eq!(tick_period_ms(12, 200), 1_000);
        assert_eq!(tick_period_ms(10, 200), 1_000);
        assert_eq!(tick_period_ms(1, 200), 1_000);
        assert_eq!(tick_period_ms(0, 200), 1_000);
    }

    #[test]
    fn the_slowest_tick_is_five_sync_intervals_at_most_a_second_never_below_the_sync_interval() {
        assert_eq!(slowest_tick_ms(100), 500);
        assert_eq!(slowest_tick_ms(200), 1_000);
        assert_eq!(slowest_tick_ms(400), 1_000);
        assert_eq!(slowest_tick_ms(5_000), 5_000);
        assert_eq!(tick_period_ms(0, 5_000), 5_000);
        assert_eq!(tick_period_ms(1_000, 5_000), 5_000);
        // A fast sync interval: powers of two from 50 ms up to 250 ms.
        assert_eq!(tick_period_ms(10, 50), 250);
        assert_eq!(tick_period_ms(150, 50), 100);
    }

    #[test]
    fn extreme_inputs_do_not_overflow() {
        assert_eq!(tick_period_ms(u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(slowest_tick_ms(u64::MAX), u64::MAX);
    }
}
