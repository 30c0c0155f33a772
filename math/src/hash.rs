//! The hashes of the picker's and the weight book's maps. FxHash, their one fast hasher (rustc's
//! multiply-rotate, a word at a time) instead of SipHash. Every map that uses it has keys nobody can choose freely (cluster names from the
//! configuration and Envoy, endpoint addresses, the weight book's own sequential ids) and a bounded
//! size (the max_clusters / max_endpoints caps), so flooding resistance buys nothing there.
//! Hand-written rather than the `rustc-hash` crate: rustc-hash 1 does not rotate (string keys then
//! crowd a few buckets) and rustc-hash 2 hashes integers differently, while the weight book adds up
//! reporters in its id map's order, so the id hash fixes the weights down to the last bit.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash with a final `rotate_left(FINISH_ROTATE)`. The multiply leaves the high bits best mixed
/// while hashbrown takes the bucket from the low ones: string keys need the rotation (26, as in
/// rustc-hash 2). Sequential integer ids need none: `id x odd constant` is already a bijection on
/// the low bits, so consecutive ids never share a bucket.
#[derive(Debug, Clone, Copy, Default)]
pub struct FxHasher<const FINISH_ROTATE: u32 = 26> {
    hash: u64,
}

impl<const FINISH_ROTATE: u32> FxHasher<FINISH_ROTATE> {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    /// hash = (hash rotl 5 XOR word) x SEED.
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl<const FINISH_ROTATE: u32> Hasher for FxHasher<FINISH_ROTATE> {
    /// Eight bytes per word, little-endian; the last partial word zero-padded.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash.rotate_left(FINISH_ROTATE)
    }
}

/// A map keyed by cluster name or endpoint address, looked up per request.
pub type FastMap<V> = HashMap<String, V, BuildHasherDefault<FxHasher>>;

/// A map keyed by the weight book's sequential reporter ids.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<FxHasher<0>>>;

/// FNV-1a, 64 bit: hash = (hash XOR byte) x 0x100000001b3 per byte, from 0xcbf29ce484222325. A
/// stable hash for what leaves the process (a shard key in a host name) and for small digests.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash_of<H: Hasher + Default>(key: impl Hash) -> u64 {
        BuildHasherDefault::<H>::default().hash_one(key)
    }

    #[test]
    fn an_id_hashes_to_id_times_the_seed() {
        for id in [0u64, 1, 2, 77, u64::MAX] {
            assert_eq!(hash_of::<FxHasher<0>>(id), id.wrapping_mul(0x51_7c_c1_b7_27_22_0a_95));
        }
    }

    #[test]
    fn consecutive_ids_fill_distinct_low_bit_buckets() {
        let mut buckets: Vec<u64> = (0..1024u64).map(|id| hash_of::<FxHasher<0>>(id) & 1023).collect();
        buckets.sort_unstable();
        buckets.dedup();
        assert_eq!(buckets.len(), 1024);
    }

    #[test]
    fn string_keys_hash_as_padded_words_then_rotate() {
        // "ab" is one zero-padded word; `str` hashing then adds the 0xff terminator.
        let mut h = FxHasher::<0>::default();
        h.add(u64::from_le_bytes(*b"ab\0\0\0\0\0\0"));
        h.add(0xff);
        assert_eq!(hash_of::<FxHasher>("ab"), h.finish().rotate_left(26));
    }

    #[test]
    fn fast_maps_find_what_they_hold() {
        let mut m: FastMap<usize> = FastMap::default();
        for i in 0..500 {
            m.insert(format!("10.0.{}.{}:8080", i / 256, i % 256), i);
        }
        assert!((0..500).all(|i| m.get(&format!("10.0.{}.{}:8080", i / 256, i % 256)) == Some(&i)));
        let mut ids: IdMap<u64> = IdMap::default();
        ids.extend((0..500u64).map(|i| (i * 3, i)));
        assert!((0..500u64).all(|i| ids.get(&(i * 3)) == Some(&i)));
    }
}
