//! The attestation: what a destination's server-role filter tells the aggregator it served, per
//! source principal (the verified peer certificate's URI SAN), as one endpoint of one cluster. The
//! aggregator bounds what each principal's reports may claim about that endpoint by it (callers
//! only: see tailweight-weights' `evidence.rs`). One codec per direction: the filter writes it by
//! hand (`write`, no serde in the sidecar's module); the aggregator reads it with serde_json
//! (`read`, behind the `serde` feature). `Attestation::validate` is what both sides hold it to.
//!
//! Counters are cumulative since the attesting filter's `incarnation` began, like a report's, so a
//! lost attestation loses nothing.

pub mod write;

#[cfg(feature = "serde")]
pub mod read;

#[cfg(test)]
mod tests;

use crate::validate::{
    appears_twice, check_address, check_interval, check_name, check_version, errors_exceed_requests, first_repeat,
    over_limit, Invalid,
};

/// Source principals one attestation may name (a destination with more callers than this names
/// the busiest; the rest stay unproven for that window).
pub const MAX_SOURCES: usize = 1024;

/// The largest attestation body the aggregator reads: `MAX_SOURCES` sources at their longest names
/// and largest counters, and the rest.
pub const MAX_ATTESTATION_BYTES: usize = 2048 + MAX_SOURCES * (crate::protocol::MAX_NAME_LEN + 96);

#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
pub struct Attestation {
    pub version: u32,
    /// The Envoy cluster name the attesting pod is an endpoint of, as its clients name it
    /// (`outbound|8080||svc.ns.svc.cluster.local`).
    pub cluster: String,
    /// Its address as clients know it (the inbound connection's local address, `ip:port`).
    pub endpoint: String,
    /// Changes when the attesting filter restarts and its counters start again from zero.
    pub incarnation: u64,
    /// The attesting filter's tick.
    pub interval_ms: u32,
    pub sources: Vec<SourceCount>,
}

/// What the endpoint served one source principal (cumulative).
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
pub struct SourceCount {
    /// The caller's identity as the destination's Envoy verified it (a SPIFFE id under mTLS).
    pub principal: String,
    /// Requests answered.
    pub requests: u64,
    /// Of those, failures (status >= 500, failure gRPC codes).
    pub errors: u64,
}

impl Attestation {
    /// Everything an attestation's fields must be.
    pub fn validate(&self) -> Result<(), Invalid> {
        check_version(self.version)?;
        check_name("cluster", &self.cluster)?;
        check_address(|| "endpoint".into(), &self.endpoint)?;
        check_interval(self.interval_ms)?;
        if self.sources.len() > MAX_SOURCES {
            return Err(over_limit("sources", self.sources.len(), MAX_SOURCES));
        }
        for (i, s) in self.sources.iter().enumerate() {
            check_name(&format!("sources[{i}].principal"), &s.principal)?;
            if s.errors > s.requests {
                return Err(errors_exceed_requests(format!("sources[{i}]"), s.errors, s.requests));
            }
        }
        if let Some(i) = first_repeat(self.sources.iter().map(|s| s.principal.as_str())) {
            return Err(appears_twice(format!("sources[{i}].principal"), &self.sources[i].principal));
        }
        Ok(())
    }
}
