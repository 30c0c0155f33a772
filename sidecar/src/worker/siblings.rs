//! What a worker knows of the other workers of its proxy: their heartbeats every busy tick, their
//! snapshots when the version moved. A sibling is live while its beat is within the live window
//! (its requests in flight count), gone once silent for longer than the endpoint ttl (its snapshot
//! is dropped and its beat read only every `SLOTS_REREAD_TICKS` ticks).

use crate::host::Host;
use crate::shared::SharedData;
use crate::slot::Slot;
use tailweight_picker::SnapshotPart;

/// The number of slots claimed is read again every this many busy ticks (workers come only when
/// the proxy loads a configuration; a new one is folded in within these ticks).
const SLOTS_REREAD_TICKS: u64 = 8;

/// What this worker last read of another worker's slot.
struct SiblingSlot {
    number: u64,
    version: u64,
    live: bool,
    gone: bool,
    snapshot: Slot,
}

#[derive(Default)]
pub struct Siblings {
    slots: Vec<SiblingSlot>,
    /// Busy ticks so far, and the slots claimed as last read (see `SLOTS_REREAD_TICKS`).
    ticks: u64,
    pub slots_claimed: u64,
}

impl Siblings {
    /// Forget slot `number` (this worker took it over).
    pub fn forget(&mut self, number: u64) {
        self.slots.retain(|s| s.number != number);
    }

    /// Read the other workers' heartbeats, and the slots whose version moved. True if anything the
    /// siblings' stats come from changed (a new snapshot, or a worker that came or went).
    #[inline(never)]
    pub fn read(
        &mut self,
        shared: &SharedData<impl Host>,
        own: Option<u64>,
        now_us: u64,
        live_ms: u64,
        ttl_ms: u64,
    ) -> bool {
        let live_after = now_us.saturating_sub(live_ms * 1_000);
        let mut changed = false;
        let reread = self.ticks % SLOTS_REREAD_TICKS == 0;
        if reread {
            self.slots_claimed = shared.slots_claimed();
        }
        self.ticks += 1;
        for number in (0..self.slots_claimed).filter(|n| Some(*n) != own) {
            let known = self.slots.iter().position(|s| s.number == number);
            if !reread && known.is_some_and(|at| self.slots[at].gone) {
                continue;
            }
            let Some(beat) = shared.read_beat(number) else { continue };
            let live = beat.at_us >= live_after;
            let gone = beat.gone(now_us, ttl_ms, live_ms);
            let at = known.unwrap_or_else(|| {
                self.slots.push(SiblingSlot { number, version: 0, live, gone: false, snapshot: Slot::default() });
                self.slots.len() - 1
            });
            let sibling = &mut self.slots[at];
            if gone {
                if !sibling.snapshot.clusters.is_empty() {
                    sibling.snapshot = Slot::default();
                    changed = true;
                }
                // Read again once it beats: whatever it publishes then is new.
                sibling.version = beat.version;
            } else if sibling.version != beat.version {
                if let Some(snapshot) = shared.read_slot(number) {
                    (sibling.snapshot, sibling.version) = (snapshot, beat.version);
                    changed = true;
                }
            }
            changed |= sibling.live != live;
            (sibling.live, sibling.gone) = (live, gone);
        }
        changed
    }

    /// Each sibling's snapshot, as the balancer and the report merge them.
    pub fn parts(&self) -> impl Iterator<Item = SnapshotPart<'_>> {
        self.slots.iter().map(|s| SnapshotPart {
            written_us: s.snapshot.written_us,
            live: s.live,
            clusters: &s.snapshot.clusters,
        })
    }

    /// The (slot, version) pairs of the siblings' snapshots (what a report is made of).
    pub fn versions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.iter().map(|s| (s.number, s.version))
    }

    /// Is any live sibling's slot lower than `own` (then it sets the proxy-wide gauges)?
    pub fn a_live_one_below(&self, own: u64) -> bool {
        self.slots.iter().any(|s| s.live && s.number < own)
    }
}
