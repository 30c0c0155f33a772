//! The state the workers of one proxy share, as Envoy keeps it for proxy-wasm (`SharedData`): a
//! map from key to bytes, each value with a compare-and-swap token. A shell whose host keeps no
//! such map (the native shell: workers share the process's memory) keeps one of these behind a
//! lock; the test host keeps one per proxy.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct SharedStore {
    entries: HashMap<String, (Vec<u8>, u32)>,
}

impl SharedStore {
    /// The value under `key` and its token (None: absent).
    pub fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.entries.get(key) {
            Some((value, cas)) => (Some(value.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    /// Envoy's rule: a token guards only a key that exists (a write with a token to an absent key
    /// succeeds); every write moves the key's token on (0 is never one). True if written.
    pub fn set(&mut self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        let current = self.entries.get(key).map(|(_, c)| *c);
        if cas.is_some_and(|cas| current.is_some_and(|c| c != cas)) {
            return false;
        }
        let next = current.unwrap_or(0).checked_add(1).unwrap_or(1);
        self.entries.insert(key.to_string(), (value.to_vec(), next));
        true
    }

    /// The raw value under `key`.
    pub fn value(&self, key: &str) -> Option<&[u8]> {
        self.entries.get(key).map(|(v, _)| v.as_slice())
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.entries.keys().cloned().collect();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_guards_an_existing_key_only() {
        let mut s = SharedStore::default();
        assert!(s.set("k", b"a", Some(7)), "absent key: the token is not checked");
        let (value, cas) = s.get("k");
        assert_eq!((value.as_deref(), cas), (Some(&b"a"[..]), Some(1)));
        assert!(!s.set("k", b"b", Some(5)), "stale token refused");
        assert!(s.set("k", b"b", cas));
        assert!(!s.set("k", b"c", cas), "the token moved on with the write");
        assert!(s.set("k", b"c", None), "no token: unconditional");
        assert_eq!(s.get("k").1, Some(3));
        assert_eq!(s.value("k"), Some(&b"c"[..]));
        assert_eq!(s.get("other"), (None, None));
    }

    #[test]
    fn a_token_never_wraps_to_zero() {
        let mut s = SharedStore::default();
        s.entries.insert("k".into(), (vec![], u32::MAX));
        assert!(s.set("k", b"x", Some(u32::MAX)));
        assert_eq!(s.get("k").1, Some(1));
    }
}
