use super::*;

const SEC: u64 = 1_000_000;
const INTERVAL: u64 = SEC;

/// A report of `requests` (a tenth of them failed, 10 ms each success) counted for `counted_ms`.
fn counters(requests: u64, counted_ms: Option<u64>) -> EndpointReport {
    let errors = requests / 10;
    EndpointReport {
        address: "10.0.0.1:8080".into(),
        requests,
        errors,
        latency_sum_us: (requests - errors) * 10_000,
        seen_age_ms: Some(0),
        counted_ms,
        ..EndpointReport::default()
    }
}

fn first(e: &EndpointReport, now: u64) -> Observation {
    Observation::first(e, 1, 0, new_counters_us(e.counted_ms, INTERVAL), INTERVAL, now + 3 * SEC, now)
}

#[test]
fn new_counters_are_rated_at_once_over_at_least_an_interval() {
    let now = 100 * SEC;
    // Counted for 1.5 intervals: over the span.
    let o = first(&counters(150, Some(1_500)), now);
    assert_eq!(o.rates(now), (100.0, 10.0));
    assert_eq!((o.successes, o.mean_latency_us), (135, Some(10_000.0)));
    assert_eq!(o.served_us, Some(now), "its good answers count as served");
    // Counted for a fifth of an interval: over the interval (the next window replaces it then).
    let o = first(&counters(20, Some(200)), now);
    assert_eq!(o.rates(now), (20.0, 2.0));
    // Exactly two intervals: still new.
    assert_eq!(first(&counters(200, Some(2_000)), now).rates(now), (100.0, 10.0));
    // The next report takes the difference from these counters, as every window.
    let mut o = first(&counters(150, Some(1_500)), now);
    o.update(&counters(200, Some(2_500)), 1, INTERVAL, now + 4 * SEC, now + SEC);
    assert_eq!(o.rates(now + SEC), (50.0, 5.0));
}

#[test]
fn counters_absent_or_older_than_two_intervals_start_a_window_at_the_report() {
    let now = 100 * SEC;
    for counted in [None, Some(2_001), Some(3_600_000)] {
        let mut o = first(&counters(1_000, counted), now);
        assert_eq!(o.rates(now), (0.0, 0.0), "{counted:?}");
        assert_eq!(o.served_us, None);
        o.update(&counters(1_050, counted.map(|c| c + 1_000)), 1, INTERVAL, now + 4 * SEC, now + SEC);
        assert_eq!(o.rates(now + SEC).0, 50.0, "{counted:?}: the requests since the first report only");
    }
}

#[test]
fn a_reset_starts_a_window_at_the_report_whatever_the_span() {
    let now = 100 * SEC;
    let mut o = first(&counters(1_000, None), now);
    o.update(&counters(1_050, None), 1, INTERVAL, now + 4 * SEC, now + SEC);
    // The counters went down (the endpoint forgotten and met again, or one worker's part gone):
    // the last window's rate holds, nothing is taken from the new counters yet.
    o.update(&counters(30, Some(500)), 1, INTERVAL, now + 5 * SEC, now + 2 * SEC);
    assert_eq!(o.rates(now + 2 * SEC).0, 50.0);
    o.update(&counters(70, Some(1_500)), 1, INTERVAL, now + 6 * SEC, now + 3 * SEC);
    assert_eq!(o.rates(now + 3 * SEC).0, 40.0);
    // A new incarnation on the same observation: the same.
    o.update(&counters(10, Some(100)), 2, INTERVAL, now + 7 * SEC, now + 4 * SEC);
    assert_eq!((o.incarnation, o.rates(now + 4 * SEC).0), (2, 40.0));
    o.update(&counters(30, Some(1_100)), 2, INTERVAL, now + 8 * SEC, now + 5 * SEC);
    assert_eq!(o.rates(now + 5 * SEC).0, 20.0);
}

#[test]
fn the_window_of_new_counters_is_the_longer_of_span_and_interval_up_to_two_intervals() {
    assert_eq!(new_counters_us(None, INTERVAL), None);
    assert_eq!(new_counters_us(Some(0), INTERVAL), Some(INTERVAL));
    assert_eq!(new_counters_us(Some(700), INTERVAL), Some(INTERVAL));
    assert_eq!(new_counters_us(Some(1_300), INTERVAL), Some(1_300_000));
    assert_eq!(new_counters_us(Some(2_000), INTERVAL), Some(2 * INTERVAL));
    assert_eq!(new_counters_us(Some(2_001), INTERVAL), None);
    assert_eq!(new_counters_us(Some(u64::MAX), INTERVAL), None);
    assert_eq!(new_counters_us(Some(0), 0), None, "no interval: nothing to rate over");
}
