//! What the hostile run found.

use super::attacks::AttackTally;
use super::observe::{Machine, Moved};
use crate::args::LoadgenArgs;
use crate::drive::Step;
use serde::Serialize;
use std::collections::BTreeMap;

/// The honest reporters of a hostile run, and the aggregator's arguments.
#[derive(Debug, Serialize)]
pub(crate) struct HonestSetup {
    pub reporters: usize,
    pub endpoints_per_reporter: usize,
    pub clusters: usize,
    pub honest_principals: usize,
    pub honest_rate: u64,
    pub connections: usize,
    pub server_args: Vec<String>,
}

impl HonestSetup {
    pub fn of(args: &LoadgenArgs) -> HonestSetup {
        HonestSetup {
            reporters: args.reporters,
            endpoints_per_reporter: args.endpoints,
            clusters: args.clusters.min(args.reporters),
            honest_principals: args.principals,
            honest_rate: args.attack.honest_rate,
            connections: args.connections,
            server_args: args.server_args.clone(),
        }
    }

    /// "N honest reporters x E endpoints (...) report R times a second over C keep-alive connections".
    pub fn describe(&self) -> String {
        format!(
            "{} honest reporters x {} endpoints ({} clusters, {} principals) report {} times a second over {} \
             keep-alive connections",
            self.reporters,
            self.endpoints_per_reporter,
            self.clusters,
            self.honest_principals,
            self.honest_rate,
            self.connections
        )
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct HostileResults {
    #[serde(flatten)]
    pub honest: HonestSetup,
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
