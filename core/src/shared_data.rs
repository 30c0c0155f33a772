//! What the filter's VMs of one Envoy keep in shared data for each other (see the filter's
//! `shared.rs` for the keys): each VM's snapshot, the aggregator's last view per cluster, and
//! decimal counters. Parsed here, natively testable and fuzzed: a value that does not parse is
//! skipped (never an error that stops a VM), and a parsed one is safe to fold in whatever it holds.

use crate::wire::{ClusterReport, ClusterView};
use serde::{Deserialize, Serialize};

/// One VM's snapshot (`slot.<n>`): its cumulative counters per endpoint and when it wrote them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    pub written_us: u64,
    pub clusters: Vec<ClusterReport>,
}

/// The aggregator's view of one cluster (`view.<cluster>`), when it arrived and for how long it
/// holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredView {
    pub received_us: u64,
    pub ttl_ms: u32,
    pub view: ClusterView,
}

/// A slot's JSON, or None if it is not one.
pub fn parse_slot(bytes: &[u8]) -> Option<Slot> {
    serde_json::from_slice(bytes).ok()
}

/// A stored view's JSON, or None if it is not one.
pub fn parse_stored_view(bytes: &[u8]) -> Option<StoredView> {
    serde_json::from_slice(bytes).ok()
}

/// A decimal counter (0 when absent or not a number).
pub fn parse_counter(bytes: Option<&[u8]>) -> u64 {
    bytes.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_garbage_is_skipped() {
        let slot = Slot { written_us: 7, clusters: vec![ClusterReport { name: "c".into(), endpoints: vec![] }] };
        assert_eq!(parse_slot(&serde_json::to_vec(&slot).unwrap()), Some(slot));
        let view =
            StoredView { received_us: 1, ttl_ms: 3_000, view: ClusterView { name: "c".into(), endpoints: vec![] } };
        assert_eq!(parse_stored_view(&serde_json::to_vec(&view).unwrap()), Some(view));
        assert_eq!((parse_slot(b"{"), parse_stored_view(b"[]")), (None, None));
        assert_eq!((parse_counter(Some(b"42")), parse_counter(Some(b"-1")), parse_counter(None)), (42, 0, 0));
    }
}
