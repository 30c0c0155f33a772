//! What destinations attested: per cluster, per endpoint, per source principal, the requests and
//! errors the endpoint served (cumulative per incarnation of the attesting filter, differenced into
//! windows like reports: `observation.rs`). `callers.rs` bounds what each principal's reports count
//! for by it. Who may attest for a cluster is the aggregator's rule (it knows the mesh); the book
//! takes what it is given.

use crate::memory::{ATTESTED_ENDPOINT, ATTESTED_SOURCE};
use crate::observation::Observation;
use crate::params::WeightParams;
use crate::rejection::Rejection;
use std::collections::HashMap;
use tailweight_wire::attest::{Attestation, SourceCount};
use tailweight_wire::report::EndpointReport;

/// What the endpoints of one cluster attested, by endpoint address.
#[derive(Debug, Default)]
pub(crate) struct ClusterEvidence {
    pub endpoints: HashMap<String, EndpointEvidence>,
}

/// Attesting incarnations one endpoint may have at once (one per worker VM of its sidecar, and a
/// restart's old one until it expires).
pub(crate) const MAX_ATTESTERS: usize = 64;

/// What one endpoint attested, by source principal name: one record per attesting incarnation
/// (the VMs of a sidecar each count their own requests and attest apart), summed when read.
#[derive(Debug)]
pub(crate) struct EndpointEvidence {
    pub expires_us: u64,
    pub sources: HashMap<String, Vec<SourceRecord>>,
    /// What it costs the book (`memory.rs`).
    pub bytes: usize,
}

/// One source principal's requests and errors at one endpoint as one attesting incarnation counts
/// them, and until when it counts as a proven caller of the cluster (the end of the last window in
/// which it sent requests there, plus `proven_caller_us`).
#[derive(Debug)]
pub(crate) struct SourceRecord {
    pub served: Observation,
    pub proven_until_us: u64,
}

impl EndpointEvidence {
    /// Whether its last attestation is within its ttl.
    pub fn live(&self, now_us: u64) -> bool {
        self.expires_us > now_us
    }

    /// Whether it attests at `now_us`: live, and with at least one completed window (before that,
    /// its rates are unknown and the endpoint counts as silent).
    pub fn attests(&self, now_us: u64) -> bool {
        self.live(now_us) && self.sources.values().flatten().any(|s| s.served.window_until_us > now_us)
    }
}

/// A source's request rate over its attesters' last windows (summed), and whether it is a proven
/// caller at `now_us`.
pub(crate) fn served(records: &[SourceRecord], now_us: u64) -> (f64, bool) {
    let qps = records.iter().map(|r| r.served.rates(now_us).0).sum();
    (qps, records.iter().any(|r| r.proven_until_us > now_us))
}

/// Enter attestation `a` into `evidence` (by cluster), `now_us`. Refused whole, changing nothing,
/// if it would pass `max_clusters` attested clusters, `max_endpoints_per_cluster` attested
/// endpoints of its cluster, `MAX_ATTESTERS` incarnations of a source, or the book's `max_bytes`
/// with the records it adds (`bytes` is the book's count, updated; records it renews are already
/// counted). A record of a source that is not renewed stays for its
/// ttl, or while it makes its source a proven caller, then goes.
pub(crate) fn enter(
    evidence: &mut HashMap<String, ClusterEvidence>,
    a: &Attestation,
    p: &WeightParams,
    bytes: &mut usize,
    now_us: u64,
) -> Result<(), Rejection> {
    let cluster_known = evidence.get(&a.cluster);
    if cluster_known.is_none() && evidence.len() >= p.max_clusters {
        return Err(Rejection::TooManyClusters);
    }
    let old = cluster_known.and_then(|c| c.endpoints.get(&a.endpoint));
    if old.is_none() && cluster_known.map_or(0, |c| c.endpoints.len()) >= p.max_endpoints_per_cluster {
        return Err(Rejection::TooManyEndpoints);
    }
    let new_attester = |list: &Vec<SourceRecord>| {
        list.len() >= MAX_ATTESTERS && !list.iter().any(|r| r.served.incarnation == a.incarnation)
    };
    if old.is_some_and(|e| a.sources.iter().any(|s| e.sources.get(&s.principal).is_some_and(new_attester))) {
        return Err(Rejection::TooManyReporters);
    }
    let old_bytes = old.map_or(0, |e| e.bytes);
    // At most what the endpoint held (or a new endpoint's record) plus the records this
    // attestation adds (an upper bound, before pruning): renewing the records it already holds
    // needs no headroom, so a full book still takes its attesters' renewals.
    let held = |s: &&SourceCount| {
        old.and_then(|e| e.sources.get(&s.principal))
            .is_some_and(|list| list.iter().any(|r| r.served.incarnation == a.incarnation))
    };
    let added: usize = a.sources.iter().filter(|s| !held(s)).map(|s| ATTESTED_SOURCE.of(s.principal.len())).sum();
    let most = old.map_or(ATTESTED_ENDPOINT.of(a.endpoint.len() + a.cluster.len()), |e| e.bytes) + added;
    if (*bytes).saturating_sub(old_bytes).saturating_add(most) > p.max_bytes {
        return Err(Rejection::MemoryBudget);
    }
    let interval_us = p.interval_us(a.interval_ms);
    let expires_us = now_us.saturating_add(p.reporter_ttl_us(interval_us));
    let cluster = evidence.entry(a.cluster.clone()).or_default();
    let endpoint = cluster.endpoints.entry(a.endpoint.clone()).or_insert_with(|| EndpointEvidence {
        expires_us,
        sources: HashMap::new(),
        bytes: 0,
    });
    endpoint.expires_us = endpoint.expires_us.max(expires_us);
    for s in &a.sources {
        let counts = EndpointReport { requests: s.requests, errors: s.errors, ..EndpointReport::default() };
        let list = match endpoint.sources.get_mut(&s.principal) {
            Some(list) => list,
            None => endpoint.sources.entry(s.principal.clone()).or_default(),
        };
        let record = match list.iter().position(|r| r.served.incarnation == a.incarnation) {
            Some(at) => {
                list[at].served.update(&counts, a.incarnation, interval_us, expires_us, now_us);
                &mut list[at]
            }
            None => {
                let served = Observation::first(&counts, a.incarnation, 0, expires_us, now_us);
                list.push(SourceRecord { served, proven_until_us: 0 });
                list.last_mut().expect("just pushed")
            }
        };
        if record.served.window_until_us > now_us && record.served.qps > 0.0 {
            record.proven_until_us = now_us.saturating_add(p.proven_caller_us);
        }
    }
    let mut now_bytes = ATTESTED_ENDPOINT.of(a.endpoint.len() + a.cluster.len());
    endpoint.sources.retain(|name, list| {
        list.retain(|r| r.served.live(now_us) || r.proven_until_us > now_us);
        now_bytes += ATTESTED_SOURCE.of(name.len()) * list.len();
        !list.is_empty()
    });
    endpoint.bytes = now_bytes;
    *bytes = bytes.saturating_sub(old_bytes) + now_bytes;
    Ok(())
}

/// Drop the endpoints' attestations past their ttl, and clusters left without any; give their
/// bytes back.
pub(crate) fn expire(evidence: &mut HashMap<String, ClusterEvidence>, bytes: &mut usize, now_us: u64) {
    evidence.retain(|_, cluster| {
        cluster.endpoints.retain(|_, e| {
            let keep = e.expires_us > now_us;
            if !keep {
                *bytes = bytes.saturating_sub(e.bytes);
            }
            keep
        });
        !cluster.endpoints.is_empty()
    });
}
