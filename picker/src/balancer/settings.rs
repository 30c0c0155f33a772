//! What a balancer is configured with: the filter configuration's part that the picks use.

use crate::config::{FilterConfig, PickParams};

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub pick: PickParams,
    pub retry_choices: usize,
    pub endpoint_ttl_us: u64,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
    /// Half the in-flight bound: the length of an in-flight epoch (see `inflight`).
    pub inflight_epoch_us: u64,
    /// The clusters whose suspended endpoints are probed by out-of-band health checks, not users'
    /// requests (None: none, the default; an empty list: every cluster).
    pub health_checks: Option<Vec<String>>,
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
            health_checks: c.health_check.as_ref().map(|h| h.clusters.clone()),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&FilterConfig::default())
    }
}

impl Settings {
    /// Are suspended endpoints of `cluster` health-checked (see the field)?
    pub fn health_checks(&self, cluster: &str) -> bool {
        self.health_checks.as_ref().is_some_and(|list| list.is_empty() || list.iter().any(|c| c == cluster))
    }
}
