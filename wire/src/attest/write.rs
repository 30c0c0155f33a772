//! The filter's attestation writer: an `Attestation` as JSON, by hand with `json`'s writers
//! instead of serde, for the size of the sidecar's module (see `json`). The aggregator reads it
//! with `attest::read`; a round-trip test holds the two to each other.

use super::Attestation;
use crate::json;

/// The attestation as JSON, fields in `Attestation`'s order.
pub fn write_attestation(a: &Attestation) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + a.cluster.len() + a.sources.len() * 96);
    out.extend_from_slice(b"{\"version\":");
    json::write_u64(&mut out, u64::from(a.version));
    out.extend_from_slice(b",\"cluster\":");
    json::write_str(&mut out, &a.cluster);
    out.extend_from_slice(b",\"endpoint\":");
    json::write_str(&mut out, &a.endpoint);
    out.extend_from_slice(b",\"incarnation\":");
    json::write_u64(&mut out, a.incarnation);
    out.extend_from_slice(b",\"interval_ms\":");
    json::write_u64(&mut out, u64::from(a.interval_ms));
    out.extend_from_slice(b",\"sources\":[");
    for (i, s) in a.sources.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"principal\":");
        json::write_str(&mut out, &s.principal);
        out.extend_from_slice(b",\"requests\":");
        json::write_u64(&mut out, s.requests);
        out.extend_from_slice(b",\"errors\":");
        json::write_u64(&mut out, s.errors);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}
