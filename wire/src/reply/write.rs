//! The aggregator's reply writer, in the pieces the aggregator assembles a reply from: it renders
//! each cluster's endpoints once per recompute and each reply from them, with only `peer_inflight`
//! (the asker's peers' share) written per reply (see `tailweight_weights`' `ReplyPlan`).
//! `write_reply` puts the same pieces together for a whole `Reply`. Numbers and strings are written
//! by serde_json (its shortest round-trip floats), so this is behind the `serde` feature, which only
//! the aggregator's side builds. The filter reads replies with `reply::read`; a round-trip test
//! holds the two to each other.

use super::Reply;
use crate::protocol::VERSION;
use serde::Serialize;
use std::ops::Range;

/// Append `value` as JSON.
fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing numbers and strings into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A reply's start, up to its first cluster: `{"version":1,"ttl_ms":<ttl>,"clusters":[`.
pub fn begin_reply(out: &mut Vec<u8>, ttl_ms: u32) {
    out.extend_from_slice(b"{\"version\":");
    json(out, &VERSION);
    out.extend_from_slice(b",\"ttl_ms\":");
    json(out, &ttl_ms);
    out.extend_from_slice(b",\"clusters\":[");
}

/// A cluster's start, up to its first endpoint:
/// `{"name":<name>[,"reporters":..][,"omitted":..],"endpoints":[`. `omitted` (written when not 0)
/// counts the view's endpoints the reply leaves out to stay within its cap; a reader that does not
/// know the field ignores it (an addition within v1).
pub fn begin_cluster(out: &mut Vec<u8>, name: &str, reporters: Option<u32>, omitted: u32) {
    out.extend_from_slice(b"{\"name\":");
    json(out, name);
    if let Some(reporters) = reporters {
        out.extend_from_slice(b",\"reporters\":");
        json(out, &reporters);
    }
    if omitted > 0 {
        out.extend_from_slice(b",\"omitted\":");
        json(out, &omitted);
    }
    out.extend_from_slice(b",\"endpoints\":[");
}

/// The end of a cluster (after its endpoints) or of the reply (after its clusters).
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"]}");
}

/// An endpoint's view up to its `peer_inflight` value: `{"address":..,"weight":..,"inflight":..,
/// "peer_inflight":`. Returns where the address's text is in `out` (inside the quotes).
pub fn endpoint_head(out: &mut Vec<u8>, address: &str, weight: f64, inflight: f64) -> Range<usize> {
    out.extend_from_slice(b"{\"address\":");
    let start = out.len() + 1;
    json(out, address);
    let address_at = start..out.len() - 1;
    out.extend_from_slice(b",\"weight\":");
    json(out, &weight);
    out.extend_from_slice(b",\"inflight\":");
    json(out, &inflight);
    out.extend_from_slice(b",\"peer_inflight\":");
    address_at
}

/// The value of `peer_inflight`, between an endpoint's head and tail.
pub fn peer_inflight(out: &mut Vec<u8>, value: f64) {
    json(out, &value);
}

/// The rest of an endpoint's view, after `peer_inflight`:
/// `,"latency_us":..[,"cpu":..],"ejected":..[,"served_age_ms":..]}`.
pub fn endpoint_tail(out: &mut Vec<u8>, latency_us: u64, cpu: Option<f64>, ejected: bool, served_age_ms: Option<u64>) {
    out.extend_from_slice(b",\"latency_us\":");
    json(out, &latency_us);
    if let Some(cpu) = cpu {
        out.extend_from_slice(b",\"cpu\":");
        json(out, &cpu);
    }
    out.extend_from_slice(b",\"ejected\":");
    json(out, &ejected);
    if let Some(age) = served_age_ms {
        out.extend_from_slice(b",\"served_age_ms\":");
        json(out, &age);
    }
    out.push(b'}');
}

/// A whole reply, from the same pieces the aggregator's rendering uses.
pub fn write_reply(reply: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    begin_reply(&mut out, reply.ttl_ms);
    for (ci, cluster) in reply.clusters.iter().enumerate() {
        if ci > 0 {
            out.push(b',');
        }
        begin_cluster(&mut out, &cluster.name, cluster.reporters, 0);
        for (ei, e) in cluster.endpoints.iter().enumerate() {
            if ei > 0 {
                out.push(b',');
            }
            endpoint_head(&mut out, &e.address, e.weight, e.inflight);
            peer_inflight(&mut out, e.peer_inflight);
            endpoint_tail(&mut out, e.latency_us, e.cpu, e.ejected, e.served_age_ms);
        }
        end(&mut out);
    }
    end(&mut out);
    out
}
