//! Room in the book: principals as they enter and grow (what `fair_room.rs` reads), and the
//! attestations past their ttl given back the moment a request needs their room, not only at the
//! next expiry pass (a filled book's expired records would refuse newcomers until then).

use super::WeightBook;
use crate::evidence;
use crate::memory::PRINCIPAL;
use crate::record::PrincipalRecord;
use crate::rejection::Rejection;

impl WeightBook {
    /// A new principal's id (ids are reused only once nothing in the book refers to them).
    pub(super) fn enter_principal(&mut self, name: &str) -> u32 {
        while self.principals.contains_key(&self.next_principal) {
            self.next_principal = self.next_principal.wrapping_add(1);
        }
        let id = self.next_principal;
        self.next_principal = self.next_principal.wrapping_add(1);
        self.principals.insert(id, PrincipalRecord::default());
        self.principal_ids.insert(name.to_string(), id);
        self.bytes += PRINCIPAL.of(name.len());
        id
    }

    /// Mark principal `id` as grown at `now_us` if it holds more than `held_before` (`fair_room.rs`).
    pub(super) fn note_growth(&mut self, id: u32, held_before: usize, now_us: u64) {
        if let Some(r) = self.principals.get_mut(&id).filter(|r| r.bytes > held_before) {
            r.grew_at_us = now_us;
        }
    }

    /// After `refused`: if it was for room and an attestation may have expired by `now_us`
    /// (`evidence_expires_us`), give back those that did and `admit` once more; else `refused`.
    /// A pass frees at least the record it waited for, unless renewed meanwhile.
    pub(super) fn retry_after_expiry(
        &mut self,
        refused: Rejection,
        now_us: u64,
        admit: impl Fn(&WeightBook) -> Result<(), Rejection>,
    ) -> Result<(), Rejection> {
        if refused != Rejection::MemoryBudget || now_us < self.evidence_expires_us {
            return Err(refused);
        }
        self.evidence_expires_us = evidence::expire(&mut self.evidence, &mut self.bytes, &mut self.principals, now_us);
        admit(self)
    }
}
