//! What destinations attested: per cluster, per endpoint, per source principal, the requests and
//! errors the endpoint served (cumulative per incarnation of the attesting filter, differenced into
//! windows like reports: `observation.rs`). `callers.rs` bounds what each principal's reports count
//! for by it. Who may attest for a cluster is the aggregator's rule (it knows the mesh); the book
//! takes what it is given.

use crate::fair_room::FairRoom;
use crate::memory::{ATTESTED_ENDPOINT, ATTESTED_SOURCE, PRINCIPAL};
use crate::observation::Observation;
use crate::params::WeightParams;
use crate::record::PrincipalRecord;
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
    /// What it costs the book (`memory.rs`), charged to the principal that attested it last.
    pub bytes: usize,
    pub charged_to: u32,
}

/// Who sends an attestation, as far as its quota goes: its principal's id (None: new to the
/// book, which then costs `newcomer` bytes more) and the bytes it holds, against `quota`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attester {
    pub principal: Option<u32>,
    pub held: usize,
    pub newcomer: usize,
    pub quota: usize,
}

impl Attester {
    /// Principal `name` (`principal`: its id and `record`, if the book holds it) under `p`'s quota
    /// of the book's bytes.
    pub fn of(principal: Option<u32>, record: Option<&PrincipalRecord>, name: &str, p: &WeightParams) -> Attester {
        Attester {
            principal,
            held: record.map_or(0, |r| r.bytes),
            newcomer: if principal.is_none() { PRINCIPAL.of(name.len()) } else { 0 },
            quota: p.quota(p.max_bytes),
        }
    }
}

/// What entering an attestation moved between principals: `released` bytes taken off the
/// principal that held the endpoint's record before (possibly the same), `charged` bytes put on
/// the attester.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Charged {
    pub released: Option<(u32, usize)>,
    pub charged: usize,
    /// When the endpoint's record expires unless renewed.
    pub expires_us: u64,
}

impl Charged {
    /// Move the bytes in `principals`' records: off the one released, onto `attester`.
    pub fn settle(self, principals: &mut HashMap<u32, PrincipalRecord>, attester: u32) {
        if let Some(r) = self.released.and_then(|(before, _)| principals.get_mut(&before)) {
            r.bytes = r.bytes.saturating_sub(self.released.map_or(0, |(_, bytes)| bytes));
        }
        if let Some(r) = principals.get_mut(&attester) {
            r.bytes += self.charged;
        }
    }
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

/// Whether attestation `a` from `attester` may be entered into `evidence` (the book holding
/// `bytes`): refused if it would pass `max_clusters` attested clusters, `max_endpoints_per_cluster`
/// attested endpoints of its cluster, `MAX_ATTESTERS` incarnations of a source, the room the
/// attester may fill (`fair`: the reserve for newcomers and the principals waiting kept) or its
/// quota with the records it adds. Renewing the records an endpoint
/// already holds (the same sources, the same incarnation) adds nothing, so it needs no headroom:
/// a full book still takes its attesters' renewals.
pub(crate) fn check(
    evidence: &HashMap<String, ClusterEvidence>,
    a: &Attestation,
    p: &WeightParams,
    bytes: usize,
    attester: &Attester,
    fair: &FairRoom,
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
    // attestation adds (an upper bound, before pruning).
    let held = |s: &&SourceCount| {
        old.and_then(|e| e.sources.get(&s.principal))
            .is_some_and(|list| list.iter().any(|r| r.served.incarnation == a.incarnation))
    };
    let added: usize = a.sources.iter().filter(|s| !held(s)).map(|s| ATTESTED_SOURCE.of(s.principal.len())).sum();
    let most = old.map_or(ATTESTED_ENDPOINT.of(a.endpoint.len() + a.cluster.len()), |e| e.bytes) + added;
    let already_mine = old.filter(|e| Some(e.charged_to) == attester.principal).map_or(0, |e| e.bytes);
    let held_after = attester.held.saturating_sub(already_mine) + most + attester.newcomer;
    let grows = old.is_none() || added > 0 || attester.newcomer > 0;
    if grows
        && bytes.saturating_sub(old_bytes).saturating_add(most + attester.newcomer)
            > fair.room_for(attester.principal, held_after)
    {
        return Err(Rejection::MemoryBudget);
    }
    if held_after > attester.quota {
        return Err(Rejection::PrincipalMemory);
    }
    Ok(())
}

/// Enter attestation `a` from principal `attester` (its id) into `evidence` (by cluster),
/// `now_us`, once `check` passed (`bytes` is the book's count, updated). A record of a source
/// that is not renewed stays for its ttl, or while it makes its source a proven caller, then
/// goes. The endpoint's record is charged to `attester` from then on.
pub(crate) fn enter(
    evidence: &mut HashMap<String, ClusterEvidence>,
    a: &Attestation,
    p: &WeightParams,
    bytes: &mut usize,
    attester: u32,
    now_us: u64,
) -> Charged {
    let old = evidence.get(&a.cluster).and_then(|c| c.endpoints.get(&a.endpoint));
    let released = old.map(|e| (e.charged_to, e.bytes));
    let old_bytes = old.map_or(0, |e| e.bytes);
    let interval_us = p.interval_us(a.interval_ms);
    let expires_us = now_us.saturating_add(p.reporter_ttl_us(interval_us));
    let cluster = evidence.entry(a.cluster.clone()).or_default();
    let endpoint = cluster.endpoints.entry(a.endpoint.clone()).or_insert_with(|| EndpointEvidence {
        expires_us,
        sources: HashMap::new(),
        bytes: 0,
        charged_to: attester,
    });
    endpoint.charged_to = attester;
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
                let served = Observation::first(&counts, a.incarnation, 0, None, interval_us, expires_us, now_us);
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
    Charged { released, charged: now_bytes, expires_us: endpoint.expires_us }
}

/// Drop the endpoints' attestations past their ttl, and clusters left without any; give their
/// bytes back, to the book and to the principals they are charged to. Returns when the next of
/// those kept expires (`u64::MAX`: none).
pub(crate) fn expire(
    evidence: &mut HashMap<String, ClusterEvidence>,
    bytes: &mut usize,
    principals: &mut HashMap<u32, PrincipalRecord>,
    now_us: u64,
) -> u64 {
    let mut next = u64::MAX;
    evidence.retain(|_, cluster| {
        cluster.endpoints.retain(|_, e| {
            let keep = e.expires_us > now_us;
            if keep {
                next = next.min(e.expires_us);
            }
            if !keep {
                *bytes = bytes.saturating_sub(e.bytes);
                if let Some(r) = principals.get_mut(&e.charged_to) {
                    r.bytes = r.bytes.saturating_sub(e.bytes);
                }
            }
            keep
        });
        !cluster.endpoints.is_empty()
    });
    next
}
