//! What the hostile run found.

use super::attacks::AttackTally;
use super::observe::{Machine, Moved};
use crate::drive::Step;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub(crate) struct HostileResults {
    pub reporters: usize,
    pub endpoints_per_reporter: usize,
    pub clusters: usize,
    pub honest_principals: usize,
    pub honest_rate: u64,
    pub connections: usize,
    pub server_args: Vec<String>,
    pub warmup: Step,
    pub baseline: Step,
    pub attack: Step,
    pub honest_accepted_pct: f64,
    pub honest_p99_ms: f64,
    pub attacks: BTreeMap<String, AttackTally>,
    /// The attacked clusters, and the control clusters nobody lied about (natural drift).
    pub weights_moved: Moved,
    pub weights_moved_control: Moved,
    pub rss_peak_mib: Option<f64>,
    pub rss_end_mib: Option<f64>,
    pub pod_limit_mib: f64,
    /// The aggregator's own counts at the end (`/metrics`).
    pub aggregator_metrics: BTreeMap<String, f64>,
    pub machine: Machine,
}
