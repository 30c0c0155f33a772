//! How often periodic work runs. A VM ticks (publishes its snapshot, folds in the other VMs'
//! snapshots and the aggregator's views, elects the VM that reports) every `sync_interval_ms`
//! while requests arrive fast, less often as they thin out, so that a tick has some requests'
//! worth of news to fold in. An Envoy reports every `report_interval_ms` likewise, less often at
//! a few requests per second. A tick or a report costs about the same whatever it carries; at
//! the busy rate, a lightly loaded sidecar would pay more CPU for them than for its requests.

/// Requests a tick should have arrived since the last one (its news to fold in).
pub const REQUESTS_PER_TICK: u64 = 20;
/// The slowest tick is this many sync intervals, and at most `SLOWEST_TICK_CAP_MS`.
pub const SLOWEST_TICK_FACTOR: u64 = 5;
pub const SLOWEST_TICK_CAP_MS: u64 = 1_000;

/// Requests (Envoy-wide) a report should carry news of.
pub const REQUESTS_PER_REPORT: u64 = 50;
/// The slowest report period is the report interval doubled at most this many times, and not
/// above `SLOWEST_REPORT_CAP_MS` (the aggregator takes a claimed interval of up to 10 s by default).
pub const SLOWEST_REPORT_DOUBLINGS: u32 = 2;
pub const SLOWEST_REPORT_CAP_MS: u64 = 8_000;

/// A rate in whole requests per second: `requests x 1000 / max(elapsed_ms, 1)` (saturating).
pub fn requests_per_s(requests: u64, elapsed_ms: u64) -> u64 {
    requests.saturating_mul(1_000) / elapsed_ms.max(1)
}

/// The slowest tick period (an idle VM's, and what liveness between VMs is judged by):
/// `max(sync_ms, min(SLOWEST_TICK_FACTOR x sync_ms, SLOWEST_TICK_CAP_MS))`.
pub fn slowest_tick_ms(sync_ms: u64) -> u64 {
    sync_ms.saturating_mul(SLOWEST_TICK_FACTOR).min(SLOWEST_TICK_CAP_MS).max(sync_ms)
}

/// The tick period for a VM that handled `requests_per_s` over its last tick:
/// `stretched_period_ms(sync_ms, REQUESTS_PER_TICK, requests_per_s, slowest_tick_ms(sync_ms))`.
pub fn tick_period_ms(requests_per_s: u64, sync_ms: u64) -> u64 {
    stretched_period_ms(sync_ms, REQUESTS_PER_TICK, requests_per_s, slowest_tick_ms(sync_ms))
}

/// The slowest report period (an Envoy at a request every few seconds): the longest
/// `interval_ms x 2^k`, k <= SLOWEST_REPORT_DOUBLINGS, not above SLOWEST_REPORT_CAP_MS (at least
/// `interval_ms`). A power-of-two multiple, so that report periods nest (see `report_period_ms`).
pub fn slowest_report_ms(interval_ms: u64) -> u64 {
    (0..SLOWEST_REPORT_DOUBLINGS).fold(interval_ms, |p, _| {
        if p.saturating_mul(2) <= SLOWEST_REPORT_CAP_MS {
            p * 2
        } else {
            p
        }
    })
}

/// The report period for an Envoy that handled `requests` in the `elapsed_ms` since its last
/// report: `stretched_period_ms(interval_ms, REQUESTS_PER_REPORT, requests_per_s(requests,
/// max(elapsed_ms, interval_ms)), slowest_report_ms(interval_ms))`; `interval_ms` when `requests`
/// is None (unknown: the count went down, an endpoint forgotten with its counts, e.g. in a rollout). The rate is taken over at least
/// one interval: the VMs count as of their last tick (each reads the others' snapshots), so right
/// after a report another VM's count is ahead by up to a tick's requests, which over a few
/// milliseconds would look like a burst. A report declares the period it was sent at (the
/// aggregator keeps a reporter, and its views hold, for a few of the intervals it declares). The
/// periods nest (each a multiple of the shorter ones), so reports go out at multiples of the
/// period and a change of period never sends two reports in one period.
pub fn report_period_ms(requests: Option<u64>, elapsed_ms: u64, interval_ms: u64) -> u64 {
    let Some(requests) = requests else { return interval_ms };
    let rate = requests_per_s(requests, elapsed_ms.max(interval_ms));
    stretched_period_ms(interval_ms, REQUESTS_PER_REPORT, rate, slowest_report_ms(interval_ms))
}

/// The longest `base_ms x 2^k` (k >= 0) not above `requests x 1000 / requests_per_s` ms, capped
/// at `slowest_ms` (never below `base_ms`): long enough for `requests` to arrive. Powers of two
/// keep the period on a few steady levels while the rate wobbles; at 0 requests per second it is
/// the slowest.
fn stretched_period_ms(base_ms: u64, requests: u64, requests_per_s: u64, slowest_ms: u64) -> u64 {
    let Some(wanted) = (requests * 1_000).checked_div(requests_per_s) else { return slowest_ms };
    let mut period = base_ms.max(1);
    while period.saturating_mul(2) <= wanted && period < slowest_ms {
        period = period.saturating_mul(2);
    }
    period.min(slowest_ms)
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
    fn reports_stretch_from_every_interval_to_four_as_requests_thin_out() {
        // 50 requests per report: >= 50 rps -> 1 s, 25 rps -> 2 s, 10 rps -> 4 s (capped).
        for requests in [50, 100, 1_000, 100_000] {
            assert_eq!(report_period_ms(Some(requests), 1_000, 1_000), 1_000, "{requests} requests in 1 s");
        }
        // (requests, elapsed ms, interval ms) -> period ms. A short interval stretches by the same
        // factor; a long one stops at the cap, at a power-of-two multiple, never below the
        // interval itself.
        for (requests, elapsed, interval, period) in [
            (49, 1_000, 1_000, 1_000),
            (50, 2_000, 1_000, 2_000),
            (26, 2_000, 1_000, 2_000),
            (24, 2_000, 1_000, 4_000),
            (40, 4_000, 1_000, 4_000),
            (0, 1_000, 1_000, 4_000),
            (0, 800, 200, 800),
            (20, 200, 200, 400),
            (0, 6_000, 3_000, 6_000),
            (0, 5_000, 5_000, 5_000),
            (0, 10_000, 10_000, 10_000),
            (10_000, 10_000, 10_000, 10_000),
        ] {
            assert_eq!(
                report_period_ms(Some(requests), elapsed, interval),
                period,
                "{requests} in {elapsed} ms / {interval}"
            );
        }
    }

    #[test]
    fn a_few_requests_just_after_a_report_are_no_burst() {
        // 4 requests 10 ms after the last report: 4 per interval, not 400 per second.
        assert_eq!(report_period_ms(Some(4), 10, 1_000), 4_000);
        assert_eq!(report_period_ms(Some(4), 10, 250), 1_000);
        // A real burst over a whole interval does shorten the period.
        assert_eq!(report_period_ms(Some(60), 900, 1_000), 1_000);
    }

    #[test]
    fn an_unknown_count_reports_at_the_interval() {
        assert_eq!(report_period_ms(None, 10_000, 1_000), 1_000);
        assert_eq!(report_period_ms(None, 0, 250), 250);
    }

    #[test]
    fn report_periods_nest_so_their_multiples_line_up() {
        for interval in [100, 250, 1_000, 3_000, 10_000] {
            let periods: Vec<u64> = (0..200).map(|n| report_period_ms(Some(n), interval, interval)).collect();
            let slowest = slowest_report_ms(interval);
            for p in &periods {
                assert!(*p >= interval && *p <= slowest && *p % interval == 0, "{interval}: {p}");
                assert!(periods.iter().all(|q| q.max(p) % q.min(p) == 0), "{interval}: {p} and the others");
            }
        }
    }

    #[test]
    fn rates_are_whole_requests_per_second() {
        assert_eq!(requests_per_s(40, 4_000), 10);
        assert_eq!(requests_per_s(3, 200), 15);
        assert_eq!(requests_per_s(5, 0), 5_000);
        assert_eq!(requests_per_s(u64::MAX, 1_000), u64::MAX / 1_000);
    }

    #[test]
    fn extreme_inputs_do_not_overflow() {
        assert_eq!(tick_period_ms(u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(slowest_tick_ms(u64::MAX), u64::MAX);
        assert_eq!(report_period_ms(Some(u64::MAX), u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(report_period_ms(Some(u64::MAX), 0, 1), 1);
        assert_eq!(slowest_report_ms(u64::MAX), u64::MAX);
    }
}
