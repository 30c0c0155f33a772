//! A cluster's reply view, rendered at recompute (step 5) into one shared buffer, so that answering
//! a report takes the buffer (a reference count) under the book's lock and writes the reply outside
//! it: a copy plus one number per endpoint (`reply_plan`).

use crate::decision::EndpointDecision;
use tailweight_wire::reply::write;

/// Where one endpoint's JSON is in a [`PublishedCluster`]'s buffer: `start..split` goes before
/// `peer_inflight` (the only per-asker value), `split..end` after; `address` is the address.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    split: u32,
    end: u32,
    address: (u32, u32),
}

/// A cluster's reply view as of its last recompute, shared by every reply until the next one:
/// every endpoint's JSON in `EndpointView`'s field order except `peer_inflight`, back to back.
#[derive(Debug, Clone, Default)]
pub(crate) struct PublishedCluster {
    pub name: String,
    /// The cluster's layout when it was published: while it is the same, the i-th endpoint here is
    /// the i-th of the cluster's list.
    pub layout: u64,
    /// The most reporters any of its endpoints has (see `ClusterView::reporters`).
    pub reporters: Option<u32>,
    bytes: Vec<u8>,
    spans: Vec<Span>,
    inflight: Vec<f64>,
    /// Positions of the endpoints, the ones that count most first (`Standing`, then position):
    /// what a reply that cannot carry the whole view keeps.
    rank: Vec<u32>,
}

/// How much an endpoint's place in a truncated reply is worth, compared field by field in this
/// order: whether it attests (its own sidecar vouches that it serves), how many principals report
/// it (made-up endpoints of one principal have one), whether some reporter's users were answered
/// well there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Standing {
    pub attested: bool,
    pub principals: u32,
    pub served: bool,
}

impl PublishedCluster {
    /// The view of cluster `name` of `layout`: its endpoints with a decision, in the list's order,
    /// each with its standing.
    pub fn of<'a>(
        name: &str,
        layout: u64,
        decided: impl Iterator<Item = (&'a str, &'a EndpointDecision, Standing)>,
    ) -> PublishedCluster {
        let mut p = PublishedCluster { name: name.to_string(), layout, ..PublishedCluster::default() };
        let mut standings = Vec::new();
        for (address, d, standing) in decided {
            standings.push(standing);
            p.reporters = p.reporters.max(Some(reporters_of(d)));
            let start = p.bytes.len() as u32;
            let address = write::endpoint_head(&mut p.bytes, address, d.weight, d.view_inflight);
            let split = p.bytes.len() as u32;
            write::endpoint_tail(&mut p.bytes, d.latency_us, d.cpu, d.ejected, d.served_age_ms);
            let address = (address.start as u32, address.end as u32);
            p.spans.push(Span { start, split, end: p.bytes.len() as u32, address });
            p.inflight.push(d.view_inflight);
        }
        p.rank = (0..standings.len() as u32).collect();
        // Stable: among equals, the list's order.
        p.rank.sort_by(|a, b| standings[*b as usize].cmp(&standings[*a as usize]));
        p
    }

    /// Positions of the endpoints, the ones that count most first.
    pub fn rank(&self) -> &[u32] {
        &self.rank
    }

    pub fn endpoints(&self) -> usize {
        self.spans.len()
    }

    /// The address of the `k`-th endpoint.
    pub fn address(&self, k: usize) -> &str {
        let span = &self.spans[k];
        std::str::from_utf8(&self.bytes[span.address.0 as usize..span.address.1 as usize]).unwrap_or_default()
    }

    /// The view's in-flight count of the `k`-th endpoint.
    pub fn inflight(&self, k: usize) -> f64 {
        self.inflight[k]
    }

    /// Append the `k`-th endpoint's view with `peer_inflight` as given.
    pub fn write_endpoint(&self, k: usize, peer_inflight: f64, out: &mut Vec<u8>) {
        let span = &self.spans[k];
        out.extend_from_slice(&self.bytes[span.start as usize..span.split as usize]);
        write::peer_inflight(out, peer_inflight);
        out.extend_from_slice(&self.bytes[span.split as usize..span.end as usize]);
    }
}

/// An endpoint's reporters as the view gives them.
pub(crate) fn reporters_of(d: &EndpointDecision) -> u32 {
    u32::try_from(d.reporters).unwrap_or(u32::MAX)
}
