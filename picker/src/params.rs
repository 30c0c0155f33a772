//! The knobs of the per-request pick (see `balancer`), with their defaults.

use crate::health::HealthTimes;

/// Knobs of the per-request pick (see `balancer`). Times in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct PickParams {
    /// Share of requests left to the fallback LB so that every endpoint keeps fresh samples.
    pub explore_ratio: f64,
    pub latency_decay_us: f64,
    /// Latency assumed for an endpoint nobody has measured yet when no other estimate exists.
    pub default_latency_us: f64,
    /// A latency sample older than this yields to the cluster's prior (see `Cluster::refresh_prior`).
    pub stale_after_us: u64,
    /// Score multiplier per unit of recent failure ratio: score x (1 + error_penalty x ratio).
    pub error_penalty: f64,
    /// Expected wait one unit of recent failure ratio adds (see `Endpoint::score`): failing fast never
    /// looks fast.
    pub failure_latency_us: f64,
    /// Time constant over which failure evidence fades (see `health`).
    pub failure_decay_us: f64,
    /// A suspended endpoint's first probe comes this long after the suspension (then backs off).
    pub probe_interval_us: u64,
    /// After a successful probe its share ramps up over this long (longer when it flaps).
    pub recovery_ramp_us: u64,
    /// Good answers in a row at normal latency that end a recovery ramp early (0: never).
    pub recovery_evidence_answers: u32,
    /// An endpoint joining a cluster known for longer than this ramps up over this long (0: off).
    pub slow_start_us: u64,
    /// Use the aggregator's view; when false it is reported to but not used (for comparisons).
    pub use_global_view: bool,
    /// Server-side load stamps (see `stamp`): a stamp younger than this scores its endpoint, and a
    /// pick in a cluster whose responses bring stamps compares one weighted draw with the endpoints
    /// of the freshest stamps (0: off, the pick is always the two-choice one). 20 ms: sim/README.md,
    /// "Closing the gap" (15 ms and 30 ms are no better).
    pub load_stamp_max_age_us: u64,
    /// Endpoints of this worker's most recent stamps a pick considers (per cluster).
    pub load_stamp_pool: usize,
    /// Stamps decide a pick only while at most this share of the cluster's endpoints known here
    /// have a fresh latency estimate of this proxy's own (`Cluster::own_fresh_share`); above it the
    /// proxy's own counts are rich enough for the two-choice pick (1: stamps always decide). 0.9
    /// keeps them out of the picks of a proxy that reaches nearly every endpoint often (4 clients x
    /// 15 endpoints: share 1), where they concentrate load, and lets them decide where a proxy
    /// meets most endpoints but sends each a small part of its load (150 x 150: 0.5 left the
    /// picks there to the two-choice rule, 2.1 x Prequal's p99 at 90% load): sim/README.md.
    pub load_stamp_max_fresh_share: f64,
}

impl Default for PickParams {
    fn default() -> Self {
        PickParams {
            explore_ratio: 0.01,
            latency_decay_us: 2_000_000.0,
            default_latency_us: 30_000.0,
            stale_after_us: 5_000_000,
            error_penalty: 8.0,
            failure_latency_us: 1_000_000.0,
            failure_decay_us: 1_000_000.0,
            probe_interval_us: 250_000,
            recovery_ramp_us: 1_000_000,
            recovery_evidence_answers: 3,
            slow_start_us: 10_000_000,
            use_global_view: true,
            load_stamp_max_age_us: 20_000,
            load_stamp_pool: 8,
            load_stamp_max_fresh_share: 0.9,
        }
    }
}

impl PickParams {
    /// The time constants of endpoint health (see `health`).
    pub fn health_times(&self) -> HealthTimes {
        HealthTimes {
            failure_decay_us: self.failure_decay_us,
            probe_interval_us: self.probe_interval_us,
            recovery_ramp_us: self.recovery_ramp_us,
            recovery_evidence_answers: self.recovery_evidence_answers,
        }
    }
}
