//! How much of the book a principal may fill when principals have quotas (`principal_share` < 1):
//! a reserve for newcomers sized by the principals waiting.
//!
//! With `n` principals in the book, a principal's fair share is `F = max_bytes / (n + 1)` (the
//! `+ 1`: the next newcomer). A principal is waiting while it holds less than `F` and grew within
//! the last `waiting_us` (it is still taking room). The reserve is one newcomer's share and what
//! the waiting principals lack of theirs: `reserve = F + sum over waiting q of (F - held_q)`.
//! A principal that will hold at most `F` may fill the whole book; one that will hold more, all
//! but the reserve (its own lack not counted).
//!
//! So no set of principals, however many, takes the room of one that holds nothing: above their
//! shares they never fill the last `F`, and while others below their shares are growing, the room
//! the others' expiring records give back is theirs, not retaken. Renewals add nothing and need no
//! room. Principals below their shares that no longer grow (a small, steady caller) keep nothing in
//! reserve: a large principal's growth is held back only while someone is waiting.

use crate::params::WeightParams;
use crate::record::PrincipalRecord;
use std::collections::HashMap;

/// The book's principals, as far as the room each may fill goes.
pub(crate) struct FairRoom<'a> {
    pub params: &'a WeightParams,
    pub principals: &'a HashMap<u32, PrincipalRecord>,
    pub now_us: u64,
}

impl FairRoom<'_> {
    /// The book's bytes principal `asking` (None: new to the book) may fill if it will hold
    /// `held_after`: `room(max_bytes, F, lack of the others waiting, held_after)`; all of
    /// `max_bytes` without quotas.
    pub fn room_for(&self, asking: Option<u32>, held_after: usize) -> usize {
        let p = self.params;
        if p.principal_share >= 1.0 {
            return p.max_bytes;
        }
        let share = fair_share(p.max_bytes, self.principals.len());
        if held_after <= share {
            return p.max_bytes;
        }
        let others = self.principals.iter().filter(|(id, _)| Some(**id) != asking);
        let lack = others.map(|(_, r)| lack(share, r.bytes, r.grew_at_us, self.now_us, p.waiting_us)).sum();
        room(p.max_bytes, share, lack, held_after)
    }
}

/// One principal's fair share of a book of `max_bytes` with `principals` in it:
/// `max_bytes / (principals + 1)`.
pub(crate) fn fair_share(max_bytes: usize, principals: usize) -> usize {
    max_bytes / principals.saturating_add(1)
}

/// What a principal holding `held` that last grew at `grew_at_us` lacks of its fair share `share`
/// at `now_us`: `share - held` while it is waiting (below it, grown within `waiting_us`), else 0.
pub(crate) fn lack(share: usize, held: usize, grew_at_us: u64, now_us: u64, waiting_us: u64) -> usize {
    if now_us.saturating_sub(grew_at_us) < waiting_us {
        share.saturating_sub(held)
    } else {
        0
    }
}

/// The bytes of a book of `max_bytes` a principal that will hold `held_after` may fill, with fair
/// share `share` and `waiting` bytes lacking to the others waiting: `max_bytes` while `held_after
/// <= share`, else `max_bytes - share - waiting` (at least 0).
pub(crate) fn room(max_bytes: usize, share: usize, waiting: usize, held_after: usize) -> usize {
    if held_after <= share {
        max_bytes
    } else {
        max_bytes.saturating_sub(share).saturating_sub(waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    fn record(bytes: usize, grew_at_us: u64) -> PrincipalRecord {
        PrincipalRecord { bytes, grew_at_us, ..PrincipalRecord::default() }
    }

    #[test]
    fn a_fair_share_keeps_one_for_the_next_newcomer() {
        assert_eq!(fair_share(1_000, 0), 1_000);
        assert_eq!(fair_share(1_000, 4), 200);
        assert_eq!(fair_share(1_000, usize::MAX), 0);
    }

    #[test]
    fn only_principals_below_their_share_that_grew_lately_are_waiting() {
        assert_eq!(lack(100, 30, 9 * SEC, 10 * SEC, 5 * SEC), 70);
        assert_eq!(lack(100, 130, 9 * SEC, 10 * SEC, 5 * SEC), 0, "above its share: lacks nothing");
        assert_eq!(lack(100, 30, 5 * SEC, 10 * SEC, 5 * SEC), 0, "steady for waiting_us: keeps nothing in reserve");
        assert_eq!(lack(100, 30, 11 * SEC, 10 * SEC, 5 * SEC), 70, "a growth time past now still counts");
    }

    #[test]
    fn within_its_share_a_principal_fills_the_book_above_it_all_but_the_reserve() {
        assert_eq!(room(1_000, 200, 300, 200), 1_000);
        assert_eq!(room(1_000, 200, 300, 201), 500);
        assert_eq!(room(1_000, 200, 900, 201), 0);
    }

    #[test]
    fn no_set_of_principals_at_their_quotas_takes_the_room_of_one_that_holds_nothing() {
        // Four principals of a quarter each fill what the rule lets them (one at a time, 1 KB steps,
        // all growing), then a newcomer comes: whatever order they came in, the newcomer's share
        // is free.
        let params = WeightParams { principal_share: 0.25, max_bytes: 1_000_000, ..WeightParams::default() };
        let mut principals: HashMap<u32, PrincipalRecord> = (0..4).map(|id| (id, record(0, 0))).collect();
        let mut total = 0usize;
        for _ in 0..1_000 {
            for id in 0..4 {
                let held = principals[&id].bytes;
                let fair = FairRoom { params: &params, principals: &principals, now_us: SEC };
                if held + 1_000 <= params.quota(params.max_bytes)
                    && total + 1_000 <= fair.room_for(Some(id), held + 1_000)
                {
                    principals.insert(id, record(held + 1_000, SEC));
                    total += 1_000;
                }
            }
        }
        let share = fair_share(params.max_bytes, 4);
        assert!(params.max_bytes - total >= share, "free {} of a share {share}", params.max_bytes - total);
        let fair = FairRoom { params: &params, principals: &principals, now_us: SEC };
        assert_eq!(fair.room_for(None, 1_000), params.max_bytes, "the newcomer fills what is free");
        // Once it holds and grows (waiting), the four above their shares may not take what it lacks.
        principals.insert(9, record(1_000, 2 * SEC));
        let fair = FairRoom { params: &params, principals: &principals, now_us: 2 * SEC };
        let new_share = fair_share(params.max_bytes, 5);
        let room = fair.room_for(Some(0), principals[&0].bytes + 1);
        assert_eq!(room, params.max_bytes - new_share - (new_share - 1_000));
        assert!(room < total, "the heavy ones are held back");
        // Steady for waiting_us, it keeps nothing in reserve beyond the next newcomer's share.
        let later = FairRoom { params: &params, principals: &principals, now_us: 2 * SEC + params.waiting_us };
        assert_eq!(later.room_for(Some(0), principals[&0].bytes + 1), params.max_bytes - new_share);
    }

    #[test]
    fn without_quotas_there_is_no_reserve() {
        let params = WeightParams { max_bytes: 1_000, ..WeightParams::default() };
        let principals: HashMap<u32, PrincipalRecord> = [(0, record(900, 0))].into();
        assert_eq!(FairRoom { params: &params, principals: &principals, now_us: 0 }.room_for(Some(0), 999), 1_000);
    }
}
