//! A worker's own slot in the shared state: which one it holds (if any), the snapshot it
//! published there and the heartbeat that tells its siblings it is alive.
//!
//! A worker claims a slot on its first busy tick: a gone worker's (see `Beat::gone`), else a new
//! number. It beats every busy tick; an idle worker writes one last beat at 0 (gone at once) and
//! gives the slot up, claiming one again when it has requests. A worker silent for longer than the
//! live window checks that it still holds its slot before writing there again (another may have
//! taken it over).

use crate::host::Host;
use crate::shared::SharedData;
use crate::shared_layout::Beat;
use crate::slot::Slot;
use tailweight_picker::Balancer;

/// Whether a worker holds a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotHold {
    /// None claimed yet (or given up when idle): the next busy tick claims one.
    Unclaimed,
    Held(u64),
    /// None could be claimed (the shared state refused): the worker runs alone, unpublished.
    NoRoom,
}

pub struct SlotLease {
    pub hold: SlotHold,
    /// The random id this worker holds its slot by.
    holder: u64,
    last_beat_us: u64,
    /// This worker's published snapshot, its version, and the balancer revision it was taken at.
    pub own: Slot,
    pub own_version: u64,
    own_revision: Option<u64>,
    /// Whether it marked itself gone (idle).
    left: bool,
}

impl SlotLease {
    pub fn new(holder: u64) -> Self {
        SlotLease {
            hold: SlotHold::Unclaimed,
            holder,
            last_beat_us: 0,
            own: Slot::default(),
            own_version: 0,
            own_revision: None,
            left: false,
        }
    }

    /// The slot held, if any.
    pub fn number(&self) -> Option<u64> {
        match self.hold {
            SlotHold::Held(n) => Some(n),
            SlotHold::Unclaimed | SlotHold::NoRoom => None,
        }
    }

    /// Idle: the published snapshot is the balancer's current one and holds no cluster.
    pub fn idle(&self, balancer: &Balancer) -> bool {
        self.own_revision == Some(balancer.revision()) && self.own.clusters.is_empty()
    }

    /// Going idle: one last beat at 0 marks this worker gone (another may take the slot over), and
    /// the slot is given up.
    #[inline(never)]
    pub fn leave(&mut self, shared: &SharedData<impl Host>) {
        if let (Some(slot), false) = (self.number(), self.left) {
            shared.write_beat(slot, Beat { version: self.own_version, at_us: 0, holder: self.holder });
            self.left = true;
            self.hold = SlotHold::Unclaimed;
        }
    }

    /// The slot held, or one claimed now; `live_ms` is the live window, `ttl_ms` the endpoint ttl
    /// (see `Beat::gone`). A newly claimed slot drops the published snapshot's revision, so the
    /// next `publish` writes it as the slot's next version.
    #[inline(never)]
    pub fn claim(&mut self, shared: &SharedData<impl Host>, now_us: u64, live_ms: u64, ttl_ms: u64) -> SlotHold {
        self.left = false;
        let silent = now_us.saturating_sub(self.last_beat_us) > live_ms.saturating_mul(1_000);
        match self.hold {
            SlotHold::NoRoom => return SlotHold::NoRoom,
            SlotHold::Held(slot) if !silent || shared.read_beat(slot).is_some_and(|b| b.holder == self.holder) => {
                return self.hold;
            }
            SlotHold::Held(_) | SlotHold::Unclaimed => {}
        }
        self.hold = match shared.claim_slot(self.holder, now_us, |b| b.gone(now_us, ttl_ms, live_ms)) {
            Some((slot, version)) => {
                self.own_version = version;
                SlotHold::Held(slot)
            }
            None => SlotHold::NoRoom,
        };
        self.own_revision = None;
        self.hold
    }

    /// Publish the balancer's snapshot if it changed since the last one, then beat.
    #[inline(never)]
    pub fn publish(&mut self, shared: &SharedData<impl Host>, balancer: &Balancer, now_us: u64) {
        if self.own_revision != Some(balancer.revision()) {
            self.own = Slot { written_us: now_us, clusters: balancer.snapshot(now_us) };
            self.own_version += 1;
            self.own_revision = Some(balancer.revision());
            if let Some(slot) = self.number() {
                shared.publish_slot(slot, &self.own);
            }
        }
        if let Some(slot) = self.number() {
            shared.write_beat(slot, Beat { version: self.own_version, at_us: now_us, holder: self.holder });
            self.last_beat_us = now_us;
        }
    }
}
