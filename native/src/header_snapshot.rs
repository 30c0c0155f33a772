//! A hook's view of a stream's header maps: a map is listed once, at the first lookup in it, with
//! one call for all its headers (`get_headers`), and searched in the module. A lookup through
//! `get_header` costs Envoy ~1,600 instructions a call (it copies the name into a lower-case string
//! and looks it up; callgrind, bench/results/overhead.md, "The native shell per request"); listing
//! a map of ten headers costs less than half of that, and a hook's second lookup in the map costs
//! no call at all.
//!
//! Entries point into Envoy's map: valid until the hook returns or the map changes. A snapshot
//! lives in one hook's `NativeExchange`, and the exchange forgets a map's snapshot whenever it sets
//! or removes one of its headers.

use crate::abi::{self, EnvoyBuffer, HeaderPair};
use std::cell::OnceCell;
use std::ffi::c_void;

/// Header maps by `envoy_dynamic_module_type_http_header_type` (request headers and trailers,
/// response headers and trailers).
const MAPS: usize = 4;

/// Entries a listing holds in place: a request's or a response's map rarely has more, so most
/// hooks list without an allocation.
const INLINE: usize = 16;

/// One map's entries: in place up to `INLINE` (`heap` stays empty, unallocated), else in `heap`.
struct Listing {
    inline: [HeaderPair; INLINE],
    len: usize,
    heap: Vec<HeaderPair>,
}

impl Listing {
    const NONE: Listing = Listing { inline: [HeaderPair::EMPTY; INLINE], len: 0, heap: Vec::new() };

    fn entries(&self) -> &[HeaderPair] {
        if self.heap.is_empty() {
            &self.inline[..self.len.min(INLINE)]
        } else {
            &self.heap
        }
    }
}

#[derive(Default)]
pub struct HeaderSnapshots {
    maps: [OnceCell<Listing>; MAPS],
}

impl HeaderSnapshots {
    /// The first value of header `name` (ASCII case ignored: Envoy's names are lower case, and
    /// `get_header` lower-cases the name asked for) in map `header_type` of stream `filter`.
    ///
    /// # Safety
    /// `filter` is the running hook's stream; the slice is read before the hook returns and before
    /// the map changes (see `forget`).
    pub unsafe fn first<'a>(&'a self, filter: *mut c_void, header_type: u32, name: &str) -> Option<&'a [u8]> {
        let map = self.maps.get(header_type as usize)?.get_or_init(|| list(filter, header_type));
        first_value(map.entries(), name)
    }

    /// Map `header_type` changed: its next lookup lists it again.
    pub fn forget(&mut self, header_type: u32) {
        if let Some(map) = self.maps.get_mut(header_type as usize) {
            map.take();
        }
    }
}

/// Every header of one map. Entries Envoy did not write (it writes as many as it counted) stay
/// empty, and a failed listing reads as no headers.
unsafe fn list(filter: *mut c_void, header_type: u32) -> Listing {
    let count = abi::envoy_dynamic_module_callback_http_get_headers_size(filter, header_type);
    if count == 0 {
        return Listing::NONE;
    }
    let mut listing = Listing::NONE;
    let out = if count <= INLINE {
        listing.len = count;
        listing.inline.as_mut_ptr()
    } else {
        listing.heap = vec![HeaderPair::EMPTY; count];
        listing.heap.as_mut_ptr()
    };
    if abi::envoy_dynamic_module_callback_http_get_headers(filter, header_type, out) {
        listing
    } else {
        Listing::NONE
    }
}

/// The value of the first entry named `name` (ASCII case ignored), as `get_header` at index 0;
/// an entry Envoy did not write (null name) matches nothing.
///
/// # Safety
/// Each entry's pointers point to their lengths' readable bytes for the slice's lifetime.
unsafe fn first_value<'a>(entries: &'a [HeaderPair], name: &str) -> Option<&'a [u8]> {
    entries.iter().filter(|h| !h.key.is_null()).find_map(|h| {
        let key = EnvoyBuffer { ptr: h.key, len: h.key_len }.bytes();
        key.eq_ignore_ascii_case(name.as_bytes()).then(|| EnvoyBuffer { ptr: h.value, len: h.value_len }.bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(key: &'static str, value: &'static str) -> HeaderPair {
        HeaderPair { key: key.as_ptr(), key_len: key.len(), value: value.as_ptr(), value_len: value.len() }
    }

    #[test]
    fn the_first_entry_of_a_name_answers_whatever_its_case() {
        let entries = [pair(":status", "200"), pair("x-b", "one"), pair("x-b", "two"), pair("empty", "")];
        // SAFETY: the entries point to static strings.
        unsafe {
            assert_eq!(first_value(&entries, ":status"), Some(&b"200"[..]));
            assert_eq!(first_value(&entries, "X-B"), Some(&b"one"[..]));
            assert_eq!(first_value(&entries, "empty"), Some(&b""[..]));
            assert_eq!(first_value(&entries, "x-c"), None);
            assert_eq!(first_value(&entries, "x-"), None);
        }
    }

    #[test]
    fn entries_envoy_did_not_write_match_no_name() {
        let entries = [HeaderPair::EMPTY, pair("a", "1")];
        // SAFETY: an empty entry has null pointers and zero lengths; the other a static string.
        unsafe {
            assert_eq!(first_value(&entries, ""), None);
            assert_eq!(first_value(&entries, "a"), Some(&b"1"[..]));
        }
    }

    #[test]
    fn a_listing_in_place_holds_only_the_entries_written() {
        let mut listing = Listing::NONE;
        listing.inline[0] = pair("a", "1");
        listing.inline[1] = pair("b", "2");
        listing.len = 2;
        assert_eq!(listing.entries().len(), 2);
        // SAFETY: the entries point to static strings.
        unsafe { assert_eq!(first_value(listing.entries(), "b"), Some(&b"2"[..])) };
    }

    #[test]
    fn a_map_forgotten_is_listed_again_and_other_maps_are_kept() {
        let mut snapshots = HeaderSnapshots::default();
        let _ = snapshots.maps[0].set(Listing { heap: vec![pair("a", "1")], ..Listing::NONE });
        let _ = snapshots.maps[2].set(Listing { heap: vec![pair("b", "2")], ..Listing::NONE });
        snapshots.forget(0);
        snapshots.forget(7);
        assert!(snapshots.maps[0].get().is_none());
        assert_eq!(snapshots.maps[2].get().map(|m| m.entries().len()), Some(1));
    }
}
