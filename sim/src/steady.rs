//! Cold start apart from the steady state. Every proxy starts at once, without a view and without
//! samples, so the first seconds of a run hold queues that a steady-state mesh does not have; how
//! long they take to drain depends on the policy. From the latencies by arrival second of the
//! whole run (warm-up included):
//! - the steady-state p99 is the p99 of the requests that arrived in the last half of the
//!   recorded part (`STEADY_SHARE`);
//! - the cold start is the seconds from the start of the run until the first one-second window
//!   from which on every window's p99 stays within `COLD_START_BAND` x the steady-state p99
//!   (the mesh has settled); 0 when every window does.

use crate::histogram::Histogram;
use serde::Serialize;

/// Width of the windows the cold start is measured in.
pub const SECOND_NS: u64 = 1_000_000_000;
/// The share of the recorded part, at its end, that is the steady state.
pub const STEADY_SHARE: f64 = 0.5;
/// A window has settled while its p99 is within this factor of the steady-state p99.
pub const COLD_START_BAND: f64 = 1.25;
/// The opening of a run whose requests per endpoint group are counted apart (`GroupShare::opening_share`):
/// the seconds in which proxies start without a view from the aggregator.
pub const OPENING_NS: u64 = 3 * SECOND_NS;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SteadyState {
    /// p99 (ms) of the requests that arrived in the steady-state window.
    pub p99_ms: f64,
    /// Where the steady-state window starts, seconds from the start of the run.
    pub from_s: f64,
    /// Seconds from the start of the run until the mesh settled (see the module docs).
    pub cold_start_s: f64,
}

/// `per_second[i]`: latencies (ns) of the requests that arrived in second i of the run; the
/// recorded part is `[warmup_s, end_s)`. None when the steady-state window holds no request.
pub fn steady_state(per_second: &[Histogram], warmup_s: f64, end_s: f64) -> Option<SteadyState> {
    let from = (end_s - (end_s - warmup_s) * STEADY_SHARE).ceil().max(0.0) as usize;
    let until = (end_s.floor() as usize).min(per_second.len());
    let mut steady = Histogram::default();
    for h in per_second.get(from..until)? {
        steady.merge(h);
    }
    if steady.count() == 0 {
        return None;
    }
    let p99 = steady.quantile(0.99) as f64;
    let settled = |h: &Histogram| h.count() == 0 || h.quantile(0.99) as f64 <= COLD_START_BAND * p99;
    let last_unsettled = per_second[..until].iter().rposition(|h| !settled(h));
    Some(SteadyState {
        p99_ms: (p99 / 1e3).round() / 1e3,
        from_s: from as f64,
        cold_start_s: last_unsettled.map_or(0.0, |i| (i + 1) as f64),
    })
}

/// The p99 (ms) of each one-second window of `per_second`, 0 for a window without requests: the
/// series the cold start is read from.
pub fn p99_by_second_ms(per_second: &[Histogram]) -> Vec<f64> {
    per_second
        .iter()
        .map(|h| if h.count() == 0 { 0.0 } else { (h.quantile(0.99) as f64 / 1e3).round() / 1e3 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(latencies_ms: &[u64]) -> Histogram {
        let mut h = Histogram::default();
        latencies_ms.iter().for_each(|ms| h.record(ms * 1_000_000));
        h
    }

    #[test]
    fn the_cold_start_ends_after_the_last_slow_second_and_the_steady_p99_ignores_it() {
        // 10 s run, 2 s warm-up: the steady window is seconds 6..10. Seconds 0..3 are slow, second
        // 4 settles, second 5 is within the band (12 <= 1.25 x 10).
        let mut run: Vec<Histogram> = [500, 300, 200, 100].iter().map(|&ms| second(&[ms; 100])).collect();
        run.push(second(&[10; 100]));
        run.push(second(&[12; 100]));
        run.extend((0..4).map(|_| second(&[10; 100])));
        let s = steady_state(&run, 2.0, 10.0).unwrap();
        assert!((s.p99_ms - 10.0).abs() <= 0.08, "within the histogram's 0.8%: {s:?}");
        assert_eq!((s.from_s, s.cold_start_s), (6.0, 4.0));
        // A late slow second (past the band) moves the end of the cold start there.
        run[5] = second(&[40; 100]);
        assert_eq!(steady_state(&run, 2.0, 10.0).unwrap().cold_start_s, 6.0);
        let series = p99_by_second_ms(&run);
        assert_eq!(series.len(), 10);
        assert!((series[0] - 500.0).abs() <= 4.0 && (series[5] - 40.0).abs() <= 0.32, "{series:?}");
    }

    #[test]
    fn settled_from_the_start_is_zero_and_an_empty_window_is_none() {
        let run: Vec<Histogram> = (0..6).map(|_| second(&[20; 10])).collect();
        assert_eq!(steady_state(&run, 2.0, 6.0).unwrap().cold_start_s, 0.0);
        let empty: Vec<Histogram> = (0..6).map(|_| Histogram::default()).collect();
        assert_eq!(steady_state(&empty, 2.0, 6.0), None);
        assert_eq!(p99_by_second_ms(&empty), vec![0.0; 6]);
    }
}
