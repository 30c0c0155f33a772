//! The reply: the aggregator's view of each cluster a report named, which the filter uses until
//! its ttl runs out. One codec per direction: the aggregator writes it (`write`, behind the `serde`
//! feature: serde_json's number formatting); the filter reads it by hand (`read`, no serde in the
//! sidecar's module). `Reply::validate` is what the filter holds a reply to.

pub mod read;

#[cfg(feature = "serde")]
pub mod write;

#[cfg(test)]
mod tests;

use crate::protocol::{Limits, MAX_CPU, MAX_INFLIGHT, MAX_WEIGHT};
use crate::validate::{
    check_clusters, check_range, check_unique_addresses, check_version, in_range, over_limit, Invalid,
};

#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub version: u32,
    /// How long the view may be used; past it the filter goes back to local-only decisions.
    pub ttl_ms: u32,
    pub clusters: Vec<ClusterView>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterView {
    pub name: String,
    /// Live reporters (proxies) that report the cluster: how many callers may check one of its
    /// endpoints (see the picker's `health_check` budget). None: not said.
    pub reporters: Option<u32>,
    pub endpoints: Vec<EndpointView>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EndpointView {
    pub address: String,
    /// Relative capacity; the mean over a cluster's endpoints is 1.
    pub weight: f64,
    /// Requests in flight to this endpoint from all live reporters, and from all but the one asking.
    pub inflight: f64,
    pub peer_inflight: f64,
    /// Merged latency estimate of successful requests.
    pub latency_us: u64,
    /// Utilisation (CPU) as last known from ORCA or the metrics store.
    pub cpu: Option<f64>,
    /// Mostly failing: pick only to probe.
    pub ejected: bool,
    /// Time since some reporter's report last showed users' requests answered well by it, as of
    /// the view's recompute (health checks never count). None: never seen.
    pub served_age_ms: Option<u64>,
}

impl Reply {
    /// Everything a reply's fields must be before the filter uses it.
    pub fn validate(&self, limits: &Limits) -> Result<(), Invalid> {
        let endpoints: Vec<usize> = self.clusters.iter().map(|c| c.endpoints.len()).collect();
        self.validate_counted(limits, self.clusters.len(), &endpoints)
    }

    /// `validate` for a reply as the reader keeps it: up to the caps, with how many clusters the
    /// text had and how many endpoints each kept cluster had.
    pub(crate) fn validate_counted(
        &self,
        limits: &Limits,
        clusters: usize,
        endpoints: &[usize],
    ) -> Result<(), Invalid> {
        check_version(self.version)?;
        if clusters > limits.max_clusters {
            return Err(over_limit("clusters", clusters, limits.max_clusters));
        }
        check_clusters(self.clusters.iter().zip(endpoints).map(|(c, n)| (&c.name, *n)), limits)?;
        for (ci, cluster) in self.clusters.iter().enumerate() {
            check_unique_addresses(ci, cluster.endpoints.iter().map(|e| &e.address))?;
            for (ei, e) in cluster.endpoints.iter().enumerate() {
                let max_inflight = MAX_INFLIGHT as f64 * 1e3;
                let numbers = [
                    ("weight", e.weight, MAX_WEIGHT),
                    ("inflight", e.inflight, max_inflight),
                    ("peer_inflight", e.peer_inflight, max_inflight),
                    ("cpu", e.cpu.unwrap_or(0.0), MAX_CPU),
                ];
                // The field's name is only formatted for the error (this runs per endpoint).
                if let Some((name, value, max)) = numbers.into_iter().find(|(_, value, max)| !in_range(*value, *max)) {
                    check_range(&format!("clusters[{ci}].endpoints[{ei}].{name}"), value, max)?;
                }
            }
        }
        Ok(())
    }
}

/// Views with every field set, for the tests of the code that reads, writes and stores them (this
/// crate's, and other crates' through the `samples` feature).
#[cfg(any(test, feature = "samples"))]
pub mod samples {
    use super::{ClusterView, EndpointView};

    /// A cluster view: one endpoint with every field set, one ejected with the defaults.
    pub fn cluster_view(name: &str) -> ClusterView {
        ClusterView {
            name: name.into(),
            reporters: Some(3),
            endpoints: vec![
                EndpointView {
                    address: "10.0.0.1:80".into(),
                    weight: 1.4203,
                    inflight: 17.5,
                    peer_inflight: 14.0,
                    latency_us: 11_950,
                    cpu: Some(0.62),
                    ejected: false,
                    served_age_ms: Some(250),
                },
                EndpointView { address: "10.0.0.2:80".into(), weight: 0.05, ejected: true, ..Default::default() },
            ],
        }
    }
}
