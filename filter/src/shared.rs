//! Shared data between the VMs of one Envoy (one per worker thread plus the main thread; visible
//! only with the same `vm_id`). Layout, all under `tailweight.`:
//! - `vm_seq`: how many VMs took a slot number (CAS counter);
//! - `beat.<n>`: VM n's heartbeat, written every tick: the version of its slot and when it ticked
//!   (16 bytes; a VM reads the others' beats every tick and their slots only when the version moved);
//! - `slot.<n>`: VM n's snapshot (cumulative counters, in flight, latency), rewritten only when its
//!   own observations changed (`core::slot`, binary);
//! - `report_epoch`: the start (ms) of the last report period someone claimed (CAS), so one
//!   report goes out per period;
//! - `reported`: the last report: a digest of the slot versions it was made of, so no VM reports
//!   the same state twice (an idle Envoy goes quiet), the requests it counted and when it went out,
//!   the rate its period follows (24 bytes);
//! - `server_rif.<n>`: a server-role VM n's requests in flight and when it published them
//!   (`core::server_inflight::PublishedCount`, 12 bytes), written at its tick when they changed;
//! - `incarnation`: random id of this Envoy's counters (reports carry it; a restart changes it);
//! - `view.<cluster>`: the aggregator's last view of a cluster, when it arrived and for how long it
//!   holds (`core::slot`, binary); `views`: bumped after views are stored, so the others read
//!   them only then.
//!
//! Envoy's CAS only guards keys that exist, so `init` creates the counters first. It runs in
//! `on_configure`, where the main-thread VM comes before the worker VMs are cloned from it.

use crate::host;
pub use tailweight_core::server_inflight::PublishedCount;
pub use tailweight_core::slot::{Slot, StoredView};

const PREFIX: &str = "tailweight.";
/// CAS retries before giving up for this tick (contention is between a handful of VMs).
const CAS_RETRIES: usize = 16;

fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The key of VM `n`'s entry of a kind (`beat.3`), formatted once (not a name, then its key).
fn numbered_key(kind: &str, n: u64) -> String {
    format!("{PREFIX}{kind}.{n}")
}

fn view_key(cluster: &str) -> String {
    format!("{PREFIX}view.{cluster}")
}

/// Read-modify-write of a decimal counter with CAS. `update` returns the new value, or None to leave it.
fn update_counter(name: &str, mut update: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
    let key = key(name);
    for _ in 0..CAS_RETRIES {
        let (bytes, cas) = host::shared_get(&key);
        let current = parse_counter(bytes);
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

/// A slot number of our own.
pub fn claim_slot() -> Option<u64> {
    update_counter("vm_seq", |n| Some(n + 1)).map(|n| n - 1)
}

pub fn slots_claimed() -> u64 {
    read_counter("vm_seq")
}

fn read_counter(name: &str) -> u64 {
    parse_counter(host::shared_get(&key(name)).0)
}

fn parse_counter(bytes: Option<Vec<u8>>) -> u64 {
    bytes.and_then(|b| std::str::from_utf8(&b).ok()?.parse().ok()).unwrap_or(0)
}

/// A VM's heartbeat: the version of its slot and when it last ticked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub version: u64,
    pub at_us: u64,
}

pub fn write_beat(slot: u64, beat: Beat) {
    write_words(&numbered_key("beat", slot), [beat.version, beat.at_us]);
}

pub fn read_beat(slot: u64) -> Option<Beat> {
    let [version, at_us] = read_words(&numbered_key("beat", slot))?;
    Some(Beat { version, at_us })
}

/// `words` under `key` as consecutive little-endian u64s.
fn write_words<const N: usize>(key: &str, words: [u64; N]) {
    let bytes = words.map(u64::to_le_bytes);
    host::shared_set(key, bytes.as_flattened(), None);
}

/// The first `N` little-endian u64s under `key`; None when absent or shorter.
fn read_words<const N: usize>(key: &str) -> Option<[u64; N]> {
    let bytes = host::shared_get(key).0?;
    let mut words = [0u64; N];
    for (i, word) in words.iter_mut().enumerate() {
        *word = u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?);
    }
    Some(words)
}

pub fn publish_slot(slot: u64, snapshot: &Slot) {
    host::shared_set(&numbered_key("slot", slot), &snapshot.encode(), None);
}

pub fn read_slot(slot: u64) -> Option<Slot> {
    let (bytes, _) = host::shared_get(&numbered_key("slot", slot));
    Slot::decode(&bytes?).ok()
}

/// Claim the report period starting at `start_ms`: Ok for exactly one caller per period (periods
/// nest, see `core::tick::report_period_ms`, so a later period always starts later); else the
/// start of the latest period claimed (at or after `start_ms`).
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

/// What the last report was made of: the digest of its slot versions (0: none yet), the requests
/// it counted (all endpoints, cumulative) and when it went out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastReport {
    pub digest: u64,
    pub requests: u64,
    pub at_ms: u64,
}

pub fn last_report() -> LastReport {
    read_words(&key("reported"))
        .map(|[digest, requests, at_ms]| LastReport { digest, requests, at_ms })
        .unwrap_or_default()
}

pub fn set_last_report(last: LastReport) {
    write_words(&key("reported"), [last.digest, last.requests, last.at_ms]);
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

/// A server-role VM's requests in flight (see `core::server_inflight`).
pub fn publish_server_count(slot: u64, count: PublishedCount) {
    host::shared_set(&numbered_key("server_rif", slot), &count.encode(), None);
}

pub fn read_server_count(slot: u64) -> Option<PublishedCount> {
    PublishedCount::decode(&host::shared_get(&numbered_key("server_rif", slot)).0?)
}
