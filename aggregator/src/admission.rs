//! What a request holds before any of its work: a slot (one of `--max-concurrent-requests`, shared
//! fairly between principals) and bytes of the memory budget set aside for requests in progress
//! (`budget.rs`), reserved for what its body, parse and answer can cost at most.
//! Hand-written: tower's concurrency limits keep one count for all callers, and no maintained crate
//! keys one by caller or counts bytes rather than requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    /// Every slot is taken.
    Full,
    /// The principal holds its share (see `Slots::enter`).
    PrincipalBusy,
}

/// The request slots and who holds them.
#[derive(Debug)]
pub struct Slots {
    total: usize,
    per_principal: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_principal: HashMap<String, usize>,
}

impl Slots {
    pub fn new(total: usize, per_principal: usize) -> Arc<Slots> {
        Arc::new(Slots { total: total.max(1), per_principal: per_principal.max(1), held: Mutex::default() })
    }

    /// A slot for one more request of `principal`, held until the guard drops. A principal's first
    /// slot may be any free one; its second and later (up to `per_principal`) only while at most
    /// `ceil(total / 2)` slots are held once it is taken. So `k` principals hold at most
    /// `ceil(total / 2) + k` slots (4 of 16: 12), and while fewer than `total / 2` principals have
    /// requests in progress, one more always finds a slot.
    pub fn enter(self: &Arc<Self>, principal: &str) -> Result<Slot, SlotRefusal> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.total >= self.total {
            return Err(SlotRefusal::Full);
        }
        let mine = held.by_principal.get(principal).copied().unwrap_or(0);
        if mine >= self.per_principal || (mine > 0 && held.total + 1 > self.total.div_ceil(2)) {
            return Err(SlotRefusal::PrincipalBusy);
        }
        held.total += 1;
        *held.by_principal.entry(principal.to_string()).or_insert(0) += 1;
        Ok(Slot { slots: self.clone(), principal: principal.to_string() })
    }

    /// Slots held now, in all.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// One request of a principal in progress (see `Slots::enter`).
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    principal: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_principal.get_mut(&self.principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_principal.remove(&self.principal);
            }
        }
    }
}

/// The bytes set aside for requests in progress, counted in KiB (a semaphore's permits).
#[derive(Debug)]
pub struct MemoryBudget {
    kib: Arc<Semaphore>,
    total_kib: usize,
}

/// Bytes of the budget a request holds until it drops.
#[derive(Debug)]
pub struct Reservation {
    _permits: OwnedSemaphorePermit,
    pub bytes: usize,
}

impl MemoryBudget {
    pub fn new(bytes: usize) -> MemoryBudget {
        let total_kib = (bytes >> 10).clamp(1, Semaphore::MAX_PERMITS);
        MemoryBudget { kib: Arc::new(Semaphore::new(total_kib)), total_kib }
    }

    /// `bytes` (rounded up to KiB) of the budget, or None while that much is not free.
    pub fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let kib = u32::try_from(bytes.div_ceil(1024)).ok()?;
        let permits = self.kib.clone().try_acquire_many_owned(kib).ok()?;
        Some(Reservation { _permits: permits, bytes: kib as usize * 1024 })
    }

    /// Bytes free now.
    pub fn free_bytes(&self) -> usize {
        self.kib.available_permits() * 1024
    }

    pub fn total_bytes(&self) -> usize {
        self.total_kib * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_principals_cannot_hold_every_slot_and_a_newcomer_gets_one() {
        let slots = Slots::new(16, 4);
        let mut held = Vec::new();
        for p in ["a", "b", "c", "d"] {
            while let Ok(s) = slots.enter(p) {
                held.push(s);
            }
        }
        // a and b take 4 each (half of 16), then c and d one each: 10, within ceil(16 / 2) + 4.
        assert_eq!(held.len(), 10);
        // Principals with nothing in progress each still get one.
        let newcomers: Vec<_> = (0..4).map(|i| slots.enter(&format!("n{i}")).unwrap()).collect();
        assert_eq!(slots.held(), 14);
        assert_eq!(slots.enter("a").unwrap_err(), SlotRefusal::PrincipalBusy);
        drop(newcomers);
        drop(held);
        assert_eq!(slots.held(), 0);
        // Alone, a principal gets up to its cap, no more.
        let alone: Vec<_> = (0..4).map(|_| slots.enter("a").unwrap()).collect();
        assert_eq!(slots.enter("a").unwrap_err(), SlotRefusal::PrincipalBusy);
        assert_eq!(alone.len(), 4);
    }

    #[test]
    fn every_slot_taken_is_full() {
        let slots = Slots::new(3, 1);
        let held: Vec<_> = ["a", "b", "c"].iter().map(|p| slots.enter(p).unwrap()).collect();
        assert_eq!(slots.enter("d").unwrap_err(), SlotRefusal::Full);
        drop(held);
        assert!(slots.enter("d").is_ok());
    }

    #[test]
    fn the_memory_budget_gives_what_is_free_and_takes_it_back() {
        let budget = MemoryBudget::new(10 << 10);
        let a = budget.reserve(6 << 10).unwrap();
        assert_eq!(a.bytes, 6 << 10);
        assert!(budget.reserve(5 << 10).is_none());
        let b = budget.reserve(4 * 1024 - 100).unwrap();
        assert_eq!((b.bytes, budget.free_bytes()), (4 << 10, 0));
        drop((a, b));
        assert_eq!(budget.free_bytes(), budget.total_bytes());
    }
}
