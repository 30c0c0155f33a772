//! The state the workers of one proxy share, read and written through the host (layout:
//! `shared_layout`): slot numbers and heartbeats, each worker's snapshot, the report election,
//! the aggregator's views, the server role's counts.
//!
//! A host's compare-and-swap only guards keys that exist, so `init` creates the counters first. A
//! Wasm shell runs it in `on_configure`, where the main thread's VM comes before the worker VMs.

use crate::host::Host;
use crate::server_inflight::PublishedCount;
use crate::shared_layout::{key, numbered_key, pack_words, parse_counter, unpack_words, view_key, Beat, LastReport};
use crate::slot::{Slot, StoredView};

/// CAS retries before giving up for this tick (contention is between a handful of workers).
const CAS_RETRIES: usize = 16;

/// The shared state, seen through one worker's host.
pub struct SharedData<'h, H: Host>(pub &'h H);

impl<H: Host> SharedData<'_, H> {
    /// Read-modify-write of a decimal counter with CAS. `update` returns the new value, or None to
    /// leave it.
    fn update_counter(&self, name: &str, mut update: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        let key = key(name);
        for _ in 0..CAS_RETRIES {
            let (bytes, cas) = self.0.shared_get(&key);
            let current = parse_counter(bytes.as_deref());
            let next = update(current)?;
            if self.0.shared_set(&key, next.to_string().as_bytes(), cas) {
                return Some(next);
            }
        }
        None
    }

    fn read_counter(&self, name: &str) -> u64 {
        parse_counter(self.0.shared_get(&key(name)).0.as_deref())
    }

    /// Create the CAS-guarded keys if missing (see the module comment).
    pub fn init(&self, incarnation_candidate: u64) {
        for (name, value) in
            [("vm_seq", 0), ("report_epoch", 0), ("views", 0), ("incarnation", incarnation_candidate.max(1))]
        {
            let key = key(name);
            if self.0.shared_get(&key).0.is_none() {
                self.0.shared_set(&key, value.to_string().as_bytes(), None);
            }
        }
    }

    /// A new slot number (never held before).
    pub fn new_slot(&self) -> Option<u64> {
        self.update_counter("vm_seq", |n| Some(n + 1)).map(|n| n - 1)
    }

    /// A slot for worker `holder`: the first whose beat `gone` says is gone, taken over with a CAS
    /// on that beat (a beat now, of the slot's version, so no other worker takes it and the siblings
    /// that dropped its snapshot do not read the old one again), else a new one. Returns the slot
    /// and its version (this worker's first snapshot there is published as the next, so every
    /// sibling reads it).
    pub fn claim_slot(&self, holder: u64, now_us: u64, gone: impl Fn(Beat) -> bool) -> Option<(u64, u64)> {
        for number in 0..self.slots_claimed() {
            let key = numbered_key("beat", number);
            let (bytes, cas) = self.0.shared_get(&key);
            let Some(beat) = bytes.and_then(|b| unpack_words(&b)).map(Beat::of_words) else { continue };
            let taken = Beat { version: beat.version, at_us: now_us, holder };
            if gone(beat) && cas.is_some() && self.0.shared_set(&key, pack_words(taken.words()).as_flattened(), cas) {
                return Some((number, beat.version));
            }
        }
        self.new_slot().map(|number| (number, 0))
    }

    pub fn slots_claimed(&self) -> u64 {
        self.read_counter("vm_seq")
    }

    pub fn write_beat(&self, slot: u64, beat: Beat) {
        self.write_words(&numbered_key("beat", slot), beat.words());
    }

    pub fn read_beat(&self, slot: u64) -> Option<Beat> {
        self.read_words(&numbered_key("beat", slot)).map(Beat::of_words)
    }

    /// `words` under `key` (see `shared_layout::pack_words`).
    fn write_words<const N: usize>(&self, key: &str, words: [u64; N]) {
        self.0.shared_set(key, pack_words(words).as_flattened(), None);
    }

    /// The first `N` words under `key`; None when absent or shorter.
    fn read_words<const N: usize>(&self, key: &str) -> Option<[u64; N]> {
        unpack_words(&self.0.shared_get(key).0?)
    }

    pub fn publish_slot(&self, slot: u64, snapshot: &Slot) {
        self.0.shared_set(&numbered_key("slot", slot), &snapshot.encode(), None);
    }

    pub fn read_slot(&self, slot: u64) -> Option<Slot> {
        let (bytes, _) = self.0.shared_get(&numbered_key("slot", slot));
        Slot::decode(&bytes?).ok()
    }

    /// Claim the report period starting at `start_ms`: Ok for exactly one caller per period
    /// (periods nest, see `tick::report_period_ms`, so a later period always starts later); else
    /// the start of the latest period claimed (at or after `start_ms`).
    pub fn claim_report(&self, start_ms: u64) -> Result<(), u64> {
        let mut latest = start_ms;
        match self.update_counter("report_epoch", |last| {
            latest = last.max(start_ms);
            (start_ms > last).then_some(start_ms)
        }) {
            Some(_) => Ok(()),
            None => Err(latest),
        }
    }

    pub fn last_report(&self) -> LastReport {
        self.read_words(&key("reported")).map(LastReport::of_words).unwrap_or_default()
    }

    pub fn set_last_report(&self, last: LastReport) {
        self.write_words(&key("reported"), last.words());
    }

    /// This proxy's incarnation (set by `init`).
    pub fn incarnation(&self) -> u64 {
        self.read_counter("incarnation")
    }

    /// Store `view` unless the stored one is as of a later time (a late answer to an earlier
    /// report). True if stored.
    pub fn store_view(&self, view: &StoredView) -> bool {
        let key = view_key(&view.view.name);
        let encoded = view.encode();
        for _ in 0..CAS_RETRIES {
            let (bytes, cas) = self.0.shared_get(&key);
            let stored_as_of = bytes.and_then(|b| StoredView::decode(&b).ok()).map(|v| v.as_of_us);
            if stored_as_of.is_some_and(|at| at > view.as_of_us) {
                return false;
            }
            if self.0.shared_set(&key, &encoded, cas) {
                return true;
            }
        }
        false
    }

    /// Views were stored: the other workers read them at their next tick.
    pub fn views_stored(&self) {
        self.update_counter("views", |n| Some(n.wrapping_add(1)));
    }

    /// How many times views were stored so far (compare to know whether to read them).
    pub fn views_version(&self) -> u64 {
        self.read_counter("views")
    }

    /// The stored view of `cluster` if it changed since CAS token `seen` (returns the new token too).
    pub fn view_if_changed(&self, cluster: &str, seen: Option<u32>) -> Option<(StoredView, Option<u32>)> {
        let (bytes, cas) = self.0.shared_get(&view_key(cluster));
        if cas == seen {
            return None;
        }
        let view = StoredView::decode(&bytes?).ok()?;
        Some((view, cas))
    }

    /// A server-role worker's requests in flight (see `server_inflight`).
    pub fn publish_server_count(&self, slot: u64, count: PublishedCount) {
        self.0.shared_set(&numbered_key("server_rif", slot), &count.encode(), None);
    }

    pub fn read_server_count(&self, slot: u64) -> Option<PublishedCount> {
        PublishedCount::decode(&self.0.shared_get(&numbered_key("server_rif", slot)).0?)
    }
}
