//! The records the filter's VMs exchange through Envoy's shared data: one worker's snapshot (its
//! cluster reports, see `snapshot`) and the aggregator's view of one cluster as received, in a
//! compact binary form. Only VMs of one Envoy read them, all running the same module, so the format
//! needs no negotiation: a leading version byte, then little-endian varints, length-prefixed UTF-8
//! strings and 8-byte floats. Hand-written rather than serde + a binary format crate: every
//! serde-derived type adds its own (de)serializer to the module, whose size every sidecar pays at
//! start-up (V8 compiles the whole module before the listener is ready), and the snapshots are
//! written and read every tick. Decoding never panics and never trusts a length it cannot read.

use tailweight_wire::reply::{ClusterView, EndpointView};
use tailweight_wire::report::{ClusterReport, EndpointReport};

const VERSION: u8 = 3;

/// One VM's published snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Slot {
    pub written_us: u64,
    pub clusters: Vec<ClusterReport>,
}

/// The aggregator's view of one cluster, as of when the report it answers was sent (a late answer
/// counts from then: its ttl runs from there, and it never replaces a view of a later report), and
/// for how long it may be used.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredView {
    pub as_of_us: u64,
    pub ttl_ms: u32,
    pub view: ClusterView,
}

/// Why a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotError {
    /// Written by another version of the filter (a rolling module update).
    Version(u8),
    /// Cut short, or a length beyond what is left.
    Truncated,
    /// A varint longer than 10 bytes, a string that is not UTF-8, or a flag not 0/1.
    Malformed,
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotError::Version(v) => write!(f, "shared-data record of version {v}, this filter reads {VERSION}"),
            SlotError::Truncated => f.write_str("shared-data record cut short"),
            SlotError::Malformed => f.write_str("shared-data record malformed"),
        }
    }
}

impl std::error::Error for SlotError {}

impl Slot {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_version(64 + self.clusters.iter().map(|c| 32 + c.endpoints.len() * 48).sum::<usize>());
        w.varint(self.written_us);
        w.varint(self.clusters.len() as u64);
        for c in &self.clusters {
            w.str(&c.name);
            w.varint(c.endpoints.len() as u64);
            for e in &c.endpoints {
                w.str(&e.address);
                for n in
                    [e.requests, e.errors, e.latency_sum_us, u64::from(e.inflight), e.latency_ewma_us, e.latency_age_ms]
                {
                    w.varint(n);
                }
                w.option_f64(e.cpu);
                w.option_varint(e.cpu_age_ms);
                w.option_varint(e.seen_age_ms);
                w.option_varint(e.counted_ms);
            }
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<Slot, SlotError> {
        let mut r = Reader::after_version(bytes)?;
        let written_us = r.varint();
        let clusters = r.list(|r| ClusterReport {
            name: r.str(),
            endpoints: r.list(|r| EndpointReport {
                address: r.str(),
                requests: r.varint(),
                errors: r.varint(),
                latency_sum_us: r.varint(),
                inflight: r.u32(),
                latency_ewma_us: r.varint(),
                latency_age_ms: r.varint(),
                cpu: r.option_f64(),
                cpu_age_ms: r.option_varint(),
                seen_age_ms: r.option_varint(),
                counted_ms: r.option_varint(),
            }),
        });
        r.end()?;
        Ok(Slot { written_us, clusters })
    }
}

impl StoredView {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_version(64 + self.view.endpoints.len() * 48);
        w.varint(self.as_of_us);
        w.varint(u64::from(self.ttl_ms));
        w.str(&self.view.name);
        w.option_varint(self.view.reporters.map(u64::from));
        w.varint(self.view.endpoints.len() as u64);
        for e in &self.view.endpoints {
            w.str(&e.address);
            w.f64(e.weight);
            w.f64(e.inflight);
            w.f64(e.peer_inflight);
            w.varint(e.latency_us);
            w.option_f64(e.cpu);
            w.0.push(u8::from(e.ejected));
            w.option_varint(e.served_age_ms);
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<StoredView, SlotError> {
        let mut r = Reader::after_version(bytes)?;
        let as_of_us = r.varint();
        let ttl_ms = r.u32();
        let name = r.str();
        let reporters = r.option_varint().map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        let endpoints = r.list(|r| EndpointView {
            address: r.str(),
            weight: r.f64(),
            inflight: r.f64(),
            peer_inflight: r.f64(),
            latency_us: r.varint(),
            cpu: r.option_f64(),
            ejected: r.flag(),
            served_age_ms: r.option_varint(),
        });
        r.end()?;
        Ok(StoredView { as_of_us, ttl_ms, view: ClusterView { name, reporters, endpoints } })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn with_version(capacity: usize) -> Writer {
        let mut buf = Vec::with_capacity(capacity);
        buf.push(VERSION);
        Writer(buf)
    }

    /// Base-128, low groups first.
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn f64(&mut self, x: f64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }

    fn option_f64(&mut self, x: Option<f64>) {
        match x {
            Some(x) => {
                self.0.push(1);
                self.f64(x);
            }
            None => self.0.push(0),
        }
    }

    fn option_varint(&mut self, n: Option<u64>) {
        match n {
            Some(n) => {
                self.0.push(1);
                self.varint(n);
            }
            None => self.0.push(0),
        }
    }
}

/// Reads a record. The first failure stops the reading: every read after it gives 0 (false, an
/// empty string or list) without touching the bytes, and `end` reports it. The decoders then read
/// a record field by field without an early return after each one (a branch, and drops of what was
/// read before: ~1.2 KB of the filter's module).
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    failed: Option<SlotError>,
}

impl<'a> Reader<'a> {
    fn after_version(bytes: &'a [u8]) -> Result<Reader<'a>, SlotError> {
        match bytes.first() {
            Some(&VERSION) => Ok(Reader { bytes, at: 1, failed: None }),
            Some(&other) => Err(SlotError::Version(other)),
            None => Err(SlotError::Truncated),
        }
    }

    fn fail(&mut self, error: SlotError) {
        self.failed.get_or_insert(error);
    }

    /// The next `n` bytes; none after a failure.
    fn take(&mut self, n: usize) -> &'a [u8] {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len() && self.failed.is_none());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                out
            }
            None => {
                self.fail(SlotError::Truncated);
                &[]
            }
        }
    }

    fn byte(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn varint(&mut self) -> u64 {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte();
            n |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return n;
            }
        }
        self.fail(SlotError::Malformed);
        0
    }

    fn u32(&mut self) -> u32 {
        let n = self.varint();
        u32::try_from(n).unwrap_or_else(|_| {
            self.fail(SlotError::Malformed);
            0
        })
    }

    /// A length: beyond what `usize` holds, it is beyond the record.
    fn len(&mut self) -> usize {
        let n = self.varint();
        usize::try_from(n).unwrap_or_else(|_| {
            self.fail(SlotError::Truncated);
            0
        })
    }

    fn str(&mut self) -> String {
        let len = self.len();
        let bytes = self.take(len);
        String::from_utf8(bytes.to_vec()).unwrap_or_else(|_| {
            self.fail(SlotError::Malformed);
            String::new()
        })
    }

    fn f64(&mut self) -> f64 {
        self.take(8).try_into().map_or(0.0, f64::from_le_bytes)
    }

    fn flag(&mut self) -> bool {
        match self.byte() {
            0 => false,
            1 => true,
            _ => {
                self.fail(SlotError::Malformed);
                false
            }
        }
    }

    fn option_f64(&mut self) -> Option<f64> {
        if self.flag() {
            Some(self.f64())
        } else {
            None
        }
    }

    fn option_varint(&mut self) -> Option<u64> {
        if self.flag() {
            Some(self.varint())
        } else {
            None
        }
    }

    /// A count, then that many items. The count is checked against what is left (each item takes
    /// at least one byte), so a forged count cannot reserve memory the record does not hold.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> T) -> Vec<T> {
        let count = self.len();
        if count > self.bytes.len() - self.at {
            self.fail(SlotError::Truncated);
            return Vec::new();
        }
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(item(self));
            if self.failed.is_some() {
                break;
            }
        }
        out
    }

    /// The first failure, else whether the whole record was read.
    fn end(&self) -> Result<(), SlotError> {
        match self.failed {
            Some(error) => Err(error),
            None if self.at == self.bytes.len() => Ok(()),
            None => Err(SlotError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailweight_wire::protocol;
    use tailweight_wire::report::write::write_report;
    use tailweight_wire::report::Report;

    fn slot() -> Slot {
        Slot {
            written_us: 1_732_350_000_123_456,
            clusters: vec![
                ClusterReport {
                    name: "outbound|8080||svc.ns.svc.cluster.local".into(),
                    endpoints: vec![
                        EndpointReport {
                            address: "10.0.0.1:8080".into(),
                            requests: 15_230,
                            errors: 12,
                            latency_sum_us: 182_145_000,
                            inflight: 3,
                            latency_ewma_us: 11_800,
                            latency_age_ms: 40,
                            cpu: Some(0.62),
                            cpu_age_ms: Some(900),
                            seen_age_ms: Some(35),
                            counted_ms: Some(86_400_000),
                        },
                        EndpointReport { address: "[2001:db8::1]:443".into(), ..Default::default() },
                    ],
                },
                ClusterReport { name: "empty".into(), endpoints: vec![] },
            ],
        }
    }

    fn view() -> StoredView {
        StoredView { as_of_us: 99, ttl_ms: 3_000, view: tailweight_wire::reply::samples::cluster_view("c") }
    }

    #[test]
    fn records_round_trip() {
        assert_eq!(Slot::decode(&slot().encode()), Ok(slot()));
        assert_eq!(StoredView::decode(&view().encode()), Ok(view()));
        assert_eq!(Slot::decode(&Slot::default().encode()), Ok(Slot::default()));
    }

    #[test]
    fn a_slot_is_several_times_smaller_than_its_json() {
        let binary = slot().encode().len();
        let clusters = slot().clusters;
        let report =
            Report { version: protocol::VERSION, reporter: "r".into(), incarnation: 1, interval_ms: 1_000, clusters };
        let json = write_report(&report).len();
        assert!(binary * 3 < json, "{binary} vs {json}");
    }

    #[test]
    fn every_prefix_and_every_corruption_is_an_error_not_a_panic() {
        let (slot_bytes, view_bytes) = (slot().encode(), view().encode());
        for cut in 0..slot_bytes.len() {
            assert!(Slot::decode(&slot_bytes[..cut]).is_err(), "{cut}");
        }
        for cut in 0..view_bytes.len() {
            assert!(StoredView::decode(&view_bytes[..cut]).is_err(), "{cut}");
        }
        for bytes in [slot_bytes, view_bytes] {
            for i in 0..bytes.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[i] ^= flip;
                    let _ = Slot::decode(&b);
                    let _ = StoredView::decode(&b);
                }
            }
        }
        assert_eq!(Slot::decode(&[1]), Err(SlotError::Version(1)));
        assert_eq!(Slot::decode(&[]), Err(SlotError::Truncated));
        let mut trailing = slot().encode();
        trailing.push(0);
        assert_eq!(Slot::decode(&trailing), Err(SlotError::Malformed));
        // A forged count far beyond the bytes left is refused before anything is reserved.
        let forged = [VERSION, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(Slot::decode(&forged), Err(SlotError::Truncated));
        assert_eq!(SlotError::Version(1).to_string(), "shared-data record of version 1, this filter reads 3");
    }
}
