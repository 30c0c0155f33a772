//! Evidence from callers only: what a principal's reports about a cluster count for, once the
//! cluster's endpoints attest what they served (`evidence.rs`). Applied to each principal's merged
//! view of each endpoint (step 1, between `merge.rs` and `consensus.rs`):
//!
//! - A principal is a **proven caller** of the cluster while some endpoint of it attested requests
//!   from it within `proven_caller_us`. A principal that is not one counts for nothing: its views
//!   are dropped, however many principals it is.
//! - Endpoint E **attests** (a live attestation with a completed window): a proven caller P's
//!   requests on E count up to `attested(E, P) x (1 + attest_tolerance)` (the tolerance covers
//!   report and attestation windows that do not line up); P's errors, in-flight count and votes on
//!   latency and CPU scale down with its requests; without attested requests from P, its view of E
//!   is dropped.
//! - E is **silent** (dead pod, no server role there, or no window yet): a proven caller's requests
//!   on E count up to its attested volume on the whole cluster (the sum over the attesting
//!   endpoints) x `(1 + attest_tolerance)`, scaled the same way: it cannot claim more on E than it
//!   is shown to send to the cluster.
//!
//! Errors never count beyond the counted requests. So no principal that does not call the service
//! moves any weight or ejection, and a caller's claims are bounded by its real traffic (among
//! several callers, `consensus.rs` then bounds a lying one as before). A cluster none of whose
//! endpoints has a live attestation keeps the rules without evidence (`consensus.rs`,
//! docs/security.md).

use crate::consensus::PrincipalView;
use crate::evidence::{self, ClusterEvidence};
use crate::params::WeightParams;
use crate::record::EndpointRecord;
use std::collections::HashMap;

/// Reused buffers: bounding allocates nothing in steady state.
#[derive(Debug, Default)]
pub(crate) struct CallerScratch {
    /// Per principal id: (proven, attested request rate over the cluster).
    callers: HashMap<u32, (bool, f64)>,
    /// Per endpoint index: whether it attests.
    attesting: Vec<bool>,
    /// (endpoint index, principal id, attested request rate), sorted.
    served: Vec<(usize, u32, f64)>,
}

/// Bound `views` (of `endpoints`) by `evidence`: drop what does not count, scale what counts in
/// part (see the module docs). `ids` maps principal names to the book's ids. Returns false (and
/// changes nothing) when no endpoint of the cluster has a live attestation; from an endpoint's
/// first attestation on, the cluster is under these rules (in its first window nobody is proven
/// yet, so nothing counts for that window: an attacker cannot get in before the evidence does). Each dropped view's principal's
/// observations of its endpoint get a counted in-flight share of 0.
pub(crate) fn bound_views(
    views: &mut Vec<PrincipalView>,
    endpoints: &mut [EndpointRecord],
    evidence: &ClusterEvidence,
    ids: &HashMap<String, u32>,
    p: &WeightParams,
    s: &mut CallerScratch,
    now_us: u64,
) -> bool {
    if !evidence.endpoints.values().any(|e| e.live(now_us)) {
        return false;
    }
    s.callers.clear();
    for e in evidence.endpoints.values().filter(|e| e.attests(now_us)) {
        for (name, records) in &e.sources {
            if let Some(id) = ids.get(name) {
                let (qps, proven) = evidence::served(records, now_us);
                let caller = s.callers.entry(*id).or_insert((false, 0.0));
                caller.0 |= proven;
                caller.1 += qps;
            }
        }
    }
    s.attesting.clear();
    s.served.clear();
    for (at, endpoint) in endpoints.iter().enumerate() {
        let attests = evidence.endpoints.get(&endpoint.address).filter(|e| e.attests(now_us));
        s.attesting.push(attests.is_some());
        for (name, records) in attests.into_iter().flat_map(|e| e.sources.iter()) {
            if let Some(id) = ids.get(name) {
                s.served.push((at, *id, evidence::served(records, now_us).0));
            }
        }
    }
    s.served.sort_by_key(|x| (x.0, x.1));
    let tolerance = 1.0 + p.attest_tolerance;
    views.retain_mut(|v| {
        let cap = match s.callers.get(&v.principal) {
            Some((true, _)) if s.attesting[v.endpoint] => {
                let at = s.served.binary_search_by(|x| (x.0, x.1).cmp(&(v.endpoint, v.principal)));
                at.map_or(0.0, |i| s.served[i].2) * tolerance
            }
            Some((true, volume)) => volume * tolerance,
            _ => 0.0,
        };
        let keep = cap > 0.0;
        if keep {
            scale_to(v, cap);
        } else {
            for o in endpoints[v.endpoint].obs.values_mut().filter(|o| o.principal == v.principal) {
                o.counted_inflight = 0.0;
            }
        }
        keep
    });
    true
}

/// Scale `v`'s requests down to `cap` if above, and with them its errors, in-flight count and
/// votes; errors at most the requests.
fn scale_to(v: &mut PrincipalView, cap: f64) {
    let m = &mut v.merged;
    if m.qps > cap {
        let f = cap / m.qps;
        m.qps = cap;
        m.eps *= f;
        m.inflight *= f;
        m.latency_votes *= f;
        m.cpu_votes *= f;
        v.inflight_factor *= f;
    }
    m.eps = m.eps.min(m.qps);
}
