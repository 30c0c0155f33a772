//! Entering one cluster of an admitted report into the book: the cluster and its endpoints if new,
//! the reporter's observation of each endpoint, the reporter's route through the cluster's list,
//! and the counts and bytes that grow with them (`memory.rs`).

use crate::memory::{CLUSTER, ENDPOINT, OBSERVATION};
use crate::observation::{new_counters_us, Observation};
use crate::record::{ClusterRecord, EndpointRecord, PrincipalRecord, Totals};
use crate::route::Route;
use std::collections::HashMap;
use tailweight_wire::report::{ClusterReport, EndpointReport};

/// The reporter incarnation a report comes from, as the book entered it.
pub(crate) struct Entering<'a> {
    /// The book's id of the incarnation, its principal's, and the incarnation.
    pub id: u64,
    pub principal: u32,
    pub incarnation: u64,
    /// The principal's other incarnations of the name, with their cut expiry times.
    pub superseded: Option<&'a [(u64, u64)]>,
    pub interval_us: u64,
    pub expires_us: u64,
    /// `WeightParams::max_seen_age_us`.
    pub max_seen_age_us: u64,
    /// `WeightParams::rate_new_counters`.
    pub rate_new_counters: bool,
    pub now_us: u64,
}

/// Enter cluster report `c` from `who` (of principal `record`), found through `route` when the
/// cluster's list has not moved since the reporter's last report (the route is rebuilt otherwise).
pub(crate) fn enter_cluster(
    clusters: &mut HashMap<String, ClusterRecord>,
    c: &ClusterReport,
    route: &mut Route,
    record: &mut PrincipalRecord,
    totals: &mut Totals,
    who: &Entering,
) {
    let cluster = match clusters.get_mut(&c.name) {
        Some(cluster) => cluster,
        None => {
            let layout = *totals.next_layout;
            *totals.next_layout += 1;
            *totals.bytes += CLUSTER.of(c.name.len());
            record.bytes += CLUSTER.of(c.name.len());
            clusters.entry(c.name.clone()).or_insert(ClusterRecord {
                layout,
                created_us: who.now_us,
                creator: who.principal,
                ..ClusterRecord::default()
            })
        }
    };
    let mut stale = route.index.len() != c.endpoints.len();
    if !stale && route.layout == cluster.layout {
        cluster.endpoints.warm(&route.index, who.id);
    }
    let (mut added, mut new_endpoints, mut added_bytes) = (0usize, 0usize, 0usize);
    for (i, e) in c.endpoints.iter().enumerate() {
        let endpoint = match route.lookup(cluster.layout, i, &e.address).filter(|at| *at < cluster.endpoints.len()) {
            Some(at) => {
                let endpoint = cluster.endpoints.at(at);
                debug_assert_eq!(endpoint.address, e.address, "a route outlived its layout");
                endpoint
            }
            None => {
                stale = true;
                if cluster.endpoints.get(&e.address).is_none() {
                    if !renews(e, None, who.max_seen_age_us) {
                        // Nothing to enter (and the route stays empty: this reporter's next
                        // reports look their endpoints up by address while it lists this one).
                        continue;
                    }
                    *totals.bytes += ENDPOINT.of(e.address.len());
                    record.bytes += ENDPOINT.of(e.address.len());
                }
                cluster.endpoints.get_or_insert(&e.address, who.principal, who.now_us)
            }
        };
        if observe(endpoint, e, who) {
            added += 1;
            added_bytes += OBSERVATION.of(e.address.len());
            if endpoint.add_principal(who.principal) {
                new_endpoints += 1;
            }
        }
    }
    if added > 0 {
        let held = cluster.principals.entry(who.principal).or_default();
        if held.observations == 0 {
            record.clusters += 1;
        }
        held.observations += added;
        held.endpoints += new_endpoints;
        record.observations += added;
        record.bytes += added_bytes;
        *totals.observations += added;
        *totals.bytes += added_bytes;
    }
    if stale {
        route.rebuild(cluster.layout, &cluster.endpoints.index, c.endpoints.iter().map(|e| e.address.as_str()));
    }
}

/// Enter `who`'s report `e` of `endpoint` (and cut its superseded incarnations' observations to
/// their new expiry); true if it is the incarnation's first observation there. A report that does
/// not renew the observation (see `renews`) updates it without moving its expiry, and enters none.
/// A first observation rated at once (new counters, see `new_counters_us`, with
/// `WeightParams::rate_new_counters`) ends the
/// superseded incarnations' observations there now: the new counters hold the requests since the
/// restart, and the old window's rate, of the same traffic before it, would count them twice (a
/// live twin's next report enters it again).
fn observe(endpoint: &mut EndpointRecord, e: &EndpointReport, who: &Entering) -> bool {
    let first = match endpoint.obs.get_mut(&who.id) {
        Some(o) => {
            let expires_us = match renews(e, Some(o.requests), who.max_seen_age_us) {
                true => who.expires_us,
                false => o.expires_us.min(who.expires_us),
            };
            o.update(e, who.incarnation, who.interval_us, expires_us, who.now_us);
            None
        }
        None if renews(e, None, who.max_seen_age_us) => {
            let new_counters = who.rate_new_counters.then(|| new_counters_us(e.counted_ms, who.interval_us)).flatten();
            let (incarnation, principal, interval_us) = (who.incarnation, who.principal, who.interval_us);
            Some(Observation::first(e, incarnation, principal, new_counters, interval_us, who.expires_us, who.now_us))
        }
        None => None,
    };
    let rated_at_once = first.as_ref().is_some_and(|o| o.window_until_us > who.now_us);
    for (other, until) in who.superseded.iter().copied().flatten() {
        if let Some(o) = endpoint.obs.get_mut(other) {
            o.expires_us = o.expires_us.min(if rated_at_once { who.now_us } else { *until });
        }
    }
    match first {
        Some(first) => {
            endpoint.obs.insert(who.id, first);
            true
        }
        None => false,
    }
}

/// Whether report `e` keeps its reporter's observation of the endpoint alive for another reporter
/// ttl: `seen_age_ms` absent (an endpoint known only through failures, or a filter that does not
/// say) or at most `max_seen_age_us`, or its request count moved since the observation's window
/// began (`requests_before`; failures count, so a failing endpoint keeps its evidence). A reporter
/// that keeps listing an endpoint it has neither heard answer well nor sent anything to for that
/// long (what a worker gone long ago saw, a stale view) does not keep it in the book.
fn renews(e: &EndpointReport, requests_before: Option<u64>, max_seen_age_us: u64) -> bool {
    let seen_recently = e.seen_age_ms.is_none_or(|age| age.saturating_mul(1_000) <= max_seen_age_us);
    seen_recently || requests_before.is_some_and(|before| e.requests != before)
}
