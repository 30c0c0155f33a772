//! The digest of what a report is made of: the (slot, version) pairs of the VMs' snapshots it
//! merged, so that no VM reports the same state twice. Host-free.

use tailweight_math::hash::fnv1a;
use tailweight_math::rng::Rng;

/// A multiset hash of the (slot, version) pairs, so the same set gives the same digest in any
/// order (no sort): the wrapping sum of each pair's FNV-1a, mixed by SplitMix64's output function.
/// Unmixed FNV-1a values of small numbers (zero high bytes: nearly linear) often sum to the same
/// digest when two versions move at once. 0 is kept for "never reported".
pub fn report_digest(pairs: impl Iterator<Item = (u64, u64)>) -> u64 {
    pairs
        .map(|(n, v)| Rng::new(fnv1a(n.to_le_bytes().into_iter().chain(v.to_le_bytes()))).next_u64())
        .fold(0u64, u64::wrapping_add)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_same_pairs_in_any_order_give_the_same_digest() {
        let pairs = [(0, 5), (1, 9), (2, 1), (u64::MAX, 3)];
        let digest = report_digest(pairs.into_iter());
        assert_eq!(report_digest(pairs.into_iter().rev()), digest);
        assert_eq!(report_digest([pairs[2], pairs[0], pairs[3], pairs[1]].into_iter()), digest);
        assert_ne!(report_digest(pairs[..3].iter().copied()), digest, "a VM more or less changes it");
    }

    #[test]
    fn zero_is_never_a_digest() {
        assert_eq!(report_digest(std::iter::empty()), 1);
        assert_ne!(report_digest([(0, 0)].into_iter()), 0);
    }

    #[test]
    fn versions_moving_together_give_new_digests() {
        // Four VMs, two of whose versions move at once, over a few hundred states: no repeats.
        let mut seen = HashSet::new();
        for a in 0..20u64 {
            for b in 0..20u64 {
                let digest = report_digest([(0, a), (1, b), (2, 7), (3, 7)].into_iter());
                assert!(seen.insert(digest), "({a}, {b}) repeats a digest");
            }
        }
    }
}
