//! The report: what a filter tells the aggregator about each cluster's endpoints, every report
//! interval. One codec per direction: the filter writes it by hand (`write`, no serde in the
//! sidecar's module); the aggregator reads it with serde_json (`read`, behind the `serde` feature).
//! `Report::validate` is what both sides hold a report to.

pub mod write;

#[cfg(feature = "serde")]
pub mod read;

#[cfg(test)]
mod tests;

use crate::protocol::{Limits, MAX_COUNTED_MS, MAX_CPU, MAX_INFLIGHT, MAX_LATENCY_US};
use crate::validate::Invalid;
use crate::validate::{
    check_clusters, check_interval, check_name, check_range, check_unique_addresses, check_version,
    errors_exceed_requests, in_range,
};

/// Read with serde by `read::parse_report` only (bounded seeds: the caps hold while parsing).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub version: u32,
    /// Who reports: pod name and namespace, or the Envoy node id.
    pub reporter: String,
    /// Changes when the reporter restarts and its counters start again from zero.
    pub incarnation: u64,
    /// The reporter's tick; the aggregator expires a reporter after a few of them.
    pub interval_ms: u32,
    pub clusters: Vec<ClusterReport>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterReport {
    /// Envoy cluster name, e.g. `outbound|8080||svc.ns.svc.cluster.local`.
    pub name: String,
    pub endpoints: Vec<EndpointReport>,
}

#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
pub struct EndpointReport {
    /// `ip:port` as Envoy's `upstream.address`.
    pub address: String,
    /// Completed requests attributed to this endpoint (cumulative).
    pub requests: u64,
    /// Of those, failures: 5xx, resets, timeouts, failure gRPC statuses and overload answers, and
    /// attempts on it that Envoy retried elsewhere (cumulative).
    pub errors: u64,
    /// Sum of the latencies of the successful requests, microseconds (cumulative).
    pub latency_sum_us: u64,
    /// Requests in flight to this endpoint now.
    pub inflight: u32,
    /// Peak-EWMA latency estimate and the age of its last sample.
    pub latency_ewma_us: u64,
    pub latency_age_ms: u64,
    /// Last ORCA utilisation the endpoint reported, if any, and its age.
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu: Option<f64>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu_age_ms: Option<u64>,
    /// Age of the last good answer this reporter got from the endpoint (what keeps it tracked).
    #[cfg_attr(feature = "serde", serde(default))]
    pub seen_age_ms: Option<u64>,
    /// How long this reporter's counters of the endpoint (`requests`, `errors`, `latency_sum_us`)
    /// have been counting: the time since they started from zero. Absent: not said (older
    /// reporters). At most `MAX_COUNTED_MS`, and never shorter than `seen_age_ms` (a good answer
    /// they counted came after they began).
    #[cfg_attr(feature = "serde", serde(default))]
    pub counted_ms: Option<u64>,
}

impl EndpointReport {
    pub fn successes(&self) -> u64 {
        self.requests.saturating_sub(self.errors)
    }
}

impl Report {
    /// Everything a report's fields must be (what the aggregator holds every report to, and the
    /// filter its own before sending).
    pub fn validate(&self, limits: &Limits) -> Result<(), Invalid> {
        check_version(self.version)?;
        check_name("reporter", &self.reporter)?;
        check_interval(self.interval_ms)?;
        check_clusters(self.clusters.iter().map(|c| (&c.name, c.endpoints.len())), limits)?;
        for (ci, cluster) in self.clusters.iter().enumerate() {
            check_unique_addresses(ci, cluster.endpoints.iter().map(|e| &e.address))?;
            for (ei, e) in cluster.endpoints.iter().enumerate() {
                let at = || format!("clusters[{ci}].endpoints[{ei}]");
                if e.errors > e.requests {
                    return Err(errors_exceed_requests(at(), e.errors, e.requests));
                }
                if e.inflight > MAX_INFLIGHT {
                    return Err(Invalid::field(at() + ".inflight", format!("{} is above {MAX_INFLIGHT}", e.inflight)));
                }
                if e.latency_ewma_us > MAX_LATENCY_US {
                    let problem = format!("{} is above one hour", e.latency_ewma_us);
                    return Err(Invalid::field(at() + ".latency_ewma_us", problem));
                }
                if let Some(counted) = e.counted_ms {
                    check_counted(at, counted, e.seen_age_ms)?;
                }
                if let Some(cpu) = e.cpu {
                    // The field name is only formatted for the error (this runs per endpoint).
                    if !in_range(cpu, MAX_CPU) {
                        check_range(&format!("{}.cpu", at()), cpu, MAX_CPU)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A counting span (`EndpointReport::counted_ms`) is at most `MAX_COUNTED_MS` and at least the age of
/// the last good answer (`seen_age_ms`): counters cannot have begun after an answer they counted.
fn check_counted(at: impl Fn() -> String, counted_ms: u64, seen_age_ms: Option<u64>) -> Result<(), Invalid> {
    if counted_ms > MAX_COUNTED_MS {
        return Err(Invalid::field(at() + ".counted_ms", format!("{counted_ms} is above ten years")));
    }
    match seen_age_ms {
        Some(seen) if seen > counted_ms => {
            let problem = format!(
                "{counted_ms} is shorter than seen_age_ms ({seen}): the counters would have begun after a good answer they counted"
            );
            Err(Invalid::field(at() + ".counted_ms", problem))
        }
        _ => Ok(()),
    }
}

/// Records with every field set, for the tests of the code that reads and writes them (this
/// crate's, and other crates' through the `samples` feature).
#[cfg(any(test, feature = "samples"))]
pub mod samples {
    use super::EndpointReport;

    /// An endpoint report with every field set (utilisation 0.625: exact in binary and decimal).
    pub fn endpoint_report(address: &str) -> EndpointReport {
        EndpointReport {
            address: address.into(),
            requests: 10,
            errors: 1,
            latency_sum_us: 9_000,
            inflight: 2,
            latency_ewma_us: 1_000,
            latency_age_ms: 5,
            cpu: Some(0.625),
            cpu_age_ms: Some(100),
            seen_age_ms: Some(7),
            counted_ms: Some(900),
        }
    }
}
