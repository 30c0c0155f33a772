//! What a balancer is configured with: the filter configuration's part that the picks use.

use crate::cluster::Cluster;
use crate::config::{FilterConfig, PickParams};
use crate::health_check::CheckProtocol;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub pick: PickParams,
    pub retry_choices: usize,
    pub endpoint_ttl_us: u64,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
    /// Half the in-flight bound: the length of an in-flight epoch (see `inflight`).
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
    /// `HealthCheckConfig::fleet_rate_per_s`.
    pub fleet_rate_per_s: f64,
}

impl From<&FilterConfig> for Settings {
    fn from(c: &FilterConfig) -> Self {
        Settings {
            pick: c.pick.clone(),
            retry_choices: c.retry_choices,
            endpoint_ttl_us: c.endpoint_ttl_ms * 1_000,
            max_clusters: c.max_clusters,
            max_endpoints_per_cluster: c.max_endpoints_per_cluster,
            inflight_epoch_us: (c.inflight_bound_ms * 1_000 / 2).max(1),
            health_checks: c.health_check.as_ref().map(|h| HealthCheckScope {
                clusters: h.clusters.clone(),
                http: h.path.is_some(),
                grpc: h.grpc_service.is_some(),
                fleet_rate_per_s: h.fleet_rate_per_s as f64,
            }),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&FilterConfig::default())
    }
}

impl Settings {
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
