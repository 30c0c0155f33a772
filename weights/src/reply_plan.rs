//! The reply to a reporter (step 5's other half): planned under the book's lock from each cluster's
//! published view and the asker's own in-flight counts, then written outside it (`ReplyPlan`); and
//! the same view as a typed `Reply`, for the simulator and the tests.

use crate::params::WeightParams;
use crate::published::{reporters_of, PublishedCluster};
use crate::record::{ClusterRecord, ReporterRecord};
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
}

/// One cluster of a [`ReplyPlan`].
#[derive(Debug, Clone)]
struct PlannedCluster {
    view: PlannedView,
    /// The asker's own counted in-flight requests there (only where it has any).
    own: Own,
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
        for (i, PlannedCluster { view: cluster, own }) in self.clusters.iter().enumerate() {
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
                    write::begin_cluster(out, &published.name, published.reporters);
                    Some(published)
                }
                PlannedView::Unpublished(name) => {
                    write::begin_cluster(out, name, None);
                    None
                }
            };
            for p in published.iter() {
                for k in 0..p.endpoints() {
                    if k > 0 {
                        out.push(b',');
                    }
                    let mine = match by_position.split_first() {
                        Some((&(at, mine), rest)) if at as usize == k => {
                            by_position = rest;
                            mine
                        }
                        Some(_) => 0.0,
                        None => by_address.get(p.address(k)).copied().unwrap_or(0.0),
                    };
                    p.write_endpoint(k, (p.inflight(k) - mine).max(0.0), out);
                }
            }
            write::end(out);
        }
        write::end(out);
    }

    /// Endpoints the reply will carry.
    pub fn endpoints(&self) -> usize {
        let endpoints = |c: &PlannedCluster| match &c.view {
            PlannedView::Published(p) => p.endpoints(),
            PlannedView::Unpublished(_) => 0,
        };
        self.clusters.iter().map(endpoints).sum()
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

/// The plan of a reply to `asking` about `names`: each
/// known cluster's published view in the order given, as long as the reply carries at most
/// `max_endpoints` endpoints (a cluster that would take it past is left out), and the asker's own
/// in-flight counts. Costs a reference count per cluster and a lookup per endpoint the asker has
/// in flight.
pub(crate) fn plan<'a>(
    clusters: &HashMap<String, ClusterRecord>,
    asking: &Asking,
    names: impl IntoIterator<Item = &'a str>,
    max_endpoints: usize,
) -> ReplyPlan {
    let mut plan = ReplyPlan { ttl_ms: asking.ttl_ms, clusters: Vec::new() };
    let mut budget = max_endpoints;
    for (i, name) in names.into_iter().enumerate() {
        let Some(cluster) = clusters.get(name) else { continue };
        let Some(published) = &cluster.published else {
            let view = PlannedView::Unpublished(name.to_string());
            plan.clusters.push(PlannedCluster { view, own: Own::ByPosition(Vec::new()) });
            continue;
        };
        if published.endpoints() > budget {
            continue;
        }
        budget -= published.endpoints();
        let own = match asking.reporter {
            None => Own::ByPosition(Vec::new()),
            Some(r) => own_inflight(cluster, published, r, i, asking.now_us),
        };
        plan.clusters.push(PlannedCluster { view: PlannedView::Published(published.clone()), own });
    }
    plan
}

/// Where reporter `r`'s own in-flight requests are in `cluster`'s published view (the `i`-th
/// cluster of its last report).
fn own_inflight(
    cluster: &ClusterRecord,
    published: &PublishedCluster,
    r: &ReporterRecord,
    i: usize,
    now_us: u64,
) -> Own {
    match r.routes.get(i).filter(|route| route.layout == cluster.layout) {
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
