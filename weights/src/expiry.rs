//! Expiring one cluster: observations past their ttl go, and with them endpoints nobody reports
//! and the cluster if nothing is left; the counts and bytes they held are given back.

use crate::memory::{CLUSTER, ENDPOINT, OBSERVATION, PRINCIPAL};
use crate::record::{ClusterRecord, EndpointRecord, Held, PrincipalRecord, Totals};
use std::collections::HashMap;
use std::hash::Hash;

/// Drop the principals holding nothing, and their names (giving those bytes back): until what it
/// entered expires, a principal stays, so its id is not reused meanwhile.
pub(crate) fn expire_principals(
    principals: &mut HashMap<u32, PrincipalRecord>,
    principal_ids: &mut HashMap<String, u32>,
    bytes: &mut usize,
) {
    principals.retain(|_, r| r.reporters > 0 || r.observations > 0 || r.clusters > 0 || r.bytes > 0);
    principal_ids.retain(|name, id| {
        let keep = principals.contains_key(id);
        if !keep {
            *bytes = bytes.saturating_sub(PRINCIPAL.of(name.len()));
        }
        keep
    });
}

/// Give back a map's spare room once it holds less than a quarter of it (beyond 64 entries);
/// whether it did.
pub(crate) fn shrink_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) -> bool {
    let sparse = map.capacity() > 4 * map.len().max(64);
    if sparse {
        map.shrink_to_fit();
    }
    sparse
}

/// Expire what was said about cluster `name` (and the cluster if nothing is left).
pub(crate) fn expire_cluster(
    clusters: &mut HashMap<String, ClusterRecord>,
    principals: &mut HashMap<u32, PrincipalRecord>,
    totals: &mut Totals,
    name: &str,
    now_us: u64,
) {
    let Some(cluster) = clusters.get_mut(name) else { return };
    let (mut removed, mut freed) = (0usize, 0usize);
    let held = &mut cluster.principals;
    let moved = cluster.endpoints.retain(|e| {
        let (gone, gone_bytes) = expire_observations(e, held, principals, now_us);
        removed += gone;
        freed += gone_bytes;
        if e.obs.capacity() > 4 * e.obs.len().max(4) {
            e.obs.shrink_to_fit();
        }
        if e.obs.is_empty() {
            freed += ENDPOINT.of(e.address.len());
            if let Some(r) = principals.get_mut(&e.creator) {
                r.bytes = r.bytes.saturating_sub(ENDPOINT.of(e.address.len()));
            }
        }
        !e.obs.is_empty()
    });
    held.retain(|principal, h| {
        if h.observations == 0 {
            if let Some(r) = principals.get_mut(principal) {
                r.clusters = r.clusters.saturating_sub(1);
            }
        }
        h.observations > 0
    });
    if moved {
        cluster.layout = *totals.next_layout;
        *totals.next_layout += 1;
    }
    if cluster.endpoints.is_empty() {
        if let Some(r) = principals.get_mut(&cluster.creator) {
            r.bytes = r.bytes.saturating_sub(CLUSTER.of(name.len()));
        }
        clusters.remove(name);
        freed += CLUSTER.of(name.len());
    }
    *totals.observations -= removed.min(*totals.observations);
    *totals.bytes = totals.bytes.saturating_sub(freed);
}

/// Drop `e`'s observations past their ttl, and what their principals held by them (in the cluster,
/// `held`, and in all); how many went and their bytes.
fn expire_observations(
    e: &mut EndpointRecord,
    held: &mut HashMap<u32, Held>,
    principals: &mut HashMap<u32, PrincipalRecord>,
    now_us: u64,
) -> (usize, usize) {
    let (obs, endpoint_principals) = (&mut e.obs, &mut e.principals);
    let observation = OBSERVATION.of(e.address.len());
    let (mut removed, mut freed) = (0usize, 0usize);
    obs.retain(|_, o| {
        let keep = o.expires_us > now_us;
        if !keep {
            removed += 1;
            freed += observation;
            let last_here = match endpoint_principals.iter().position(|(p, _)| *p == o.principal) {
                Some(at) => {
                    endpoint_principals[at].1 -= 1;
                    let last = endpoint_principals[at].1 == 0;
                    if last {
                        endpoint_principals.swap_remove(at);
                    }
                    last
                }
                None => false,
            };
            if let Some(h) = held.get_mut(&o.principal) {
                h.observations = h.observations.saturating_sub(1);
                if last_here {
                    h.endpoints = h.endpoints.saturating_sub(1);
                }
            }
            if let Some(r) = principals.get_mut(&o.principal) {
                r.observations = r.observations.saturating_sub(1);
                r.bytes = r.bytes.saturating_sub(observation);
            }
        }
        keep
    });
    (removed, freed)
}
