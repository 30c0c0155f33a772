//! The filter's attestation writer: an `Attestation` as JSON, by hand with `json`'s writers
//! instead of serde, for the size of the sidecar's module (see `json`). The aggregator reads it
//! with `attest::read`; a round-trip test holds the two to each other.

use super::Attestation;
use crate::json;

/// The attestation as JSON, fields in `Attestation`'s order.
pub fn write_attestation(a: &Attestation) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + a.cluster.len() + a.sources.len() * 96);
    json::write_u64_member(&mut out, b"{\"version\":", u64::from(a.version));
    json::write_str_member(&mut out, b",\"cluster\":", &a.cluster);
    json::write_str_member(&mut out, b",\"endpoint\":", &a.endpoint);
    json::write_u64_member(&mut out, b",\"incarnation\":", a.incarnation);
    json::write_u64_member(&mut out, b",\"interval_ms\":", u64::from(a.interval_ms));
    out.extend_from_slice(b",\"sources\":[");
    for (i, s) in a.sources.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json::write_str_member(&mut out, b"{\"principal\":", &s.principal);
        json::write_u64_member(&mut out, b",\"requests\":", s.requests);
        json::write_u64_member(&mut out, b",\"errors\":", s.errors);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}
