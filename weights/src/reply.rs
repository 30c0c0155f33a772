//! The reply to a reporter: each cluster's view in JSON, rendered at recompute (step 5) into one
//! shared buffer per cluster, so that answering a report takes the buffer (a reference count)
//! under the book's lock and writes the reply outside it: a copy plus one number per endpoint.

use crate::book::{WeightBook, TRUSTED_PRINCIPAL};
use crate::record::{ClusterRecord, EndpointRecord, ReporterRecord};
use std::collections::HashMap;
use std::sync::Arc;
use tailweight_wire::protocol;
use tailweight_wire::reply::write;
use tailweight_wire::reply::{ClusterView, EndpointView, Reply};

/// Step 5: each endpoint's weight (`weights`, aligned with `endpoints`; a non-finite or negative
/// one is 1, none above `protocol::MAX_WEIGHT`) into its record and decision.
pub(super) fn publish(endpoints: &mut [EndpointRecord], weights: &[f64]) {
    for (endpoint, w) in endpoints.iter_mut().zip(weights) {
        let w = if w.is_finite() && *w >= 0.0 { w.min(protocol::MAX_WEIGHT) } else { 1.0 };
        endpoint.weight = Some(w);
        if let Some(d) = endpoint.decision.as_mut() {
            d.weight = w;
        }
    }
}

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
    name: String,
    /// The cluster's layout when it was published: while it is the same, the i-th endpoint here is
    /// the i-th of the cluster's list.
    layout: u64,
    bytes: Vec<u8>,
    spans: Vec<Span>,
    inflight: Vec<f64>,
}

impl PublishedCluster {
    /// The view of `cluster` (its endpoints with a decision, in the list's order).
    pub(super) fn of(name: &str, cluster: &ClusterRecord) -> PublishedCluster {
        let mut p = PublishedCluster { name: name.to_string(), layout: cluster.layout, ..PublishedCluster::default() };
        for e in cluster.endpoints.iter() {
            let Some(d) = &e.decision else { continue };
            let start = p.bytes.len() as u32;
            let address = write::endpoint_head(&mut p.bytes, &e.address, d.weight, d.view_inflight);
            let split = p.bytes.len() as u32;
            write::endpoint_tail(&mut p.bytes, d.latency_us, d.cpu, d.ejected);
            let address = (address.start as u32, address.end as u32);
            p.spans.push(Span { start, split, end: p.bytes.len() as u32, address });
            p.inflight.push(d.view_inflight);
        }
        p
    }

    pub fn endpoints(&self) -> usize {
        self.spans.len()
    }

    fn address(&self, span: &Span) -> &str {
        std::str::from_utf8(&self.bytes[span.address.0 as usize..span.address.1 as usize]).unwrap_or_default()
    }
}

/// What a reply needs from the book, taken under its lock by [`WeightBook::reply_plan`]; `render`
/// writes the reply without it.
#[derive(Debug, Clone)]
pub struct ReplyPlan {
    ttl_ms: u32,
    clusters: Vec<PlannedCluster>,
}

/// One cluster of a [`ReplyPlan`].
#[derive(Debug, Clone)]
struct PlannedCluster {
    /// Its published view, or its name while it has none yet (no recompute so far).
    view: Result<Arc<PublishedCluster>, String>,
    /// The asker's own counted in-flight requests there (only where it has any).
    own: Own,
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
                Ok(published) => {
                    write::begin_cluster(out, &published.name);
                    Some(published)
                }
                Err(name) => {
                    write::begin_cluster(out, name);
                    None
                }
            };
            for p in published.iter() {
                for (k, (span, inflight)) in p.spans.iter().zip(&p.inflight).enumerate() {
                    if k > 0 {
                        out.push(b',');
                    }
                    let mine = match by_position.split_first() {
                        Some((&(at, mine), rest)) if at as usize == k => {
                            by_position = rest;
                            mine
                        }
                        Some(_) => 0.0,
                        None => by_address.get(p.address(span)).copied().unwrap_or(0.0),
                    };
                    out.extend_from_slice(&p.bytes[span.start as usize..span.split as usize]);
                    write::peer_inflight(out, (inflight - mine).max(0.0));
                    out.extend_from_slice(&p.bytes[span.split as usize..span.end as usize]);
                }
            }
            write::end(out);
        }
        write::end(out);
    }

    /// Endpoints the reply will carry.
    pub fn endpoints(&self) -> usize {
        self.clusters.iter().map(|c| c.view.as_ref().map_or(0, |p| p.endpoints())).sum()
    }
}

impl EndpointRecord {
    /// The asking reporter's counted in-flight requests here (0 if it has none or is not live).
    fn own_inflight(&self, asking: Option<&ReporterRecord>, now_us: u64) -> f64 {
        asking.and_then(|r| self.obs.get(&r.id)).filter(|o| o.live(now_us)).map_or(0.0, |o| o.counted_inflight)
    }
}

impl WeightBook {
    /// The view of `clusters` as seen by `reporter` of the trusted principal (see `ingest`).
    pub fn reply<'a>(&self, reporter: &str, clusters: impl IntoIterator<Item = &'a str>, now_us: u64) -> Reply {
        self.reply_as(TRUSTED_PRINCIPAL, reporter, clusters, now_us)
    }

    /// The view of `clusters` as seen by `reporter` of `principal`, i.e. its incarnation that
    /// reported last (call right after `ingest_as`; peer_inflight excludes that incarnation's own
    /// in-flight); unknown clusters are omitted, and so are endpoints not yet recomputed.
    pub fn reply_as<'a>(
        &self,
        principal: &str,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
    ) -> Reply {
        let asking = self.principal_id(principal).and_then(|id| self.reporter(reporter, id, None));
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
                        inflight: d.view_inflight,
                        peer_inflight: (d.view_inflight - e.own_inflight(asking, now_us)).max(0.0),
                        latency_us: d.latency_us,
                        cpu: d.cpu,
                        ejected: d.ejected,
                    })
                })
                .collect();
            views.push(ClusterView { name: name.to_string(), endpoints });
        }
        Reply { version: protocol::VERSION, ttl_ms: self.view_ttl_ms(asking), clusters: views }
    }

    /// What a reply to `reporter` of `principal` about `clusters` needs (call right after
    /// `ingest_as`, under the same lock): each known cluster's view as of its last recompute, in
    /// the order given, as long as the reply carries at most `max_endpoints` endpoints (a cluster
    /// that would take it past is left out), and the asker's own in-flight counts. Costs a
    /// reference count per cluster and a lookup per endpoint the asker has in flight.
    pub fn reply_plan<'a>(
        &self,
        principal: &str,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
        max_endpoints: usize,
    ) -> ReplyPlan {
        let asking = self.principal_id(principal).and_then(|id| self.reporter(reporter, id, None));
        let mut plan = ReplyPlan { ttl_ms: self.view_ttl_ms(asking), clusters: Vec::new() };
        let mut budget = max_endpoints;
        for (i, name) in clusters.into_iter().enumerate() {
            let Some(cluster) = self.clusters.get(name) else { continue };
            let Some(published) = &cluster.published else {
                plan.clusters.push(PlannedCluster { view: Err(name.to_string()), own: Own::ByPosition(Vec::new()) });
                continue;
            };
            if published.endpoints() > budget {
                continue;
            }
            budget -= published.endpoints();
            let own = match asking {
                None => Own::ByPosition(Vec::new()),
                Some(r) => match r.routes.get(i).filter(|route| route.layout == cluster.layout) {
                    // Its last report's endpoints here, by its route (the list has not moved since).
                    Some(route) if published.layout == cluster.layout => {
                        let mut own: Vec<(u32, f64)> = route
                            .index
                            .iter()
                            .filter(|at| (**at as usize) < published.endpoints())
                            .filter_map(|at| {
                                Some((*at, cluster.endpoints.get_at(*at as usize)?.own_inflight(asking, now_us)))
                            })
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
                            .map(|e| (e.address.clone(), e.own_inflight(asking, now_us)))
                            .filter(|(_, mine)| *mine > 0.0)
                            .collect(),
                    ),
                },
            };
            plan.clusters.push(PlannedCluster { view: Ok(published.clone()), own });
        }
        plan
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
