//! Wire protocol v1 between filter and aggregator (JSON over HTTP; see docs/wire-protocol.md): its
//! version, path and headers, the bounds of a message's values, and the caps that bound the memory
//! one message can claim.
//!
//! Counters in a report are cumulative since the reporter's `incarnation` began, so a lost report
//! loses nothing: the aggregator takes differences. Unknown fields are ignored (additions within v1);
//! anything else unexpected is rejected with a one-line reason naming the field.

pub const VERSION: u32 = 1;
pub const REPORT_PATH: &str = "/v1/report";
/// Where server-role filters send attestations (`attest`).
pub const ATTEST_PATH: &str = "/v1/attest";
/// Header carrying the destination cluster of a report, for consistent hashing across aggregator replicas.
pub const SHARD_HEADER: &str = "x-tailweight-shard";

/// Largest accepted values; beyond them a report is nonsense, not load.
pub const MAX_NAME_LEN: usize = 512;
pub const MAX_INFLIGHT: u32 = 1_000_000;
pub const MAX_LATENCY_US: u64 = 3_600_000_000; // one hour
/// The longest counting span a report may give (`EndpointReport::counted_ms`): ten years.
pub const MAX_COUNTED_MS: u64 = 315_360_000_000;
pub const MAX_CPU: f64 = 1_000.0;
pub const MAX_WEIGHT: f64 = 1e6;
pub const INTERVAL_MS: std::ops::RangeInclusive<u32> = 10..=600_000;

/// Caps that bound the memory one message can claim.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_clusters: 256, max_endpoints_per_cluster: 2048 }
    }
}

/// The `:authority` of a report about `cluster`: `<16 hex digits of FNV-1a(cluster)>.<authority>`.
/// Envoy hashes a wasm `dispatch_http_call` on its `:authority` only (a hash policy hard-coded in the
/// host; a DestinationRule's `httpHeaderName` never applies to it), so with ring_hash/maglev on the
/// aggregator cluster the shard key must be in the authority. The raw cluster name cannot be:
/// `|` is not a host name character.
pub fn shard_authority(cluster: &str, authority: &str) -> String {
    let hash = tailweight_math::hash::fnv1a(cluster.bytes());
    format!("{hash:016x}.{authority}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_authority_is_a_stable_host_name_per_cluster() {
        let a = shard_authority("outbound|8080||cart.shop.svc.cluster.local", "agg.tailweight.svc");
        assert_eq!(a, shard_authority("outbound|8080||cart.shop.svc.cluster.local", "agg.tailweight.svc"));
        assert_ne!(a, shard_authority("outbound|8080||catalog.shop.svc.cluster.local", "agg.tailweight.svc"));
        assert!(a.ends_with(".agg.tailweight.svc") && a.len() == 16 + 1 + 18, "{a}");
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'), "{a}");
        // FNV-1a 64 of the empty string is its offset basis.
        assert_eq!(shard_authority("", "x"), "cbf29ce484222325.x");
    }
}
