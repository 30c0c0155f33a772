//! The weight book: takes reports in (within the caps), recomputes weights, expires what went
//! silent, and tells what it decided. The formulas live beside the steps that use them (see the
//! module docs of `weights`).

use super::capacity;
use super::decision::{ClusterDecision, EndpointDecision};
use super::merge::{merge_endpoint, MergeScratch};
use super::normalize;
use super::observation::Observation;
use super::params::WeightParams;
use super::record::{ClusterRecord, ReporterRecord};
use super::reply;
use super::route::Route;
use super::smoothing;
use crate::wire::{self, Report};
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;

/// Why a report was refused (countable; see `as_str`). A refused report changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    TooManyReporters,
    TooManyClusters,
    TooManyEndpoints,
    TooManyObservations,
}

impl Rejection {
    pub const ALL: [Rejection; 4] = [
        Rejection::TooManyReporters,
        Rejection::TooManyClusters,
        Rejection::TooManyEndpoints,
        Rejection::TooManyObservations,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::TooManyReporters => "too_many_reporters",
            Rejection::TooManyClusters => "too_many_clusters",
            Rejection::TooManyEndpoints => "too_many_endpoints",
            Rejection::TooManyObservations => "too_many_observations",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            Rejection::TooManyReporters => "the reporter limit is reached",
            Rejection::TooManyClusters => "the cluster limit is reached",
            Rejection::TooManyEndpoints => "the per-cluster endpoint limit is reached",
            Rejection::TooManyObservations => "the reporter x endpoint limit is reached",
        };
        f.write_str(what)
    }
}

impl std::error::Error for Rejection {}

/// Sizes of the book, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub reporters: usize,
    pub clusters: usize,
    pub endpoints: usize,
    pub observations: usize,
    pub cpu_entries: usize,
}

/// Reused buffers: a recompute allocates nothing in steady state.
#[derive(Debug, Default)]
struct Scratch {
    merge: MergeScratch,
    /// Per endpoint of the cluster being recomputed: capacity by CPU, raw capacity, smoothed
    /// weight and its bounds, published weight.
    by_cpu: Vec<Option<f64>>,
    raw: Vec<Option<f64>>,
    desired: Vec<f64>,
    lo_hi: Vec<(f64, f64)>,
    out: Vec<f64>,
    sorted: Vec<f64>,
}

/// A report's reporter as `WeightBook::enter_incarnation` found or entered it.
struct Entered {
    id: u64,
    /// The name's other incarnations, by id, with their cut expiry times.
    superseded: Option<Vec<(u64, u64)>>,
    routes: Vec<Route>,
}

#[derive(Debug)]
pub struct WeightBook {
    pub(super) params: WeightParams,
    pub(super) clusters: HashMap<String, ClusterRecord>,
    /// By name; each name's live incarnations, the one that reported last first (usually just one:
    /// more when a reporter restarted within its ttl, or when several processes share a name).
    reporters: HashMap<String, Vec<ReporterRecord>>,
    /// Live incarnations in all (what `max_reporters` bounds).
    reporter_count: usize,
    next_reporter_id: u64,
    next_layout: u64,
    external_cpu: HashMap<IpAddr, (f64, u64)>,
    observations: usize,
    scratch: Scratch,
}

impl WeightBook {
    pub fn new(params: WeightParams) -> Self {
        WeightBook {
            params,
            clusters: HashMap::new(),
            reporters: HashMap::new(),
            reporter_count: 0,
            next_reporter_id: 0,
            next_layout: 1,
            external_cpu: HashMap::new(),
            observations: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn params(&self) -> &WeightParams {
        &self.params
    }

    pub fn counts(&self) -> Counts {
        Counts {
            reporters: self.reporter_count,
            clusters: self.clusters.len(),
            endpoints: self.clusters.values().map(|c| c.endpoints.len()).sum(),
            observations: self.observations,
            cpu_entries: self.external_cpu.len(),
        }
    }

    /// Merge one already-validated report received at `now_us`. Err = refused by a cap; a refused
    /// report changes nothing. O(endpoints in the report).
    pub fn ingest(&mut self, report: &Report, now_us: u64) -> Result<(), Rejection> {
        self.admit(report)?;
        let p = &self.params;
        let interval_us = u64::from(report.interval_ms) * 1_000;
        let ttl_us = ((interval_us as f64 * p.reporter_ttl_intervals) as u64).max(p.min_reporter_ttl_us);
        let expires_us = now_us.saturating_add(ttl_us);
        let Entered { id, superseded, mut routes } = self.enter_incarnation(report, interval_us, expires_us, now_us);
        routes.resize_with(report.clusters.len(), Route::default);
        for (c, route) in report.clusters.iter().zip(routes.iter_mut()) {
            let cluster = match self.clusters.get_mut(&c.name) {
                Some(cluster) => cluster,
                None => {
                    let layout = self.next_layout;
                    self.next_layout += 1;
                    self.clusters.entry(c.name.clone()).or_insert(ClusterRecord {
                        layout,
                        created_us: now_us,
                        ..ClusterRecord::default()
                    })
                }
            };
            let mut stale = route.index.len() != c.endpoints.len();
            if !stale && route.layout == cluster.layout {
                cluster.endpoints.warm(&route.index, id);
            }
            for (i, e) in c.endpoints.iter().enumerate() {
                let endpoint =
                    match route.lookup(cluster.layout, i, &e.address).filter(|at| *at < cluster.endpoints.len()) {
                        Some(at) => {
                            let endpoint = cluster.endpoints.at(at);
                            debug_assert_eq!(endpoint.address, e.address, "a route outlived its layout");
                            endpoint
                        }
                        None => {
                            stale = true;
                            cluster.endpoints.get_or_insert(&e.address, now_us)
                        }
                    };
                for (other, until) in superseded.iter().flatten() {
                    if let Some(o) = endpoint.obs.get_mut(other) {
                        o.expires_us = o.expires_us.min(*until);
                    }
                }
                match endpoint.obs.get_mut(&id) {
                    Some(o) => o.update(e, report.incarnation, interval_us, expires_us, now_us),
                    None => {
                        endpoint.obs.insert(id, Observation::first(e, report.incarnation, expires_us, now_us));
                        self.observations += 1;
                    }
                }
            }
            if stale {
                route.rebuild(cluster.layout, &cluster.endpoints, c.endpoints.iter().map(|e| e.address.as_str()));
            }
        }
        if let Some(r) = self.reporters.get_mut(&report.reporter).and_then(|list| list.first_mut()) {
            r.routes = routes;
        }
        Ok(())
    }

    /// The book's id of the report's (name, incarnation), entered if new and made the name's first
    /// (the one that reported last), with `interval_us` and `expires_us` as of this report; for a
    /// new incarnation of a known name, the other incarnations' ids and their cut ttls; and its
    /// routes, taken out (`ingest` puts them back).
    ///
    /// A reporter is a (name, incarnation): a new incarnation is a restart, or another process
    /// under the same name. Its counters are its own either way (taking differences across
    /// processes would reset every window). The other incarnations stop counting after one more
    /// of their intervals unless they report again: a restarted reporter's old self fades once its
    /// successor has a window, while a live twin renews itself with its next report.
    fn enter_incarnation(&mut self, report: &Report, interval_us: u64, expires_us: u64, now_us: u64) -> Entered {
        let incarnations = match self.reporters.get_mut(&report.reporter) {
            Some(list) => list,
            None => self.reporters.entry(report.reporter.clone()).or_default(),
        };
        let mut superseded = None;
        let id = match incarnations.iter().position(|r| r.incarnation == report.incarnation) {
            Some(i) => {
                incarnations.swap(0, i);
                let r = &mut incarnations[0];
                (r.interval_us, r.expires_us) = (interval_us, expires_us);
                r.id
            }
            None => {
                let id = self.next_reporter_id;
                self.next_reporter_id += 1;
                if !incarnations.is_empty() {
                    for r in incarnations.iter_mut() {
                        r.expires_us = r.expires_us.min(now_us.saturating_add(r.interval_us));
                    }
                    superseded = Some(incarnations.iter().map(|r| (r.id, r.expires_us)).collect::<Vec<_>>());
                }
                incarnations.push(ReporterRecord {
                    id,
                    incarnation: report.incarnation,
                    interval_us,
                    expires_us,
                    routes: Vec::new(),
                });
                let last = incarnations.len() - 1;
                incarnations.swap(0, last);
                self.reporter_count += 1;
                id
            }
        };
        Entered { id, superseded, routes: std::mem::take(&mut incarnations[0].routes) }
    }

    /// Check the caps before touching anything. Exact counting only when a cap is within reach.
    fn admit(&self, report: &Report) -> Result<(), Rejection> {
        let p = &self.params;
        let known = self.reporter(&report.reporter, Some(report.incarnation));
        if known.is_none() && self.reporter_count >= p.max_reporters {
            return Err(Rejection::TooManyReporters);
        }
        let in_report: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
        if self.clusters.len() + report.clusters.len() > p.max_clusters {
            let new = report.clusters.iter().filter(|c| !self.clusters.contains_key(&c.name)).count();
            if self.clusters.len() + new > p.max_clusters {
                return Err(Rejection::TooManyClusters);
            }
        }
        let mut new_obs = 0usize;
        let near_obs_cap = self.observations + in_report > p.max_observations;
        for c in &report.clusters {
            let cluster = self.clusters.get(&c.name);
            let existing = cluster.map_or(0, |cl| cl.endpoints.len());
            if existing + c.endpoints.len() <= p.max_endpoints_per_cluster && !near_obs_cap {
                continue;
            }
            let mut new_endpoints = 0usize;
            for e in &c.endpoints {
                match cluster.and_then(|cl| cl.endpoints.get(&e.address)) {
                    None => {
                        new_endpoints += 1;
                        new_obs += 1;
                    }
                    Some(endpoint) => {
                        if known.is_none_or(|r| !endpoint.obs.contains_key(&r.id)) {
                            new_obs += 1;
                        }
                    }
                }
            }
            if existing + new_endpoints > p.max_endpoints_per_cluster {
                return Err(Rejection::TooManyEndpoints);
            }
        }
        if near_obs_cap && self.observations + new_obs > p.max_observations {
            return Err(Rejection::TooManyObservations);
        }
        Ok(())
    }

    /// CPU utilisation of an endpoint IP from the metrics store (applies to every port of that IP).
    /// Non-finite or negative values are ignored; new IPs beyond `max_cpu_entries` are ignored.
    pub fn set_external_cpu(&mut self, ip: IpAddr, cpu: f64, now_us: u64) {
        if !cpu.is_finite() || !(0.0..=wire::MAX_CPU).contains(&cpu) {
            return;
        }
        if self.external_cpu.len() >= self.params.max_cpu_entries && !self.external_cpu.contains_key(&ip) {
            return;
        }
        self.external_cpu.insert(ip, (cpu, now_us));
    }

    /// The external CPU of an IP and when it was set.
    pub fn external_cpu(&self, ip: IpAddr) -> Option<(f64, u64)> {
        self.external_cpu.get(&ip).copied()
    }

    /// Names of the clusters, so a caller may recompute them one at a time (and yield between).
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    /// Recompute weights of every cluster.
    pub fn recompute(&mut self, now_us: u64) {
        let names: Vec<String> = self.cluster_names();
        for name in names {
            self.recompute_cluster(&name, now_us);
        }
    }

    /// Recompute the weights of one cluster (no-op if unknown), in the steps of the module docs.
    /// O(observations of the cluster).
    pub fn recompute_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { params: p, clusters, external_cpu, scratch: s, .. } = self;
        let Some(cluster) = clusters.get_mut(name) else { return };
        let elapsed_us = cluster.elapsed_us(now_us);
        s.by_cpu.clear();
        for endpoint in cluster.endpoints.iter_mut() {
            // 1. Merge what its live reporters say.
            let merged = merge_endpoint(&mut endpoint.obs, endpoint.ip, p, &mut s.merge, external_cpu, now_us);
            // 2. Learn the slow state: error ratio and ejection, service time and concurrency.
            let first_sample = endpoint.weight.is_none();
            let was_ejected = endpoint.ejection.ejected;
            endpoint.ejection.learn(&merged, first_sample, p, elapsed_us);
            endpoint.weight = endpoint.ejection.resume(was_ejected, endpoint.weight, now_us);
            endpoint.latency.learn(&merged, p, elapsed_us);
            // 3, CPU path: its rates over the window of a metrics-store CPU value.
            let metrics_cpu = endpoint.ip.is_some_and(|ip| external_cpu.contains_key(&ip));
            endpoint.rates.record(metrics_cpu, merged.qps, merged.eps, elapsed_us, p.cpu_window_us, now_us);
            s.by_cpu.push(capacity::by_cpu(&merged, &endpoint.rates, p));
            endpoint.decision = Some(EndpointDecision::merged(merged, endpoint));
        }
        let endpoints = cluster.endpoints.as_mut_slice();
        // 3. Raw capacity by the cluster's method, less the backlog.
        capacity::rate(endpoints, &s.by_cpu, p, &mut s.sorted, &mut s.raw, now_us);
        // 4. Targets, smoothed toward, then bounded and normalized.
        let times = smoothing::Times { elapsed_us, now_us, cluster_created_us: cluster.created_us };
        smoothing::smooth_toward_targets(endpoints, &s.raw, p, times, &mut s.sorted, &mut s.desired, &mut s.lo_hi);
        normalize::normalize(&s.desired, &s.lo_hi, &mut s.out);
        // 5. Publish.
        reply::publish(endpoints, &s.out);
        cluster.generation += 1;
        cluster.computed_at_us = Some(now_us);
    }

    /// A live incarnation of `name`: `incarnation`'s, or (None) the one that reported last.
    pub(super) fn reporter(&self, name: &str, incarnation: Option<u64>) -> Option<&ReporterRecord> {
        let list = self.reporters.get(name)?;
        match incarnation {
            Some(i) => list.iter().find(|r| r.incarnation == i),
            None => list.first(),
        }
    }

    /// What the last recompute decided, for all clusters or one (sorted by name).
    pub fn decisions(&self, cluster: Option<&str>) -> Vec<ClusterDecision> {
        let mut out: Vec<ClusterDecision> = self
            .clusters
            .iter()
            .filter(|(name, _)| cluster.is_none_or(|c| c == name.as_str()))
            .map(|(name, c)| ClusterDecision {
                name: name.clone(),
                generation: c.generation,
                computed_at_us: c.computed_at_us.unwrap_or(0),
                endpoints: {
                    let mut d: Vec<EndpointDecision> = c.endpoints.iter().filter_map(|e| e.decision.clone()).collect();
                    d.sort_by(|a, b| a.address.cmp(&b.address));
                    d
                },
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Drop reporters silent for longer than their ttl, what they said, endpoints nobody reports,
    /// empty clusters, and CPU values too old to be used.
    pub fn expire(&mut self, now_us: u64) {
        for name in self.cluster_names() {
            self.expire_cluster(&name, now_us);
        }
        self.expire_reporters(now_us);
    }

    /// Expire what was said about one cluster (and the cluster if nothing is left), so a caller can
    /// spread the work of `expire` like that of `recompute`.
    pub fn expire_cluster(&mut self, name: &str, now_us: u64) {
        let Some(cluster) = self.clusters.get_mut(name) else { return };
        let mut removed = 0usize;
        let moved = cluster.endpoints.retain(|e| {
            let before = e.obs.len();
            e.obs.retain(|_, o| o.expires_us > now_us);
            removed += before - e.obs.len();
            if e.obs.capacity() > 4 * e.obs.len().max(4) {
                e.obs.shrink_to_fit();
            }
            !e.obs.is_empty()
        });
        if moved {
            cluster.layout = self.next_layout;
            self.next_layout += 1;
        }
        if cluster.endpoints.is_empty() {
            self.clusters.remove(name);
        }
        self.observations -= removed.min(self.observations);
    }

    /// The rest of `expire`: silent reporters and old CPU values (O(reporters + CPU entries)).
    pub fn expire_reporters(&mut self, now_us: u64) {
        let mut count = 0usize;
        self.reporters.retain(|_, list| {
            list.retain(|r| r.expires_us > now_us);
            count += list.len();
            !list.is_empty()
        });
        self.reporter_count = count;
        let max_age = self.params.cpu_max_age_us;
        self.external_cpu.retain(|_, (_, at)| now_us.saturating_sub(*at) <= max_age);
        if self.reporters.capacity() > 4 * self.reporters.len().max(64) {
            self.reporters.shrink_to_fit();
        }
        if self.clusters.capacity() > 4 * self.clusters.len().max(64) {
            self.clusters.shrink_to_fit();
        }
        if self.external_cpu.capacity() > 4 * self.external_cpu.len().max(64) {
            self.external_cpu.shrink_to_fit();
        }
    }
}
