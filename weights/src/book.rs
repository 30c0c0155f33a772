//! The weight book: takes reports in (within the caps), recomputes weights, expires what went
//! silent, and tells what it decided. The formulas live beside the steps that use them (see the
//! module docs of `weights`).

use crate::capacity;
use crate::consensus::{self, ConsensusScratch, PrincipalView};
use crate::decision::{ClusterDecision, EndpointDecision};
use crate::memory::{CLUSTER, ENDPOINT, OBSERVATION, PRINCIPAL, REPORTER, ROUTE};
use crate::merge::{self, merge_reporters, MergeScratch, Merged};
use crate::normalize;
use crate::observation::Observation;
use crate::params::WeightParams;
use crate::record::{ClusterRecord, PrincipalRecord, ReporterRecord};
use crate::reply;
use crate::route::Route;
use crate::smoothing;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use tailweight_wire::protocol;
use tailweight_wire::report::Report;

/// Why a report was refused (countable; see `as_str`). A refused report changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    TooManyReporters,
    TooManyClusters,
    TooManyEndpoints,
    TooManyObservations,
    /// The book would hold more than `max_bytes` (see `memory.rs`).
    MemoryBudget,
    /// The principal's quota (`principal_share` of a cap) of reporters, clusters, endpoints of one
    /// cluster, or bytes (what its reporters and their observations cost).
    PrincipalReporters,
    PrincipalClusters,
    PrincipalEndpoints,
    PrincipalMemory,
}

impl Rejection {
    pub const ALL: [Rejection; 9] = [
        Rejection::TooManyReporters,
        Rejection::TooManyClusters,
        Rejection::TooManyEndpoints,
        Rejection::TooManyObservations,
        Rejection::MemoryBudget,
        Rejection::PrincipalReporters,
        Rejection::PrincipalClusters,
        Rejection::PrincipalEndpoints,
        Rejection::PrincipalMemory,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::TooManyReporters => "too_many_reporters",
            Rejection::TooManyClusters => "too_many_clusters",
            Rejection::TooManyEndpoints => "too_many_endpoints",
            Rejection::TooManyObservations => "too_many_observations",
            Rejection::MemoryBudget => "memory_budget",
            Rejection::PrincipalReporters => "principal_reporters",
            Rejection::PrincipalClusters => "principal_clusters",
            Rejection::PrincipalEndpoints => "principal_endpoints",
            Rejection::PrincipalMemory => "principal_memory",
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
            Rejection::MemoryBudget => "the memory budget is spent",
            Rejection::PrincipalReporters => "this identity's share of the reporter limit is reached",
            Rejection::PrincipalClusters => "this identity's share of the cluster limit is reached",
            Rejection::PrincipalEndpoints => "this identity names as many endpoints of the cluster as one may",
            Rejection::PrincipalMemory => "this identity's share of the memory budget is spent",
        };
        f.write_str(what)
    }
}

impl std::error::Error for Rejection {}

/// Sizes of the book, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub principals: usize,
    pub reporters: usize,
    pub clusters: usize,
    pub endpoints: usize,
    pub observations: usize,
    pub cpu_entries: usize,
    /// What the book holds, as `memory.rs` counts it.
    pub bytes: usize,
}

/// Reused buffers: a recompute allocates nothing in steady state.
#[derive(Debug, Default)]
struct Scratch {
    merge: MergeScratch,
    consensus: ConsensusScratch,
    /// Live observation ids of one endpoint, by principal (then the map's order).
    live: Vec<(u32, u64)>,
    ids: Vec<u64>,
    views: Vec<PrincipalView>,
    merged: Vec<Merged>,
    /// Per endpoint: whether it counts in the cluster's normalisation (`consensus::supported`).
    counted: Vec<bool>,
    /// Per endpoint of the cluster being recomputed: capacity by CPU, raw capacity, smoothed
    /// weight and its bounds, published weight.
    by_cpu: Vec<Option<f64>>,
    raw: Vec<Option<f64>>,
    desired: Vec<f64>,
    lo_hi: Vec<(f64, f64)>,
    out: Vec<f64>,
    sorted: Vec<f64>,
}

impl Scratch {
    /// Give back what the buffers hold beyond twice what the book could need now (`observations`
    /// and `endpoints` in all): their cost is counted per unit the book holds (`memory.rs`).
    fn shrink(&mut self, observations: usize, endpoints: usize) {
        fn fit<T>(v: &mut Vec<T>, need: usize) {
            if v.capacity() > 2 * need.max(64) {
                v.shrink_to(need.max(64));
            }
        }
        fit(&mut self.live, observations);
        fit(&mut self.ids, observations);
        fit(&mut self.views, observations);
        fit(&mut self.merged, endpoints);
        fit(&mut self.counted, endpoints);
        fit(&mut self.by_cpu, endpoints);
        fit(&mut self.raw, endpoints);
        fit(&mut self.desired, endpoints);
        fit(&mut self.lo_hi, endpoints);
        fit(&mut self.out, endpoints);
        fit(&mut self.sorted, endpoints);
    }
}

/// A report's reporter as `WeightBook::enter_incarnation` found or entered it.
struct Entered {
    id: u64,
    /// The name's other incarnations (of the same principal), by id, with their cut expiry times.
    superseded: Option<Vec<(u64, u64)>>,
    routes: Vec<Route>,
}

/// The principal every report of [`WeightBook::ingest`] comes from.
pub const TRUSTED_PRINCIPAL: &str = "";

#[derive(Debug)]
pub struct WeightBook {
    pub(super) params: WeightParams,
    pub(super) clusters: HashMap<String, ClusterRecord>,
    /// By name; each name's live incarnations, of any principal, the one that reported last first
    /// (usually just one: more when a reporter restarted within its ttl, when several processes
    /// share a name, or when several principals use it).
    reporters: HashMap<String, Vec<ReporterRecord>>,
    /// Live incarnations in all (what `max_reporters` bounds).
    reporter_count: usize,
    next_reporter_id: u64,
    next_layout: u64,
    /// By the book's id, and the ids by name.
    principals: HashMap<u32, PrincipalRecord>,
    principal_ids: HashMap<String, u32>,
    next_principal: u32,
    external_cpu: HashMap<IpAddr, (f64, u64)>,
    observations: usize,
    /// See `memory.rs`.
    bytes: usize,
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
            principals: HashMap::new(),
            principal_ids: HashMap::new(),
            next_principal: 0,
            external_cpu: HashMap::new(),
            observations: 0,
            bytes: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn params(&self) -> &WeightParams {
        &self.params
    }

    pub fn counts(&self) -> Counts {
        Counts {
            principals: self.principals.len(),
            reporters: self.reporter_count,
            clusters: self.clusters.len(),
            endpoints: self.clusters.values().map(|c| c.endpoints.len()).sum(),
            observations: self.observations,
            cpu_entries: self.external_cpu.len(),
            bytes: self.bytes,
        }
    }

    /// [`WeightBook::ingest_as`] with every report from one trusted principal (the simulator, and
    /// setups that trust report bodies wholesale): reporters then bound each other only as
    /// reporters (`merge.rs`).
    pub fn ingest(&mut self, report: &Report, now_us: u64) -> Result<(), Rejection> {
        self.ingest_as(report, TRUSTED_PRINCIPAL, now_us)
    }

    /// Merge one already-validated report received at `now_us` from `principal`, the identity the
    /// caller vouches for (a mesh identity; the report's own `reporter` where bodies are trusted).
    /// A principal is one voice however many reporter names and incarnations it uses
    /// (`consensus.rs`), and holds at most `principal_share` of each cap. Err = refused by a cap or
    /// quota; a refused report changes nothing. O(endpoints in the report).
    pub fn ingest_as(&mut self, report: &Report, principal: &str, now_us: u64) -> Result<(), Rejection> {
        let known_principal = self.principal_ids.get(principal).copied();
        self.admit(report, known_principal, principal)?;
        let principal = match known_principal {
            Some(id) => id,
            None => self.enter_principal(principal),
        };
        let p = &self.params;
        let interval_us = p.interval_us(report.interval_ms);
        let ttl_us = ((interval_us as f64 * p.reporter_ttl_intervals) as u64).max(p.min_reporter_ttl_us);
        let expires_us = now_us.saturating_add(ttl_us);
        let Entered { id, superseded, mut routes } =
            self.enter_incarnation(report, principal, interval_us, expires_us, now_us);
        let WeightBook { clusters, principals, observations, next_layout, bytes, .. } = self;
        let Some(record) = principals.get_mut(&principal) else { return Ok(()) };
        let (route_bytes, now_route_bytes) = (ROUTE.of(0) * routes.len(), ROUTE.of(0) * report.clusters.len());
        *bytes = (*bytes + now_route_bytes).saturating_sub(route_bytes);
        record.bytes = (record.bytes + now_route_bytes).saturating_sub(route_bytes);
        routes.resize_with(report.clusters.len(), Route::default);
        for (c, route) in report.clusters.iter().zip(routes.iter_mut()) {
            let cluster = match clusters.get_mut(&c.name) {
                Some(cluster) => cluster,
                None => {
                    let layout = *next_layout;
                    *next_layout += 1;
                    *bytes += CLUSTER.of(c.name.len());
                    record.bytes += CLUSTER.of(c.name.len());
                    clusters.entry(c.name.clone()).or_insert(ClusterRecord {
                        layout,
                        created_us: now_us,
                        creator: principal,
                        ..ClusterRecord::default()
                    })
                }
            };
            let mut stale = route.index.len() != c.endpoints.len();
            if !stale && route.layout == cluster.layout {
                cluster.endpoints.warm(&route.index, id);
            }
            let (mut added, mut new_endpoints, mut added_bytes) = (0usize, 0usize, 0usize);
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
                            if cluster.endpoints.get(&e.address).is_none() {
                                *bytes += ENDPOINT.of(e.address.len());
                                record.bytes += ENDPOINT.of(e.address.len());
                            }
                            cluster.endpoints.get_or_insert(&e.address, principal, now_us)
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
                        endpoint
                            .obs
                            .insert(id, Observation::first(e, report.incarnation, principal, expires_us, now_us));
                        added += 1;
                        added_bytes += OBSERVATION.of(e.address.len());
                        if endpoint.add_principal(principal) {
                            new_endpoints += 1;
                        }
                    }
                }
            }
            if added > 0 {
                let held = cluster.principals.entry(principal).or_default();
                if held.observations == 0 {
                    record.clusters += 1;
                }
                held.observations += added;
                held.endpoints += new_endpoints;
                record.observations += added;
                record.bytes += added_bytes;
                *observations += added;
                *bytes += added_bytes;
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

    /// A new principal's id (ids are reused only once nothing in the book refers to them).
    fn enter_principal(&mut self, name: &str) -> u32 {
        while self.principals.contains_key(&self.next_principal) {
            self.next_principal = self.next_principal.wrapping_add(1);
        }
        let id = self.next_principal;
        self.next_principal = self.next_principal.wrapping_add(1);
        self.principals.insert(id, PrincipalRecord::default());
        self.principal_ids.insert(name.to_string(), id);
        self.bytes += PRINCIPAL.of(name.len());
        id
    }

    /// The book's id of the report's (principal, name, incarnation), entered if new and made the
    /// name's first (the one that reported last), with `interval_us` and `expires_us` as of this
    /// report; for a new incarnation of a name the principal already uses, those other
    /// incarnations' ids and their cut ttls; and its routes, taken out (`ingest_as` puts them back).
    ///
    /// A reporter is a (principal, name, incarnation): a new incarnation is a restart, or another
    /// process under the same name. Its counters are its own either way (taking differences across
    /// processes would reset every window). The principal's other incarnations of the name stop
    /// counting after one more of their intervals unless they report again: a restarted reporter's
    /// old self fades once its successor has a window, while a live twin renews itself with its
    /// next report. Another principal using the name changes nothing for this one.
    fn enter_incarnation(
        &mut self,
        report: &Report,
        principal: u32,
        interval_us: u64,
        expires_us: u64,
        now_us: u64,
    ) -> Entered {
        let incarnations = match self.reporters.get_mut(&report.reporter) {
            Some(list) => list,
            None => self.reporters.entry(report.reporter.clone()).or_default(),
        };
        let mut superseded = None;
        let mine = |r: &ReporterRecord| r.principal == principal;
        let id = match incarnations.iter().position(|r| mine(r) && r.incarnation == report.incarnation) {
            Some(i) => {
                incarnations.swap(0, i);
                let r = &mut incarnations[0];
                (r.interval_us, r.expires_us) = (interval_us, expires_us);
                r.id
            }
            None => {
                let id = self.next_reporter_id;
                self.next_reporter_id += 1;
                if incarnations.iter().any(mine) {
                    for r in incarnations.iter_mut().filter(|r| mine(r)) {
                        r.expires_us = r.expires_us.min(now_us.saturating_add(r.interval_us));
                    }
                    superseded =
                        Some(incarnations.iter().filter(|r| mine(r)).map(|r| (r.id, r.expires_us)).collect::<Vec<_>>());
                }
                incarnations.push(ReporterRecord {
                    id,
                    principal,
                    incarnation: report.incarnation,
                    interval_us,
                    expires_us,
                    routes: Vec::new(),
                });
                let last = incarnations.len() - 1;
                incarnations.swap(0, last);
                self.reporter_count += 1;
                let bytes = REPORTER.of(report.reporter.len());
                self.bytes += bytes;
                if let Some(record) = self.principals.get_mut(&principal) {
                    record.reporters += 1;
                    record.bytes += bytes;
                }
                id
            }
        };
        Entered { id, superseded, routes: std::mem::take(&mut incarnations[0].routes) }
    }

    /// Check the caps and the principal's quotas before touching anything. Exact counting only
    /// when a cap or quota is within reach.
    fn admit(&self, report: &Report, principal: Option<u32>, principal_name: &str) -> Result<(), Rejection> {
        let p = &self.params;
        let record = principal.and_then(|id| self.principals.get(&id));
        let held = |f: fn(&PrincipalRecord) -> usize| record.map_or(0, f);
        let known = principal.and_then(|id| self.reporter(&report.reporter, id, Some(report.incarnation)));
        if known.is_none() {
            if self.reporter_count >= p.max_reporters {
                return Err(Rejection::TooManyReporters);
            }
            if held(|r| r.reporters) >= p.quota(p.max_reporters) {
                return Err(Rejection::PrincipalReporters);
            }
        }
        let in_report: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
        if self.clusters.len() + report.clusters.len() > p.max_clusters {
            let new = report.clusters.iter().filter(|c| !self.clusters.contains_key(&c.name)).count();
            if self.clusters.len() + new > p.max_clusters {
                return Err(Rejection::TooManyClusters);
            }
        }
        let cluster_quota = p.quota(p.max_clusters);
        let held_in = |cluster: Option<&ClusterRecord>| {
            cluster.and_then(|cl| principal.and_then(|id| cl.principals.get(&id))).copied().unwrap_or_default()
        };
        if held(|r| r.clusters) + report.clusters.len() > cluster_quota {
            let new = report.clusters.iter().filter(|c| held_in(self.clusters.get(&c.name)).observations == 0).count();
            if held(|r| r.clusters) + new > cluster_quota {
                return Err(Rejection::PrincipalClusters);
            }
        }
        let (endpoint_quota, endpoint_room) = (p.max_endpoints_per_cluster, p.cluster_endpoint_room());
        // Memory: an upper bound first (everything in the report new), exact only near a limit.
        let new_routes = report.clusters.len().saturating_sub(known.map_or(0, |r| r.routes.len()));
        let reporter_bytes = ROUTE.of(0) * new_routes
            + if known.is_none() { REPORTER.of(report.reporter.len()) } else { 0 }
            + if principal.is_none() { PRINCIPAL.of(principal_name.len()) } else { 0 };
        let endpoints_bytes: usize =
            report.clusters.iter().flat_map(|c| &c.endpoints).map(|e| OBSERVATION.of(e.address.len())).sum();
        let upper = reporter_bytes
            + endpoints_bytes
            + report.clusters.iter().map(|c| CLUSTER.of(c.name.len())).sum::<usize>()
            + report.clusters.iter().flat_map(|c| &c.endpoints).map(|e| ENDPOINT.of(e.address.len())).sum::<usize>();
        let bytes_quota = p.quota(p.max_bytes);
        let near_budget = self.bytes + upper > p.max_bytes;
        let near_bytes_quota = held(|r| r.bytes) + upper > bytes_quota;
        let near_obs_cap = self.observations + in_report > p.max_observations;
        let (mut new_obs, mut new_bytes, mut new_mine) = (0usize, reporter_bytes, reporter_bytes);
        for c in &report.clusters {
            let cluster = self.clusters.get(&c.name);
            let existing = cluster.map_or(0, |cl| cl.endpoints.len());
            let mine = held_in(cluster).endpoints;
            if existing + c.endpoints.len() <= endpoint_room
                && mine + c.endpoints.len() <= endpoint_quota
                && !near_obs_cap
                && !near_budget
                && !near_bytes_quota
            {
                continue;
            }
            if cluster.is_none() {
                new_bytes += CLUSTER.of(c.name.len());
                new_mine += CLUSTER.of(c.name.len());
            }
            let (mut new_endpoints, mut new_to_me, mut new_here) = (0usize, 0usize, 0usize);
            for e in &c.endpoints {
                let observation = OBSERVATION.of(e.address.len());
                match cluster.and_then(|cl| cl.endpoints.get(&e.address)) {
                    None => {
                        new_endpoints += 1;
                        new_to_me += 1;
                        new_here += 1;
                        new_bytes += ENDPOINT.of(e.address.len()) + observation;
                        new_mine += ENDPOINT.of(e.address.len()) + observation;
                    }
                    Some(endpoint) => {
                        if known.is_none_or(|r| !endpoint.obs.contains_key(&r.id)) {
                            new_here += 1;
                            new_bytes += observation;
                            new_mine += observation;
                        }
                        if principal.is_none_or(|id| !endpoint.held_by(id)) {
                            new_to_me += 1;
                        }
                    }
                }
            }
            if existing + new_endpoints > endpoint_room {
                return Err(Rejection::TooManyEndpoints);
            }
            if mine + new_to_me > endpoint_quota {
                return Err(Rejection::PrincipalEndpoints);
            }
            new_obs += new_here;
        }
        if near_obs_cap && self.observations + new_obs > p.max_observations {
            return Err(Rejection::TooManyObservations);
        }
        if near_budget && self.bytes + new_bytes > p.max_bytes {
            return Err(Rejection::MemoryBudget);
        }
        if near_bytes_quota && held(|r| r.bytes) + new_mine > bytes_quota {
            return Err(Rejection::PrincipalMemory);
        }
        Ok(())
    }

    /// CPU utilisation of an endpoint IP from the metrics store (applies to every port of that IP).
    /// Non-finite or negative values are ignored; new IPs beyond `max_cpu_entries` are ignored.
    pub fn set_external_cpu(&mut self, ip: IpAddr, cpu: f64, now_us: u64) {
        if !cpu.is_finite() || !(0.0..=protocol::MAX_CPU).contains(&cpu) {
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

    /// Recompute the weights of one cluster (no-op if unknown), in the steps of the module docs,
    /// and publish its reply view. O(observations of the cluster).
    pub fn recompute_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { params: p, clusters, external_cpu, scratch: s, .. } = self;
        let Some(cluster) = clusters.get_mut(name) else { return };
        let elapsed_us = cluster.elapsed_us(now_us);
        // 1. Merge what the live reporters say: within each principal, then across principals.
        let endpoints = cluster.endpoints.as_mut_slice();
        let several_principals = cluster.principals.len() > 1;
        s.merged.clear();
        s.views.clear();
        for (at, endpoint) in endpoints.iter_mut().enumerate() {
            s.live.clear();
            s.live.extend(endpoint.obs.iter().filter(|(_, o)| o.live(now_us)).map(|(id, o)| (o.principal, *id)));
            if !several_principals {
                s.ids.clear();
                s.ids.extend(s.live.iter().map(|(_, id)| *id));
                let merged = merge_reporters(&endpoint.obs, &s.ids, p, &mut s.merge, now_us);
                for (id, counted) in s.ids.iter().zip(&s.merge.inflight) {
                    if let Some(o) = endpoint.obs.get_mut(id) {
                        o.counted_inflight = *counted;
                    }
                }
                s.merged.push(merged);
                continue;
            }
            s.live.sort_by_key(|(principal, _)| *principal);
            for run in s.live.chunk_by(|a, b| a.0 == b.0) {
                s.ids.clear();
                s.ids.extend(run.iter().map(|(_, id)| *id));
                let merged = merge_reporters(&endpoint.obs, &s.ids, p, &mut s.merge, now_us);
                for (id, counted) in s.ids.iter().zip(&s.merge.inflight) {
                    if let Some(o) = endpoint.obs.get_mut(id) {
                        o.counted_inflight = *counted;
                    }
                }
                s.views.push(PrincipalView { endpoint: at, principal: run[0].0, merged, inflight_factor: 1.0 });
            }
        }
        s.counted.clear();
        s.counted.resize(endpoints.len(), true);
        if several_principals {
            consensus::supported(&s.views, endpoints.len(), cluster.principals.len(), &mut s.counted);
            consensus::combine(&mut s.views, endpoints.len(), p, elapsed_us, &mut s.consensus, &mut s.merged);
            for v in &s.views {
                for o in endpoints[v.endpoint].obs.values_mut().filter(|o| o.principal == v.principal) {
                    o.counted_inflight *= v.inflight_factor;
                }
            }
        }
        s.by_cpu.clear();
        for ((endpoint, merged), counted) in endpoints.iter_mut().zip(s.merged.iter_mut()).zip(&s.counted) {
            merge::with_metrics_cpu(merged, endpoint.ip, external_cpu, p, now_us);
            let merged = *merged;
            // 2. Learn the slow state: error ratio and ejection, service time and concurrency.
            let first_sample = endpoint.weight.is_none();
            let was_ejected = endpoint.ejection.ejected;
            endpoint.ejection.learn(&merged, first_sample, p, elapsed_us);
            endpoint.weight = endpoint.ejection.resume(was_ejected, endpoint.weight, p, now_us);
            endpoint.latency.learn(&merged, p, elapsed_us);
            // 3, CPU path: its rates over the window of a metrics-store CPU value.
            let metrics_cpu = endpoint.ip.is_some_and(|ip| external_cpu.contains_key(&ip));
            endpoint.rates.record(metrics_cpu, merged.qps, merged.eps, elapsed_us, p.cpu_window_us, now_us);
            s.by_cpu.push(capacity::by_cpu(&merged, &endpoint.rates, p));
            let mut decision = EndpointDecision { counted: *counted, ..EndpointDecision::merged(merged, endpoint) };
            decision.view_inflight = p.view_inflight.of(&decision);
            endpoint.decision = Some(decision);
        }
        // 3. Raw capacity by the cluster's method, less the backlog.
        capacity::rate(endpoints, &s.by_cpu, &s.counted, p, &mut s.sorted, &mut s.raw, now_us);
        // 4. Targets, smoothed toward, then bounded and normalized.
        let times = smoothing::Times { elapsed_us, now_us, cluster_created_us: cluster.created_us };
        smoothing::smooth_toward_targets(
            endpoints,
            &s.raw,
            &s.counted,
            p,
            times,
            &mut s.sorted,
            &mut s.desired,
            &mut s.lo_hi,
        );
        normalize::normalize(&s.desired, &s.lo_hi, &s.counted, &mut s.out);
        // 5. Publish.
        reply::publish(endpoints, &s.out);
        cluster.generation += 1;
        cluster.computed_at_us = Some(now_us);
        cluster.published = Some(std::sync::Arc::new(reply::PublishedCluster::of(name, cluster)));
    }

    /// A live incarnation of `name` reporting as `principal`: `incarnation`'s, or (None) the one
    /// that reported last.
    pub(super) fn reporter(&self, name: &str, principal: u32, incarnation: Option<u64>) -> Option<&ReporterRecord> {
        let mut mine = self.reporters.get(name)?.iter().filter(|r| r.principal == principal);
        match incarnation {
            Some(i) => mine.find(|r| r.incarnation == i),
            None => mine.next(),
        }
    }

    /// The book's id of a principal, if it holds anything.
    pub(super) fn principal_id(&self, principal: &str) -> Option<u32> {
        self.principal_ids.get(principal).copied()
    }

    /// What the last recompute decided, for all clusters or one (sorted by name).
    pub fn decisions(&self, cluster: Option<&str>) -> Vec<ClusterDecision> {
        let mut out: Vec<ClusterDecision> = match cluster {
            Some(name) => self.decisions_of([name]),
            None => self.clusters.keys().filter_map(|name| self.decision_of(name)).collect(),
        };
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// What the last recompute decided for the named clusters that are tracked, in the order given.
    pub fn decisions_of<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<ClusterDecision> {
        names.into_iter().filter_map(|name| self.decision_of(name)).collect()
    }

    fn decision_of(&self, name: &str) -> Option<ClusterDecision> {
        let c = self.clusters.get(name)?;
        let mut endpoints: Vec<EndpointDecision> = c.endpoints.iter().filter_map(|e| e.decision.clone()).collect();
        endpoints.sort_by(|a, b| a.address.cmp(&b.address));
        Some(ClusterDecision {
            name: name.to_string(),
            generation: c.generation,
            computed_at_us: c.computed_at_us.unwrap_or(0),
            endpoints,
        })
    }

    /// Drop reporters silent for longer than their ttl, what they said, endpoints nobody reports,
    /// empty clusters, principals holding nothing, and CPU values too old to be used.
    pub fn expire(&mut self, now_us: u64) {
        for name in self.cluster_names() {
            self.expire_cluster(&name, now_us);
        }
        self.expire_reporters(now_us);
    }

    /// Expire what was said about one cluster (and the cluster if nothing is left), so a caller can
    /// spread the work of `expire` like that of `recompute`.
    pub fn expire_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { clusters, principals, observations, next_layout, bytes, .. } = self;
        let Some(cluster) = clusters.get_mut(name) else { return };
        let (mut removed, mut freed) = (0usize, 0usize);
        let held = &mut cluster.principals;
        let moved = cluster.endpoints.retain(|e| {
            let (obs, endpoint_principals) = (&mut e.obs, &mut e.principals);
            let observation = OBSERVATION.of(e.address.len());
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
            cluster.layout = *next_layout;
            *next_layout += 1;
        }
        if cluster.endpoints.is_empty() {
            if let Some(r) = principals.get_mut(&cluster.creator) {
                r.bytes = r.bytes.saturating_sub(CLUSTER.of(name.len()));
            }
            clusters.remove(name);
            freed += CLUSTER.of(name.len());
        }
        *observations -= removed.min(*observations);
        *bytes = bytes.saturating_sub(freed);
    }

    /// The rest of `expire`: silent reporters, principals holding nothing, and old CPU values
    /// (O(reporters + principals + CPU entries)).
    pub fn expire_reporters(&mut self, now_us: u64) {
        let mut count = 0usize;
        for r in self.principals.values_mut() {
            r.reporters = 0;
        }
        let WeightBook { principals, principal_ids, bytes, .. } = self;
        self.reporters.retain(|name, list| {
            list.retain(|r| {
                let keep = r.expires_us > now_us;
                if !keep {
                    let freed = REPORTER.of(name.len()) + ROUTE.of(0) * r.routes.len();
                    *bytes = bytes.saturating_sub(freed);
                    if let Some(p) = principals.get_mut(&r.principal) {
                        p.bytes = p.bytes.saturating_sub(freed);
                    }
                }
                keep
            });
            for r in list.iter() {
                if let Some(p) = principals.get_mut(&r.principal) {
                    p.reporters += 1;
                }
            }
            count += list.len();
            !list.is_empty()
        });
        self.reporter_count = count;
        // Until what it entered expires, a principal stays (its id is not reused meanwhile).
        principals.retain(|_, r| r.reporters > 0 || r.observations > 0 || r.clusters > 0 || r.bytes > 0);
        principal_ids.retain(|name, id| {
            let keep = principals.contains_key(id);
            if !keep {
                *bytes = bytes.saturating_sub(PRINCIPAL.of(name.len()));
            }
            keep
        });
        let endpoints = self.clusters.values().map(|c| c.endpoints.len()).sum();
        self.scratch.shrink(self.observations, endpoints);
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
        if self.principals.capacity() > 4 * self.principals.len().max(64) {
            self.principals.shrink_to_fit();
            self.principal_ids.shrink_to_fit();
        }
    }
}
