//! The layout of the shared data between the VMs of one Envoy (see `shared`): the keys, all under
//! `tailweight.`, and how their values are packed. Host-free.
//!
//! - `vm_seq`: how many VMs took a slot number (CAS counter);
//! - `beat.<n>`: the heartbeat of the VM holding slot n, written every tick: the version of its slot,
//!   when it ticked and who holds it (24 bytes; a VM reads the others' beats every tick and their
//!   slots only when the version moved). A new VM takes over the slot of a gone VM (see
//!   `Beat::gone`) with a CAS on its beat before it takes a new number, so the slots (and the keys
//!   and the per-tick work that grow with them) are bounded by the VMs alive at once within a ttl,
//!   not by the configurations Envoy ever loaded;
//! - `slot.<n>`: VM n's snapshot (cumulative counters, in flight, latency), rewritten only when its
//!   own observations changed (`tailweight_picker::slot`, binary);
//! - `report_epoch`: the start (ms) of the last report period someone claimed (CAS), so one
//!   report goes out per period;
//! - `reported`: the last report: a digest of the slot versions it was made of, so no VM reports
//!   the same state twice (an idle Envoy goes quiet), the requests it counted and when it went out,
//!   the rate its period follows (24 bytes);
//! - `server_rif.<n>`: a server-role VM n's requests in flight and when it published them
//!   (`tailweight_picker::server_inflight::PublishedCount`, 12 bytes), written at its tick when
//!   they changed;
//! - `incarnation`: random id of this Envoy's counters (reports carry it; a restart changes it);
//! - `view.<cluster>`: the aggregator's last view of a cluster, when it arrived and for how long it
//!   holds (`tailweight_picker::slot`, binary); `views`: bumped after views are stored, so the
//!   others read them only then.

/// Every key starts with this.
const PREFIX: &str = "tailweight.";

/// The key of a named entry (`vm_seq`, `report_epoch`...).
pub fn key(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The key of VM `n`'s entry of a kind (`beat.3`), formatted once (not a name, then its key).
pub fn numbered_key(kind: &str, n: u64) -> String {
    format!("{PREFIX}{kind}.{n}")
}

pub fn view_key(cluster: &str) -> String {
    format!("{PREFIX}view.{cluster}")
}

/// A decimal counter's value (0: absent, or not a number).
pub fn parse_counter(bytes: Option<&[u8]>) -> u64 {
    bytes.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0)
}

/// `words` as consecutive little-endian u64s (`as_flattened` gives the bytes).
pub fn pack_words<const N: usize>(words: [u64; N]) -> [[u8; 8]; N] {
    words.map(u64::to_le_bytes)
}

/// The first `N` little-endian u64s of `bytes`; None when it is shorter.
pub fn unpack_words<const N: usize>(bytes: &[u8]) -> Option<[u64; N]> {
    let mut words = [0u64; N];
    for (i, word) in words.iter_mut().enumerate() {
        *word = u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?);
    }
    Some(words)
}

/// A VM's heartbeat: the version of its slot, when it last ticked, and the VM holding the slot (a
/// random id each VM draws: a VM silent long enough to be taken for gone finds out whether its slot
/// was taken over before it writes there again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub version: u64,
    pub at_us: u64,
    pub holder: u64,
}

impl Beat {
    pub fn words(self) -> [u64; 3] {
        [self.version, self.at_us, self.holder]
    }

    pub fn of_words([version, at_us, holder]: [u64; 3]) -> Beat {
        Beat { version, at_us, holder }
    }

    /// The VM is gone when this, its last beat, is older than the endpoint ttl and than `live_ms` (a
    /// quiet worker beats at its slowest tick; the main thread's VM marks itself gone with a beat at
    /// 0): a VM of an earlier configuration, destroyed. What it saw of endpoints is older than the
    /// ttl, so its snapshot leaves this Envoy's reports (its cumulative counters with it: the
    /// aggregator takes the drop as a counter reset, one window), and its slot is read rarely, so
    /// per-tick work does not grow with reconfigurations. A VM that beats again is read again.
    pub fn gone(self, now_us: u64, ttl_ms: u64, live_ms: u64) -> bool {
        now_us.saturating_sub(self.at_us) > ttl_ms.max(live_ms).saturating_mul(1_000)
    }
}

/// What the last report was made of: the digest of its slot versions (0: none yet), the requests
/// it counted (all endpoints, cumulative) and when it went out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastReport {
    pub digest: u64,
    pub requests: u64,
    pub at_ms: u64,
}

impl LastReport {
    pub fn words(self) -> [u64; 3] {
        [self.digest, self.requests, self.at_ms]
    }

    pub fn of_words([digest, requests, at_ms]: [u64; 3]) -> LastReport {
        LastReport { digest, requests, at_ms }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_vm_is_gone_once_silent_for_longer_than_the_ttl_and_the_live_window() {
        let (s, beat) = (1_000_000, |at_us| Beat { version: 1, at_us, holder: 9 });
        assert!(!beat(100 * s).gone(104 * s, 4_000, 3_000), "within the ttl");
        assert!(beat(100 * s).gone(104 * s + 1, 4_000, 3_000));
        assert!(!beat(100 * s).gone(104 * s + 1, 1_000, 6_000), "a quiet worker beating slowly is not gone");
        assert!(beat(0).gone(61 * s, 60_000, 3_000), "the main thread's VM marks itself gone with a beat at 0");
        assert!(!beat(105 * s).gone(104 * s, 1_000, 1_000), "a beat from the future (clock skew between VMs)");
    }

    use super::*;

    #[test]
    fn keys_are_named_under_the_prefix() {
        assert_eq!(key("vm_seq"), "tailweight.vm_seq");
        assert_eq!(numbered_key("beat", 3), "tailweight.beat.3");
        assert_eq!(numbered_key("server_rif", u64::MAX), "tailweight.server_rif.18446744073709551615");
        assert_eq!(view_key("outbound|80||a.b"), "tailweight.view.outbound|80||a.b");
    }

    #[test]
    fn counters_are_decimal_and_anything_else_is_zero() {
        assert_eq!(parse_counter(Some(b"42")), 42);
        assert_eq!(parse_counter(Some(u64::MAX.to_string().as_bytes())), u64::MAX);
        for bad in [&b""[..], b"-1", b"4 2", b"\xff", b"18446744073709551616"] {
            assert_eq!(parse_counter(Some(bad)), 0, "{bad:?}");
        }
        assert_eq!(parse_counter(None), 0);
    }

    #[test]
    fn words_are_little_endian_and_a_short_value_is_none() {
        let packed = pack_words([1, u64::MAX - 1]);
        assert_eq!(packed.as_flattened(), [1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(unpack_words::<2>(packed.as_flattened()), Some([1, u64::MAX - 1]));
        assert_eq!(unpack_words::<1>(packed.as_flattened()), Some([1]), "longer values keep their first words");
        assert_eq!(unpack_words::<2>(&packed.as_flattened()[..15]), None);
        let beat = Beat { version: 7, at_us: 1_700_000_000_000_000, holder: u64::MAX };
        assert_eq!(Beat::of_words(beat.words()), beat);
        let last = LastReport { digest: 3, requests: 99, at_ms: 5 };
        assert_eq!(LastReport::of_words(unpack_words(pack_words(last.words()).as_flattened()).unwrap()), last);
    }
}
