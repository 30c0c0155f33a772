//! The weight book's tuning and caps, and their validation.

use crate::view_inflight::ViewInflight;
use std::fmt;

/// Tuning and caps of the weight book. Times in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightParams {
    /// A reporter (and what it said) expires after this many of its own intervals without a report...
    pub reporter_ttl_intervals: f64,
    /// ...but never sooner than this.
    pub min_reporter_ttl_us: u64,
    /// A report renews its observation of an endpoint only if the reporter saw it answer well
    /// within this, sent it requests since, or does not say (see `ingest::renews`).
    pub max_seen_age_us: u64,
    /// The reply's ttl: this many of the asking reporter's intervals (bounded below by `min_view_ttl_us`).
    pub view_ttl_intervals: f64,
    /// ...but never shorter than this.
    pub min_view_ttl_us: u64,
    /// Time constant of the geometric smoothing of weights toward their targets.
    pub smoothing_us: f64,
    /// Largest factor a weight may move by in one recompute (> 1).
    pub max_step: f64,
    /// Smallest weight, relative to the mean of 1: slow endpoints keep getting probes.
    pub floor: f64,
    /// Eject at this smoothed error ratio (0..1], readmit below half of it.
    pub eject_ratio: f64,
    /// Requests needed in a recompute window before its error ratio counts.
    pub eject_min_requests: f64,
    /// Time constant of the smoothed error ratio while requests arrive...
    pub error_decay_us: f64,
    /// ...and of its fading while none do (so an ejected endpoint gets probed again).
    pub error_fade_us: f64,
    /// How fast the service-time estimate rises toward higher latencies (it drops at once).
    pub service_rise_us: f64,
    /// Mean latency above this multiple of the service time means the endpoint queues (saturated).
    pub saturation_factor: f64,
    /// Time constant of the learned concurrency.
    pub concurrency_decay_us: f64,
    /// A CPU value older than this is not used.
    pub cpu_max_age_us: u64,
    /// A reporter's ORCA utilisation older than this is not voted (0: `cpu_max_age_us` applies).
    /// Capacity divides the current request rate by the utilisation: a vote from a proxy that last
    /// reached the endpoint seconds ago pairs today's rate with that time's load. A new or starved
    /// endpoint's last burst then rates it at a fraction of its capacity while its rate is low
    /// (rollout-failing: cold pods rated at 10-30 rps with ~70 to give). 1 s is one report
    /// interval: with load stamps moving traffic, older votes let the weights drift toward the
    /// endpoints whose traffic grew (sim/README.md, "Closing the gap": 54.1 against 55.7 ms p99 at
    /// 1,000 x 1,000 and 70% load with 3 s; 500 ms is too few votes: 65.7).
    pub orca_max_age_us: u64,
    /// The window a metrics-store CPU value averages over (the `[1m]` of `rate(...[1m])`). The CPU
    /// path divides it into the request rate over that same window, ending when the value was
    /// set: a 1 s request rate against a 60 s CPU average is off by the whole change in between.
    pub cpu_window_us: u64,
    /// CPU below this is treated as unknown (the formula divides by it).
    pub min_cpu: f64,
    /// Latency path: time one failure costs, added per request at the error ratio.
    pub failure_cost_us: f64,
    /// Requests per second needed for the CPU formula.
    pub min_qps_for_cpu: f64,
    /// An endpoint the cluster's method cannot rate this time (e.g. hardly any requests in the last
    /// window, as the picker steers around a slow endpoint) keeps its last capacity of that method
    /// for this long before it falls back to the median.
    pub capacity_hold_us: u64,
    /// ...and an endpoint not failing now (not ejected, error ratio below a quarter of
    /// `eject_ratio`) keeps the last capacity it was rated with while it answered without errors
    /// for this long (`held_capacity.rs`): a pod that went away for a while (its proxies suspended
    /// it, nothing reached it) comes back with the share it earned, not the median.
    pub healthy_capacity_hold_us: u64,
    /// An endpoint without requests sent or in flight for this long (one that left the cluster)
    /// does not count in the cluster's mean, median target, method and median concurrency
    /// (`traffic.rs`). Three report intervals: a left pod's request rate is 0 after one or two.
    pub quiet_uncounted_us: u64,
    /// Envoy CSWRR's error_utilization_penalty: qps / (cpu + penalty x eps / qps).
    pub error_penalty: f64,
    /// An endpoint new to a cluster the book has known for longer than this ramps up over this
    /// long: its target x the slow-start ramp (see `tailweight_math::ramp::Ramp`; 0 = off).
    pub slow_start_us: u64,
    /// A standing queue (in flight beyond the endpoint's concurrency) should drain within this
    /// time: that rate comes off its capacity until it has (0 = off).
    pub backlog_drain_us: f64,
    /// The in-flight count the reply view gives each endpoint (see `view_inflight.rs`).
    pub view_inflight: ViewInflight,
    /// Rate a reporter's first report of an endpoint whose counters are new over those counters at
    /// once (`observation::new_counters_us`), instead of from the next report on. Off by default:
    /// at 500 x 500 in the simulator it halves the cold start and, at 90% load, the p99 (145 -> 78
    /// ms), but it also counts the requests of pairs found again in steady state, which today's
    /// rates leave out, and the weights then follow capacity exactly: the steady p99 at 70% rose
    /// from 52.6 to 57.8 ms (sim/README.md, "Cold start").
    pub rate_new_counters: bool,
    /// A reporter's latency sample without requests in its last window counts if younger than this.
    pub latency_sample_max_age_us: u64,
    /// Lying-reporter guard of medians: each vote <= vote_cap x the other votes (< 1).
    pub vote_cap: f64,
    /// Lying-reporter guard of sums: each contribution <= sum_clip x the largest other active
    /// contribution (>= 1), among one principal's reporters and between two principals; with two or
    /// more principals in a cluster, also each principal's total over the cluster.
    pub sum_clip: f64,
    /// With three or more principals on an endpoint, each principal's requests and in-flight count
    /// there stay within this ratio of what the consensus split of its own total puts there
    /// (0..0.5): see `consensus.rs`. 0.024 keeps any endpoint's share within a factor
    /// 1.024 / 0.976 < 1.05 of the honest one.
    pub split_tolerance: f64,
    /// Once a cluster's endpoints attest what they served (`callers.rs`), a caller's requests on
    /// an endpoint count up to what it attested x (1 + this): room for report and attestation
    /// windows that do not line up (>= 0).
    pub attest_tolerance: f64,
    /// A principal is a proven caller of a cluster for this long after an endpoint of it last
    /// attested requests from it.
    pub proven_caller_us: u64,
    /// Per-principal quota: the share (0..=1] of each cap (reporters, clusters, bytes) one principal
    /// may hold, and of a cluster's endpoint room; 1 = no quota.
    pub principal_share: f64,
    /// With quotas, a principal below its fair share of the book that grew within this long is
    /// waiting for room: principals above their shares leave it what it lacks (`fair_room.rs`).
    pub waiting_us: u64,
    /// Server-side bound on a reporter's interval: its ttl and windows use at most this, whatever
    /// interval it claims.
    pub max_interval_us: u64,
    /// Caps; a report that would exceed one is rejected whole. Live reporters (name, incarnation)...
    pub max_reporters: usize,
    /// ...clusters...
    pub max_clusters: usize,
    /// ...endpoints of one cluster one principal may name (a cluster holds `cluster_endpoint_room`
    /// from all principals)...
    pub max_endpoints_per_cluster: usize,
    /// Reporter x endpoint observations in all (bounds memory under churn).
    pub max_observations: usize,
    /// IPs whose CPU the metrics store may tell (new IPs beyond it are ignored).
    pub max_cpu_entries: usize,
    /// Bytes the book may hold, as `memory.rs` counts them (a report that would take it past is
    /// refused).
    pub max_bytes: usize,
}

impl Default for WeightParams {
    fn default() -> Self {
        WeightParams {
            reporter_ttl_intervals: 3.0,
            min_reporter_ttl_us: 3_000_000,
            max_seen_age_us: 60_000_000,
            view_ttl_intervals: 3.0,
            min_view_ttl_us: 3_000_000,
            smoothing_us: 2_000_000.0,
            max_step: 1.5,
            floor: 0.05,
            eject_ratio: 0.5,
            eject_min_requests: 10.0,
            error_decay_us: 2_000_000.0,
            error_fade_us: 10_000_000.0,
            service_rise_us: 30_000_000.0,
            saturation_factor: 2.0,
            concurrency_decay_us: 10_000_000.0,
            cpu_max_age_us: 60_000_000,
            orca_max_age_us: 1_000_000,
            cpu_window_us: 60_000_000,
            min_cpu: 0.01,
            failure_cost_us: 100_000.0,
            min_qps_for_cpu: 1.0,
            capacity_hold_us: 10_000_000,
            healthy_capacity_hold_us: 60_000_000,
            quiet_uncounted_us: 3_000_000,
            error_penalty: 1.0,
            slow_start_us: 10_000_000,
            backlog_drain_us: 5_000_000.0,
            view_inflight: ViewInflight::Mean,
            rate_new_counters: false,
            latency_sample_max_age_us: 10_000_000,
            vote_cap: 0.5,
            sum_clip: 2.0,
            split_tolerance: 0.024,
            attest_tolerance: 0.5,
            proven_caller_us: 10_000_000,
            principal_share: 1.0,
            waiting_us: 10_000_000,
            max_interval_us: 10_000_000,
            max_reporters: 50_000,
            max_clusters: 4_096,
            max_endpoints_per_cluster: 2_048,
            max_observations: 2_000_000,
            max_cpu_entries: 100_000,
            max_bytes: 8 << 30,
        }
    }
}

impl WeightParams {
    /// One principal's quota of a cap: `ceil(cap x principal_share)`, at least 1.
    pub fn quota(&self, cap: usize) -> usize {
        ((cap as f64 * self.principal_share).ceil() as usize).clamp(1, cap.max(1))
    }

    /// Endpoints one cluster may hold: `max_endpoints_per_cluster / principal_share`, so that one
    /// principal naming as many as it may fills a share of the room (all of it with one principal).
    pub fn cluster_endpoint_room(&self) -> usize {
        (self.max_endpoints_per_cluster as f64 / self.principal_share).floor() as usize
    }

    /// The interval the book uses for a reporter claiming `interval_ms`: at most `max_interval_us`.
    pub fn interval_us(&self, interval_ms: u32) -> u64 {
        (u64::from(interval_ms) * 1_000).min(self.max_interval_us)
    }

    /// How long a sender of `interval_us` (a reporter, or an attesting endpoint) stays live
    /// without a word: `max(interval_us x reporter_ttl_intervals, min_reporter_ttl_us)`.
    pub fn reporter_ttl_us(&self, interval_us: u64) -> u64 {
        ((interval_us as f64 * self.reporter_ttl_intervals) as u64).max(self.min_reporter_ttl_us)
    }

    /// The age beyond which a reporter's ORCA utilisation is not voted: `orca_max_age_us`, or
    /// `cpu_max_age_us` when that is 0.
    pub fn orca_vote_max_age_us(&self) -> u64 {
        if self.orca_max_age_us > 0 {
            self.orca_max_age_us
        } else {
            self.cpu_max_age_us
        }
    }

    /// The first bad field, if any.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let positive = [
            ("reporter_ttl_intervals", self.reporter_ttl_intervals),
            ("view_ttl_intervals", self.view_ttl_intervals),
            ("smoothing_us", self.smoothing_us),
            ("error_decay_us", self.error_decay_us),
            ("error_fade_us", self.error_fade_us),
            ("service_rise_us", self.service_rise_us),
            ("concurrency_decay_us", self.concurrency_decay_us),
            ("min_cpu", self.min_cpu),
            ("eject_ratio", self.eject_ratio),
        ];
        for (field, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(ParamsError::NotPositive { field, value });
            }
        }
        let checks = [
            (self.max_step > 1.0 && self.max_step <= 100.0, "max_step must be in (1, 100]"),
            (self.floor >= 0.0 && self.floor <= 1.0 - 1.0 / self.max_step, "floor must be in [0, 1 - 1/max_step]"),
            (self.eject_ratio <= 1.0, "eject_ratio must be at most 1"),
            (self.eject_min_requests >= 0.0 && self.eject_min_requests.is_finite(), "eject_min_requests must be >= 0"),
            (self.saturation_factor > 1.0 && self.saturation_factor.is_finite(), "saturation_factor must be > 1"),
            (self.min_qps_for_cpu >= 0.0 && self.min_qps_for_cpu.is_finite(), "min_qps_for_cpu must be >= 0"),
            (self.failure_cost_us >= 0.0 && self.failure_cost_us.is_finite(), "failure_cost_us must be >= 0"),
            (self.error_penalty >= 0.0 && self.error_penalty.is_finite(), "error_penalty must be >= 0"),
            (self.backlog_drain_us >= 0.0 && self.backlog_drain_us.is_finite(), "backlog_drain_us must be >= 0"),
            (self.vote_cap > 0.0 && self.vote_cap < 1.0, "vote_cap must be in (0, 1)"),
            (self.sum_clip >= 1.0 && self.sum_clip.is_finite(), "sum_clip must be >= 1"),
            ((0.0..0.5).contains(&self.split_tolerance), "split_tolerance must be in [0, 0.5)"),
            (self.attest_tolerance >= 0.0 && self.attest_tolerance.is_finite(), "attest_tolerance must be >= 0"),
            (self.principal_share > 0.0 && self.principal_share <= 1.0, "principal_share must be in (0, 1]"),
            (self.max_interval_us >= 10_000, "max_interval_us must be >= 10000"),
            (self.max_reporters > 0 && self.max_clusters > 0, "max_reporters and max_clusters must be > 0"),
            (self.max_endpoints_per_cluster > 0 && self.max_observations > 0, "endpoint caps must be > 0"),
            (self.max_bytes > 0, "max_bytes must be > 0"),
            (self.max_seen_age_us >= 1_000_000, "max_seen_age_us must be >= 1000000 (1 s)"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, rule)) => Err(ParamsError::OutOfRange(rule)),
            None => Ok(()),
        }
    }
}

/// A weight parameter that cannot work; displays as one line naming it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamsError {
    /// A time constant, ratio or count that must be a positive number.
    NotPositive { field: &'static str, value: f64 },
    /// The rule the parameters break, naming the field(s), e.g. "max_step must be in (1, 100]".
    OutOfRange(&'static str),
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamsError::NotPositive { field, value } => write!(f, "{field}: {value} must be a positive number"),
            ParamsError::OutOfRange(rule) => f.write_str(rule),
        }
    }
}

impl std::error::Error for ParamsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_is_one_line_naming_the_field() {
        let nan = WeightParams { smoothing_us: f64::NAN, ..Default::default() }.validate().unwrap_err();
        assert!(matches!(nan, ParamsError::NotPositive { field: "smoothing_us", value } if value.is_nan()), "{nan:?}");
        assert_eq!(nan.to_string(), "smoothing_us: NaN must be a positive number");
        let step = WeightParams { max_step: 1.0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(step, ParamsError::OutOfRange("max_step must be in (1, 100]"));
        assert_eq!(step.to_string(), "max_step must be in (1, 100]");
        let zero = WeightParams { eject_ratio: 0.0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(zero.to_string(), "eject_ratio: 0 must be a positive number");
    }
}
