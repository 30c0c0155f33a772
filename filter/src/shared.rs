//! Shared data between the VMs of one Envoy (one per worker thread plus the main thread; visible
//! only with the same `vm_id`). Layout, all under `tailweight.`:
//! - `vm_seq`: how many VMs took a slot number (CAS counter);
//! - `slot.<n>`: VM n's snapshot (cumulative counters, in flight, latency) and when it wrote it;
//! - `report_epoch`: the last report period someone claimed (CAS), so one report goes out per tick;
//! - `incarnation`: random id of this Envoy's counters (reports carry it; a restart changes it);
//! - `view.<cluster>`: the aggregator's last view of a cluster, when it arrived and for how long it holds.
//!
//! Envoy's CAS only guards keys that exist, so `init` creates the counters first. It runs in
//! `on_configure`, where the main-thread VM comes before the worker VMs are cloned from it.

use crate::host;
use tailweight_core::shared_data::{parse_counter, parse_slot, parse_stored_view};
pub use tailweight_core::shared_data::{Slot, StoredView};

const PREFIX: &str = "tailweight.";
/// CAS retries before giving up for this tick (contention is between a handful of VMs).
const CAS_RETRIES: usize = 16;

fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// Read-modify-write of a decimal counter with CAS. `update` returns the new value, or None to leave it.
fn update_counter(name: &str, mut update: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
    let key = key(name);
    for _ in 0..CAS_RETRIES {
        let (bytes, cas) = host::shared_get(&key);
        let current = parse_counter(bytes.as_deref());
        let next = update(current)?;
        if host::shared_set(&key, next.to_string().as_bytes(), cas) {
            return Some(next);
        }
    }
    None
}

/// Create the CAS-guarded keys if missing (see the module comment).
pub fn init(incarnation_candidate: u64) {
    for (name, value) in [("vm_seq", 0), ("report_epoch", 0), ("incarnation", incarnation_candidate.max(1))] {
        let key = key(name);
        if host::shared_get(&key).0.is_none() {
            host::shared_set(&key, value.to_string().as_bytes(), None);
        }
    }
}

/// A slot number of our own.
pub fn claim_slot() -> Option<u64> {
    update_counter("vm_seq", |n| Some(n + 1)).map(|n| n - 1)
}

pub fn slots_claimed() -> u64 {
    read_counter("vm_seq")
}

fn read_counter(name: &str) -> u64 {
    parse_counter(host::shared_get(&key(name)).0.as_deref())
}

pub fn publish_slot(slot: u64, snapshot: &Slot) {
    if let Ok(bytes) = serde_json::to_vec(snapshot) {
        host::shared_set(&key(&format!("slot.{slot}")), &bytes, None);
    }
}

pub fn read_slot(slot: u64) -> Option<Slot> {
    let (bytes, _) = host::shared_get(&key(&format!("slot.{slot}")));
    parse_slot(&bytes?)
}

/// Claim report period `epoch`: true for exactly one caller per epoch.
pub fn claim_report(epoch: u64) -> bool {
    update_counter("report_epoch", |last| (epoch > last).then_some(epoch)).is_some()
}

/// This Envoy's incarnation (set by `init`).
pub fn incarnation() -> u64 {
    read_counter("incarnation")
}

pub fn store_view(view: &StoredView) {
    if let Ok(bytes) = serde_json::to_vec(view) {
        host::shared_set(&key(&format!("view.{}", view.view.name)), &bytes, None);
    }
}

/// The stored view of `cluster` if it changed since CAS token `seen` (returns the new token too).
pub fn view_if_changed(cluster: &str, seen: Option<u32>) -> Option<(StoredView, Option<u32>)> {
    let (bytes, cas) = host::shared_get(&key(&format!("view.{cluster}")));
    if cas == seen {
        return None;
    }
    let view = parse_stored_view(&bytes?)?;
    Some((view, cas))
}
