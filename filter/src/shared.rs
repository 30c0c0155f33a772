//! Shared data between the VMs of one Envoy (one per worker thread plus the main thread; visible
//! only with the same `vm_id`): reads and writes through the host (layout: `shared_layout`).
//!
//! Envoy's CAS only guards keys that exist, so `init` creates the counters first. It runs in
//! `on_configure`, where the main-thread VM comes before the worker VMs are cloned from it.

use crate::host;
use crate::shared_layout::{key, numbered_key, pack_words, parse_counter, unpack_words, view_key, Beat, LastReport};
pub use tailweight_picker::server_inflight::PublishedCount;
pub use tailweight_picker::slot::{Slot, StoredView};

/// CAS retries before giving up for this tick (contention is between a handful of VMs).
const CAS_RETRIES: usize = 16;

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
    for (name, value) in
        [("vm_seq", 0), ("report_epoch", 0), ("views", 0), ("incarnation", incarnation_candidate.max(1))]
    {
        let key = key(name);
        if host::shared_get(&key).0.is_none() {
            host::shared_set(&key, value.to_string().as_bytes(), None);
        }
    }
}

/// A new slot number (never held before).
pub fn new_slot() -> Option<u64> {
    update_counter("vm_seq", |n| Some(n + 1)).map(|n| n - 1)
}

/// A slot for VM `holder`: the first whose beat `gone` says is gone, taken over with a CAS on that
/// beat (a beat now, of the slot's version, so no other VM takes it and the siblings that dropped
/// its snapshot do not read the old one again), else a new one. Returns the slot and its version
/// (this VM's first snapshot there is published as the next, so every sibling reads it).
pub fn claim_slot(holder: u64, now_us: u64, gone: impl Fn(Beat) -> bool) -> Option<(u64, u64)> {
    for number in 0..slots_claimed() {
        let key = numbered_key("beat", number);
        let (bytes, cas) = host::shared_get(&key);
        let Some(beat) = bytes.and_then(|b| unpack_words(&b)).map(Beat::of_words) else { continue };
        let taken = Beat { version: beat.version, at_us: now_us, holder };
        if gone(beat) && cas.is_some() && host::shared_set(&key, pack_words(taken.words()).as_flattened(), cas) {
            return Some((number, beat.version));
        }
    }
    new_slot().map(|number| (number, 0))
}

pub fn slots_claimed() -> u64 {
    read_counter("vm_seq")
}

fn read_counter(name: &str) -> u64 {
    parse_counter(host::shared_get(&key(name)).0.as_deref())
}

pub fn write_beat(slot: u64, beat: Beat) {
    write_words(&numbered_key("beat", slot), beat.words());
}

pub fn read_beat(slot: u64) -> Option<Beat> {
    read_words(&numbered_key("beat", slot)).map(Beat::of_words)
}

/// `words` under `key` (see `shared_layout::pack_words`).
fn write_words<const N: usize>(key: &str, words: [u64; N]) {
    host::shared_set(key, pack_words(words).as_flattened(), None);
}

/// The first `N` words under `key`; None when absent or shorter.
fn read_words<const N: usize>(key: &str) -> Option<[u64; N]> {
    unpack_words(&host::shared_get(key).0?)
}

pub fn publish_slot(slot: u64, snapshot: &Slot) {
    host::shared_set(&numbered_key("slot", slot), &snapshot.encode(), None);
}

pub fn read_slot(slot: u64) -> Option<Slot> {
    let (bytes, _) = host::shared_get(&numbered_key("slot", slot));
    Slot::decode(&bytes?).ok()
}

/// Claim the report period starting at `start_ms`: Ok for exactly one caller per period (periods
/// nest, see `tailweight_picker::tick::report_period_ms`, so a later period always starts later);
/// else the start of the latest period claimed (at or after `start_ms`).
pub fn claim_report(start_ms: u64) -> Result<(), u64> {
    let mut latest = start_ms;
    match update_counter("report_epoch", |last| {
        latest = last.max(start_ms);
        (start_ms > last).then_some(start_ms)
    }) {
        Some(_) => Ok(()),
        None => Err(latest),
    }
}

pub fn last_report() -> LastReport {
    read_words(&key("reported")).map(LastReport::of_words).unwrap_or_default()
}

pub fn set_last_report(last: LastReport) {
    write_words(&key("reported"), last.words());
}

/// This Envoy's incarnation (set by `init`).
pub fn incarnation() -> u64 {
    read_counter("incarnation")
}

pub fn store_view(view: &StoredView) {
    host::shared_set(&view_key(&view.view.name), &view.encode(), None);
}

/// Views were stored: the other VMs read them at their next tick.
pub fn views_stored() {
    update_counter("views", |n| Some(n.wrapping_add(1)));
}

/// How many times views were stored so far (compare to know whether to read them).
pub fn views_version() -> u64 {
    read_counter("views")
}

/// The stored view of `cluster` if it changed since CAS token `seen` (returns the new token too).
pub fn view_if_changed(cluster: &str, seen: Option<u32>) -> Option<(StoredView, Option<u32>)> {
    let (bytes, cas) = host::shared_get(&view_key(cluster));
    if cas == seen {
        return None;
    }
    let view = StoredView::decode(&bytes?).ok()?;
    Some((view, cas))
}

/// A server-role VM's requests in flight (see `tailweight_picker::server_inflight`).
pub fn publish_server_count(slot: u64, count: PublishedCount) {
    host::shared_set(&numbered_key("server_rif", slot), &count.encode(), None);
}

pub fn read_server_count(slot: u64) -> Option<PublishedCount> {
    PublishedCount::decode(&host::shared_get(&numbered_key("server_rif", slot)).0?)
}
