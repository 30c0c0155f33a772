//! What a balancer is configured with: the part of the sidecar's configuration that the picks use.

use crate::cluster::Cluster;
use crate::health_check::CheckProtocol;
use crate::params::PickParams;

/// A request without response headers stops counting as in flight after at most this long, by
/// default (see `inflight`).
pub const DEFAULT_INFLIGHT_BOUND_US: u64 = 30_000_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub pick: PickParams,
    pub retry_choices: usize,
    pub endpoint_ttl_us: u64,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
    /// The length of an in-flight epoch (see `inflight_epoch_us`).
    pub inflight_epoch_us: u64,
    /// Which suspended endpoints are probed by out-of-band health checks, not users' requests (None:
    /// none, the default).
    pub health_checks: Option<HealthCheckScope>,
}

/// The clusters checked (empty: every one) and the protocols whose check is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheckScope {
    pub clusters: Vec<String>,
    pub http: bool,
    pub grpc: bool,
    /// Checks a second per failing endpoint that all callers together aim at (see `check_share`).
    pub fleet_rate_per_s: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pick: PickParams::default(),
            retry_choices: 1,
            endpoint_ttl_us: 60_000_000,
            max_clusters: 64,
            max_endpoints_per_cluster: 2048,
            inflight_epoch_us: Settings::inflight_epoch_us(DEFAULT_INFLIGHT_BOUND_US),
            health_checks: None,
        }
    }
}

impl Settings {
    /// An in-flight epoch is half the in-flight bound (at least 1 us): a request is dropped from
    /// the count at the second epoch change after it began (see `inflight`).
    pub fn inflight_epoch_us(inflight_bound_us: u64) -> u64 {
        (inflight_bound_us / 2).max(1)
    }

    /// Is `cluster` listed for health checks (see the field)?
    pub fn health_check_listed(&self, cluster: &str) -> bool {
        self.health_checks.as_ref().is_some_and(|s| s.clusters.is_empty() || s.clusters.iter().any(|c| c == cluster))
    }

    /// Are `cluster`'s suspended endpoints checked out of band at `now_us`? If it is listed, its
    /// checks are not paused, and a check is configured for the protocol its users speak (none seen
    /// yet: no).
    pub fn checks_out_of_band(&self, cluster: &Cluster, now_us: u64) -> bool {
        let Some(scope) = &self.health_checks else { return false };
        cluster.health_check_listed
            && !cluster.check_target.checks_paused(now_us)
            && match cluster.check_target.protocol() {
                Some(CheckProtocol::Http) => scope.http,
                Some(CheckProtocol::Grpc) => scope.grpc,
                None => false,
            }
    }
}
