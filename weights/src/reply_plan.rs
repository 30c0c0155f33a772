//! The reply to a reporter (step 5's other half): planned under the book's lock from each cluster's
//! published view and the asker's own in-flight counts, then written outside it (`ReplyPlan`); and
//! the same view as a typed `Reply`, for the simulator and the tests.

use crate::params::WeightParams;
use crate::published::{reporters_of, PublishedCluster};
use crate::record::{ClusterRecord, ReporterRecord};
use crate::route::Route;
use std::collections::HashMap;
use std::sync::Arc;
use tailweight_wire::protocol;
use tailweight_wire::reply::write;
use tailweight_wire::reply::{ClusterView, EndpointView, Reply};

/// What a reply needs from the book, taken under its lock by [`WeightBook::reply_plan`]; `render`
/// writes the reply without it.
///
/// [`WeightBook::reply_plan`]: crate::WeightBook::reply_plan
#[derive(Debug, Clone)]
pub struct ReplyPlan {
    ttl_ms: u32,
    clusters: Vec<PlannedCluster>,
    omitted: usize,
}

/// One cluster of a [`ReplyPlan`].
#[derive(Debug, Clone)]
struct PlannedCluster {
    view: PlannedView,
    /// The asker's own counted in-flight requests there (only where it has any).
    own: Own,
    /// The positions the reply carries, ascending, when it cannot carry the whole view (None:
    /// all of it).
    kept: Option<Vec<u32>>,
}

/// A cluster's view in a plan.
#[derive(Debug, Clone)]
enum PlannedView {
    /// As of its last recompute.
    Published(Arc<PublishedCluster>),
    /// None yet (no recompute so far): the reply names the cluster, without endpoints.
    Unpublished(String),
}

/// Where the asker's own in-flight requests are in a published view.
#[derive(Debug, Clone)]
enum Own {
    /// By position in the view, ascending (the cluster's list has not moved since it was published).
    ByPosition(Vec<(u32, f64)>),
    /// By address (it has).
    ByAddress(Vec<(String, f64)>),
}

impl ReplyPlan {
    /// The reply as JSON (`reply::write`'s pieces): `write_reply(&book.reply(..))`, byte for byte, as
    /// of the plan.
    pub fn render(&self, out: &mut Vec<u8>) {
        write::begin_reply(out, self.ttl_ms);
        for (i, PlannedCluster { view: cluster, own, kept }) in self.clusters.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let by_address: HashMap<&str, f64> = match own {
                Own::ByAddress(own) => own.iter().map(|(a, v)| (a.as_str(), *v)).collect(),
                Own::ByPosition(_) => HashMap::new(),
            };
            let mut by_position = match own {
                Own::ByPosition(own) => own.as_slice(),
                Own::ByAddress(_) => &[],
            };
            let published = match cluster {
                PlannedView::Published(published) => {
                    let omitted = kept.as_ref().map_or(0, |kept| published.endpoints() - kept.len());
                    let omitted = u32::try_from(omitted).unwrap_or(u32::MAX);
                    write::begin_cluster(out, &published.name, published.reporters, omitted);
                    Some(published)
                }
                PlannedView::Unpublished(name) => {
                    write::begin_cluster(out, name, None, 0);
                    None
                }
            };
            for p in published.iter() {
                let carried = kept.as_ref().map_or(p.endpoints(), Vec::len);
                for n in 0..carried {
                    let k = kept.as_ref().map_or(n as u32, |kept| kept[n]);
                    if n > 0 {
                        out.push(b',');
                    }
                    while by_position.first().is_some_and(|(at, _)| *at < k) {
                        by_position = &by_position[1..];
                    }
                    let mine = match by_position.split_first() {
                        Some((&(at, mine), rest)) if at == k => {
                            by_position = rest;
                            mine
                        }
                        Some(_) => 0.0,
                        None => by_address.get(p.address(k as usize)).copied().unwrap_or(0.0),
                    };
                    p.write_endpoint(k as usize, (p.inflight(k as usize) - mine).max(0.0), out);
                }
            }
            write::end(out);
        }
        write::end(out);
    }

    /// Endpoints the reply will carry.
    pub fn endpoints(&self) -> usize {
        let endpoints = |c: &PlannedCluster| match (&c.view, &c.kept) {
            (PlannedView::Published(_), Some(kept)) => kept.len(),
            (PlannedView::Published(p), None) => p.endpoints(),
            (PlannedView::Unpublished(_), _) => 0,
        };
        self.clusters.iter().map(endpoints).sum()
    }

    /// Endpoints of the named clusters' views the reply leaves out to stay within its cap
    /// (counted by the aggregator's `tailweight_reply_endpoints_omitted_total`).
    pub fn omitted(&self) -> usize {
        self.omitted
    }
}

/// Who a reply is for and when: what `plan` and `typed` share.
pub(crate) struct Asking<'a> {
    /// The asker's incarnation that reported last (None: a reporter the book does not hold).
    pub reporter: Option<&'a ReporterRecord>,
    /// The reply's ttl (`view_ttl_ms`).
    pub ttl_ms: u32,
    pub now_us: u64,
}

impl<'a> Asking<'a> {
    pub fn new(p: &WeightParams, reporter: Option<&'a ReporterRecord>, now_us: u64) -> Self {
        Asking { reporter, ttl_ms: view_ttl_ms(p, reporter), now_us }
    }
}

/// The reply's ttl: `view_ttl_intervals` of the asking reporter's intervals (1 s if unknown), at
/// least `min_view_ttl_us`.
fn view_ttl_ms(p: &WeightParams, asking: Option<&ReporterRecord>) -> u32 {
    let interval_us = asking.map_or(1_000_000, |r| r.interval_us);
    let ttl_us = ((interval_us as f64 * p.view_ttl_intervals) as u64).max(p.min_view_ttl_us);
    (ttl_us / 1_000).min(u64::from(u32::MAX)) as u32
}

/// The plan of a reply to `asking` about `names`: each known cluster's published view in the
/// order given, and the asker's own in-flight counts. A reply carries at most `max_endpoints`
/// endpoints, and a cluster at most the filter's `Limits::max_endpoints_per_cluster`: each
/// cluster gets `fair_caps`' share of them, and a view larger than its share is truncated to it (`kept`), never left out because of its size. Costs a reference count per
/// cluster and a lookup per endpoint the asker has in flight; a truncated view costs a walk over
/// its endpoints.
pub(crate) fn plan<'a>(
    clusters: &HashMap<String, ClusterRecord>,
    asking: &Asking,
    names: impl IntoIterator<Item = &'a str>,
    max_endpoints: usize,
) -> ReplyPlan {
    let named: Vec<(usize, &str, &ClusterRecord)> =
        names.into_iter().enumerate().filter_map(|(i, name)| Some((i, name, clusters.get(name)?))).collect();
    let sizes: Vec<usize> = named.iter().map(|(_, _, c)| c.published.as_ref().map_or(0, |p| p.endpoints())).collect();
    // Nor more than the filter reads in one cluster: it refuses a whole reply with a larger one.
    let most = protocol::Limits::default().max_endpoints_per_cluster;
    let caps = fair_caps(&sizes, max_endpoints).into_iter().map(|cap| cap.min(most));
    let mut plan = ReplyPlan { ttl_ms: asking.ttl_ms, clusters: Vec::new(), omitted: 0 };
    for ((i, name, cluster), cap) in named.into_iter().zip(caps) {
        let Some(published) = &cluster.published else {
            let view = PlannedView::Unpublished(name.to_string());
            plan.clusters.push(PlannedCluster { view, own: Own::ByPosition(Vec::new()), kept: None });
            continue;
        };
        let route = asking.reporter.and_then(|r| r.routes.get(i)).filter(|route| route.layout == cluster.layout);
        let kept = (published.endpoints() > cap).then(|| kept(cluster, published, asking.reporter, route, cap));
        plan.omitted += kept.as_ref().map_or(0, |kept| published.endpoints() - kept.len());
        if kept.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let own = match asking.reporter {
            None => Own::ByPosition(Vec::new()),
            Some(r) => own_inflight(cluster, published, r, route, asking.now_us),
        };
        let view = PlannedView::Published(published.clone());
        plan.clusters.push(PlannedCluster { view, own, kept });
    }
    plan
}

/// How many endpoints each of clusters of `sizes` may carry in a reply of at most `budget`
/// (water-filling): the largest `cap` with `sum(min(size, cap)) <= budget` is every cluster's
/// share, and what that leaves of the budget goes one more each to the clusters still short of
/// their size, in order. A small cluster is whole whenever the others leave it room; no cluster
/// can take another's share by being large.
pub(crate) fn fair_caps(sizes: &[usize], budget: usize) -> Vec<usize> {
    let mut ascending = sizes.to_vec();
    ascending.sort_unstable();
    let (mut left, mut cap) = (budget, usize::MAX);
    for (n, size) in ascending.iter().enumerate() {
        let sharing = ascending.len() - n;
        if size.saturating_mul(sharing) > left {
            cap = left / sharing;
            break;
        }
        left -= size;
    }
    if cap == usize::MAX {
        return sizes.to_vec();
    }
    let mut spare = budget - sizes.iter().map(|s| (*s).min(cap)).sum::<usize>();
    sizes
        .iter()
        .map(|size| {
            let extra = usize::from(*size > cap && spare > 0);
            spare -= extra;
            (*size).min(cap + extra)
        })
        .collect()
}

/// The `cap` positions of a view too large for its share of a reply, ascending: first the
/// endpoints the asker itself reports there (the ones it can pick), then by `published.rank()`
/// (attested, reported by more principals, served). Made-up endpoints of another principal
/// therefore never push out the asker's own, nor endpoints several principals report.
fn kept(
    cluster: &ClusterRecord,
    published: &PublishedCluster,
    asker: Option<&ReporterRecord>,
    route: Option<&Route>,
    cap: usize,
) -> Vec<u32> {
    let n = published.endpoints();
    let mut taken = vec![false; n];
    let mut kept = Vec::with_capacity(cap);
    let mut take = |at: u32, kept: &mut Vec<u32>| {
        if kept.len() < cap && (at as usize) < n && !std::mem::replace(&mut taken[at as usize], true) {
            kept.push(at);
        }
    };
    match (asker, route) {
        (Some(_), Some(route)) if published.layout == cluster.layout => {
            route.index.iter().for_each(|at| take(*at, &mut kept));
        }
        (Some(r), _) => {
            let position: HashMap<&str, u32> = (0..n as u32).map(|k| (published.address(k as usize), k)).collect();
            let own = cluster.endpoints.iter().filter(|e| e.obs.contains_key(&r.id));
            own.filter_map(|e| position.get(e.address.as_str())).for_each(|at| take(*at, &mut kept));
        }
        (None, _) => {}
    }
    published.rank().iter().for_each(|at| take(*at, &mut kept));
    kept.sort_unstable();
    kept
}

/// Where reporter `r`'s own in-flight requests are in `cluster`'s published view (`route`: its
/// last report's route through the cluster, if the cluster's layout has not moved since).
fn own_inflight(
    cluster: &ClusterRecord,
    published: &PublishedCluster,
    r: &ReporterRecord,
    route: Option<&Route>,
    now_us: u64,
) -> Own {
    match route {
        // Its last report's endpoints here, by its route (the list has not moved since).
        Some(route) if published.layout == cluster.layout => {
            let mut own: Vec<(u32, f64)> = route
                .index
                .iter()
                .filter(|at| (**at as usize) < published.endpoints())
                .filter_map(|at| Some((*at, cluster.endpoints.get_at(*at as usize)?.own_inflight(Some(r), now_us))))
                .filter(|(_, mine)| *mine > 0.0)
                .collect();
            own.sort_unstable_by_key(|(at, _)| *at);
            Own::ByPosition(own)
        }
        _ => Own::ByAddress(
            cluster
                .endpoints
                .iter()
                .filter(|e| e.obs.contains_key(&r.id))
                .map(|e| (e.address.clone(), e.own_inflight(Some(r), now_us)))
                .filter(|(_, mine)| *mine > 0.0)
                .collect(),
        ),
    }
}

/// The view of `names` as `asking` sees it, typed; unknown clusters are omitted, and so are
/// endpoints not yet recomputed.
pub(crate) fn typed<'a>(
    clusters: &HashMap<String, ClusterRecord>,
    asking: &Asking,
    names: impl IntoIterator<Item = &'a str>,
) -> Reply {
    let mut views = Vec::new();
    for name in names {
        let Some(cluster) = clusters.get(name) else { continue };
        let endpoints = cluster
            .endpoints
            .iter()
            .filter_map(|e| {
                let d = e.decision.as_ref()?;
                Some(EndpointView {
                    address: e.address.clone(),
                    weight: d.weight,
                    inflight: d.view_inflight,
                    peer_inflight: (d.view_inflight - e.own_inflight(asking.reporter, asking.now_us)).max(0.0),
                    latency_us: d.latency_us,
                    cpu: d.cpu,
                    ejected: d.ejected,
                    served_age_ms: d.served_age_ms,
                })
            })
            .collect();
        let reporters = cluster.endpoints.iter().filter_map(|e| e.decision.as_ref().map(reporters_of)).max();
        views.push(ClusterView { name: name.to_string(), reporters, endpoints });
    }
    Reply { version: protocol::VERSION, ttl_ms: asking.ttl_ms, clusters: views }
}
