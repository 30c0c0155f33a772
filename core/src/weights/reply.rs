//! The reply to a reporter: each endpoint's view in JSON, mostly prepared at recompute (step 5) so
//! that answering a report is a copy plus one number per endpoint.

use super::book::WeightBook;
use super::record::{EndpointRecord, ReporterRecord};
use crate::wire::{self, ClusterView, EndpointView, Reply};
use serde::Serialize;

/// An endpoint's reply JSON around `peer_inflight` (the only per-asker value), made at recompute:
/// `bytes[..split]` goes before it, the rest after (one buffer: one cache miss per reply).
#[derive(Debug, Clone, Default)]
pub(super) struct PreparedJson {
    bytes: Vec<u8>,
    split: usize,
}

/// Append `value` as JSON (serde_json's own formatting, so replies match `to_vec(&reply)` exactly).
fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing numbers and strings into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Step 5: each endpoint's weight (`weights`, aligned with `endpoints`; a non-finite or negative
/// one is 1, none above `wire::MAX_WEIGHT`) into its record and decision, and its reply JSON made.
pub(super) fn publish(endpoints: &mut [EndpointRecord], weights: &[f64]) {
    for (endpoint, w) in endpoints.iter_mut().zip(weights) {
        let w = if w.is_finite() && *w >= 0.0 { w.min(wire::MAX_WEIGHT) } else { 1.0 };
        endpoint.weight = Some(w);
        if let Some(d) = endpoint.decision.as_mut() {
            d.weight = w;
        }
        endpoint.prepare_json();
    }
}

impl EndpointRecord {
    /// The asking reporter's counted in-flight requests here (0 if it has none or is not live).
    fn own_inflight(&self, asking: Option<&ReporterRecord>, now_us: u64) -> f64 {
        asking.and_then(|r| self.obs.get(&r.id)).filter(|o| o.live(now_us)).map_or(0.0, |o| o.counted_inflight)
    }

    /// `peer_inflight` for the asking reporter: in flight from everyone else.
    fn peer_inflight(&self, inflight: f64, asking: Option<&ReporterRecord>, now_us: u64) -> f64 {
        (inflight - self.own_inflight(asking, now_us)).max(0.0)
    }

    /// Render this endpoint's reply JSON except `peer_inflight`, in `EndpointView`'s field order.
    fn prepare_json(&mut self) {
        let Some(d) = &self.decision else { return };
        let json = &mut self.json.bytes;
        json.clear();
        json.extend_from_slice(b"{\"address\":");
        write_json(json, &self.address);
        json.extend_from_slice(b",\"weight\":");
        write_json(json, &d.weight);
        json.extend_from_slice(b",\"inflight\":");
        write_json(json, &d.inflight);
        json.extend_from_slice(b",\"peer_inflight\":");
        self.json.split = json.len();
        json.extend_from_slice(b",\"latency_us\":");
        write_json(json, &d.latency_us);
        if let Some(cpu) = d.cpu {
            json.extend_from_slice(b",\"cpu\":");
            write_json(json, &cpu);
        }
        json.extend_from_slice(b",\"ejected\":");
        write_json(json, &d.ejected);
        json.push(b'}');
    }
}

impl WeightBook {
    /// The view of `clusters` as seen by `reporter`, i.e. its incarnation that reported last (call
    /// right after `ingest`; peer_inflight excludes that incarnation's own in-flight); unknown
    /// clusters are omitted, and so are endpoints not yet recomputed.
    pub fn reply<'a>(&self, reporter: &str, clusters: impl IntoIterator<Item = &'a str>, now_us: u64) -> Reply {
        let asking = self.reporter(reporter, None);
        let mut views = Vec::new();
        for name in clusters {
            let Some(cluster) = self.clusters.get(name) else { continue };
            let endpoints = cluster
                .endpoints
                .iter()
                .filter_map(|e| {
                    let d = e.decision.as_ref()?;
                    Some(EndpointView {
                        address: e.address.clone(),
                        weight: d.weight,
                        inflight: d.inflight,
                        peer_inflight: e.peer_inflight(d.inflight, asking, now_us),
                        latency_us: d.latency_us,
                        cpu: d.cpu,
                        ejected: d.ejected,
                    })
                })
                .collect();
            views.push(ClusterView { name: name.to_string(), endpoints });
        }
        Reply { version: wire::VERSION, ttl_ms: self.view_ttl_ms(asking), clusters: views }
    }

    /// `serde_json::to_vec(&self.reply(..))`, byte for byte, without building the reply: each
    /// endpoint's JSON was prepared at recompute except `peer_inflight`. The service's hot path.
    pub fn reply_json<'a>(
        &self,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
        out: &mut Vec<u8>,
    ) {
        let asking = self.reporter(reporter, None);
        out.extend_from_slice(b"{\"version\":");
        write_json(out, &wire::VERSION);
        out.extend_from_slice(b",\"ttl_ms\":");
        write_json(out, &self.view_ttl_ms(asking));
        out.extend_from_slice(b",\"clusters\":[");
        let mut first_cluster = true;
        for name in clusters {
            let Some(cluster) = self.clusters.get(name) else { continue };
            if !std::mem::take(&mut first_cluster) {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            write_json(out, &name);
            out.extend_from_slice(b",\"endpoints\":[");
            let mut first = true;
            for e in cluster.endpoints.iter() {
                let Some(d) = e.decision.as_ref() else { continue };
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                let (head, tail) = e.json.bytes.split_at(e.json.split);
                out.extend_from_slice(head);
                write_json(out, &e.peer_inflight(d.inflight, asking, now_us));
                out.extend_from_slice(tail);
            }
            out.extend_from_slice(b"]}");
        }
        out.extend_from_slice(b"]}");
    }

    /// The reply's ttl: `view_ttl_intervals` of the asking reporter's intervals (1 s if unknown),
    /// at least `min_view_ttl_us`.
    fn view_ttl_ms(&self, asking: Option<&ReporterRecord>) -> u32 {
        let p = &self.params;
        let interval_us = asking.map_or(1_000_000, |r| r.interval_us);
        let ttl_us = ((interval_us as f64 * p.view_ttl_intervals) as u64).max(p.min_view_ttl_us);
        (ttl_us / 1_000).min(u64::from(u32::MAX)) as u32
    }
}
