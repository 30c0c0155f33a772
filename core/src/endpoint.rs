//! What one worker knows about one upstream endpoint: its own observations, what the other workers
//! of the same proxy saw (shared data), and the aggregator's view of all proxies.
//!
//! The per-request score uses only this proxy's own knowledge (its workers' in-flight counts and
//! latency samples). The aggregator's view is up to a report interval old and the same for every
//! proxy: scoring requests with its instantaneous in-flight counts or queueing latencies sends all
//! proxies to the same "idle" endpoints until the next view (the herd effect of stale shared load
//! information; measured in sim/README.md). It steers through the sampling weights instead.

use crate::config::PickParams;
use crate::ewma::{DecayingRatio, PeakEwma};
use crate::orca::OrcaLoad;

/// Weight given to an endpoint whose aggregator weight is zero or missing in sampling.
const MIN_SAMPLING_WEIGHT: f64 = 1e-3;
/// Each failure moves the failure ratio by at least this much, however busy the endpoint.
const FAILURE_MIN_STEP: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub address: String,
    pub local: LocalStats,
    pub siblings: SiblingStats,
    /// From the aggregator; only used while the cluster's view is fresh.
    pub global: Option<GlobalStats>,
    /// Last time it served a request here or appeared in a view.
    pub last_seen_us: u64,
}

/// Observations of this worker. Counters are cumulative (reports carry them as they are).
#[derive(Debug, Clone, Default)]
pub struct LocalStats {
    pub inflight: u32,
    pub requests: u64,
    pub errors: u64,
    pub latency_sum_us: u64,
    pub latency: Option<PeakEwma>,
    pub failures: DecayingRatio,
    /// ORCA utilisation and when it was received.
    pub cpu: Option<(f64, u64)>,
}

/// The other workers of this proxy, as of their last publication.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiblingStats {
    pub inflight: u32,
    /// Freshest sibling latency estimate and the time of its last sample.
    pub latency: Option<(f64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalStats {
    pub weight: f64,
    /// All proxies' mean latency: only a cluster-wide prior (see `Cluster::refresh_prior`).
    pub latency_us: f64,
    pub ejected: bool,
}

/// How a request ended, as far as the endpoint that served it is concerned.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestOutcome<'a> {
    /// `upstream.address`: the endpoint that actually served (None: no upstream was reached).
    pub served: Option<&'a str>,
    pub latency_us: u64,
    /// 5xx, reset or timeout.
    pub failed: bool,
    pub load: Option<OrcaLoad>,
}

impl Endpoint {
    pub fn new(address: &str, now_us: u64) -> Self {
        Endpoint {
            address: address.to_string(),
            local: LocalStats::default(),
            siblings: SiblingStats::default(),
            global: None,
            last_seen_us: now_us,
        }
    }

    /// Record a completed request this endpoint served (or failed to serve).
    pub fn record(&mut self, latency_us: u64, failed: bool, load: Option<OrcaLoad>, now_us: u64, p: &PickParams) {
        let l = &mut self.local;
        l.requests += 1;
        let sample = if failed {
            l.errors += 1;
            // A failure is never cheap: it weighs at least failure_latency, so fast 503s repel.
            (latency_us as f64).max(p.failure_latency_us)
        } else {
            l.latency_sum_us = l.latency_sum_us.saturating_add(latency_us);
            latency_us as f64
        };
        match &mut l.latency {
            Some(ewma) => ewma.observe(sample, now_us, p.latency_decay_us),
            None => l.latency = Some(PeakEwma::new(sample, now_us)),
        }
        l.failures.observe(failed, now_us, p.latency_decay_us, FAILURE_MIN_STEP);
        if let Some(cpu) = load.and_then(|o| o.utilization()) {
            l.cpu = Some((cpu, now_us));
        }
        if !failed {
            self.last_seen_us = self.last_seen_us.max(now_us);
        }
    }

    /// Latency to expect: the freshest of this worker's and its siblings' estimates while fresh,
    /// else the cluster's prior.
    pub fn expected_latency_us(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        self.fresh_latency_us(now_us, p).unwrap_or(prior_us)
    }

    /// Requests in flight from this proxy: this worker's and its siblings'.
    pub fn load(&self) -> f64 {
        self.local.inflight as f64 + self.siblings.inflight as f64
    }

    /// Expected cost of sending one more request here: (in flight + 1) x latency, inflated by recent
    /// failures. Lower is better.
    pub fn score(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        let failure_ratio = self.local.failures.value_at(now_us, p.stale_after_us as f64);
        (self.load() + 1.0) * self.expected_latency_us(now_us, p, prior_us) * (1.0 + p.error_penalty * failure_ratio)
    }

    pub fn sampling_weight(&self, global_fresh: bool) -> f64 {
        match self.global {
            Some(g) if global_fresh => {
                if g.ejected {
                    0.0
                } else {
                    g.weight.max(MIN_SAMPLING_WEIGHT)
                }
            }
            _ => 1.0,
        }
    }

    /// The freshest of this worker's and its siblings' latency estimates, if sampled within
    /// `stale_after`.
    pub fn fresh_latency_us(&self, now_us: u64, p: &PickParams) -> Option<f64> {
        let local = self.local.latency.map(|e| (e.value_us(), e.stamp_us()));
        let freshest = match (local, self.siblings.latency) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        };
        freshest.filter(|(_, stamp)| now_us.saturating_sub(*stamp) < p.stale_after_us).map(|(v, _)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> PickParams {
        PickParams { failure_latency_us: 100_000.0, stale_after_us: 1_000_000, ..PickParams::default() }
    }

    #[test]
    fn success_updates_counters_latency_and_last_seen() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(2_000, false, None, 10, &params());
        e.record(4_000, false, None, 20, &params());
        assert_eq!((e.local.requests, e.local.errors, e.local.latency_sum_us), (2, 0, 6_000));
        assert_eq!(e.local.latency.unwrap().value_us(), 4_000.0, "peak rises at once");
        assert_eq!(e.last_seen_us, 20);
    }

    #[test]
    fn a_fast_failure_counts_as_a_slow_sample_and_is_kept_out_of_the_latency_sum() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(50, true, None, 10, &params());
        assert_eq!((e.local.requests, e.local.errors, e.local.latency_sum_us), (1, 1, 0));
        assert_eq!(e.local.latency.unwrap().value_us(), 100_000.0);
        assert!(e.local.failures.value() > 0.0);
        assert_eq!(e.last_seen_us, 0, "a failure does not keep an endpoint alive");
    }

    #[test]
    fn score_is_inflight_plus_one_times_latency() {
        let p = params();
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(1_000, false, None, 0, &p);
        e.local.inflight = 3;
        assert_eq!(e.score(0, &p, 5_000.0), 4.0 * 1_000.0);
        e.siblings.inflight = 2;
        assert_eq!(e.score(0, &p, 5_000.0), 6.0 * 1_000.0);
    }

    #[test]
    fn the_aggregators_counts_and_latency_never_enter_the_score() {
        let p = params();
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(1_000, false, None, 0, &p);
        let own = e.score(0, &p, 5_000.0);
        e.global = Some(GlobalStats { weight: 3.0, latency_us: 70_000.0, ejected: false });
        assert_eq!(e.score(0, &p, 5_000.0), own);
        assert_eq!(own, 1_000.0);
    }

    #[test]
    fn stale_local_latency_yields_to_the_prior() {
        let p = params();
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(1_000, false, None, 0, &p);
        e.global = Some(GlobalStats { weight: 1.0, latency_us: 7_000.0, ejected: false });
        let later = p.stale_after_us + 1;
        assert_eq!(e.expected_latency_us(later, &p, 5_000.0), 5_000.0);
        assert_eq!(e.expected_latency_us(later - 2, &p, 5_000.0), 1_000.0, "fresh local wins");
    }

    #[test]
    fn fresher_sibling_estimate_wins() {
        let p = params();
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(1_000, false, None, 0, &p);
        e.siblings.latency = Some((3_000.0, 500));
        assert_eq!(e.expected_latency_us(600, &p, 0.0), 3_000.0);
        assert_eq!(e.fresh_latency_us(600, &p), Some(3_000.0));
    }

    #[test]
    fn failures_inflate_the_score_and_fade_when_idle() {
        let p = params();
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.record(1_000, false, None, 0, &p);
        let healthy = e.score(0, &p, 0.0);
        let mut bad = e.clone();
        bad.local.failures.observe(true, 0, 1.0, 1.0);
        // Same latency, full failure ratio: x (1 + penalty).
        assert_eq!(bad.score(0, &p, 0.0), healthy * (1.0 + p.error_penalty));
        let faded = bad.local.failures.value_at(10 * p.stale_after_us, p.stale_after_us as f64);
        assert!(faded < 1e-4);
    }

    #[test]
    fn orca_cpu_is_kept_with_its_time() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        let load = OrcaLoad { cpu_utilization: Some(0.7), ..Default::default() };
        e.record(1_000, false, Some(load), 42, &params());
        assert_eq!(e.local.cpu, Some((0.7, 42)));
    }

    #[test]
    fn ejected_endpoints_are_not_sampled_while_the_view_is_fresh() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        assert_eq!(e.sampling_weight(true), 1.0);
        e.global = Some(GlobalStats { weight: 2.0, latency_us: 0.0, ejected: false });
        assert_eq!(e.sampling_weight(true), 2.0);
        assert_eq!(e.sampling_weight(false), 1.0);
        e.global.as_mut().unwrap().ejected = true;
        assert_eq!(e.sampling_weight(true), 0.0);
        e.global.as_mut().unwrap().weight = 0.0;
        e.global.as_mut().unwrap().ejected = false;
        assert_eq!(e.sampling_weight(true), 1e-3);
    }
}
