//! The weight book: takes reports in (within the caps), recomputes weights, expires what went
//! silent, and tells what it decided. The formulas live beside the steps that use them (see the
//! crate docs); this is the book's state and the order of the steps, each in its own module:
//! `admission`, `ingest`, `recompute`, `expiry`, `reply_plan`.

use crate::admission::{Holdings, Sender};
use crate::decision::{ClusterDecision, EndpointDecision};
use crate::evidence::{self, Attester, ClusterEvidence};
use crate::expiry;
use crate::fair_room::FairRoom;
use crate::ingest::{self, Entering};
use crate::memory::{REPORTER, ROUTE};
use crate::params::WeightParams;
use crate::recompute::{self, Attested, Scratch};
use crate::record::{ClusterRecord, PrincipalRecord, ReporterRecord, Totals};
use crate::rejection::Rejection;
use crate::reply_plan::{self, Asking, ReplyPlan};
use crate::route::Route;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use tailweight_wire::attest::Attestation;
use tailweight_wire::protocol;
use tailweight_wire::reply::Reply;
use tailweight_wire::report::Report;

mod room;

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
    params: WeightParams,
    clusters: HashMap<String, ClusterRecord>,
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
    /// What destinations attested, by cluster (`evidence.rs`; it bounds reports: `callers.rs`),
    /// and the earliest time one of its records may have expired (`room.rs`).
    evidence: HashMap<String, ClusterEvidence>,
    evidence_expires_us: u64,
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
            evidence: HashMap::new(),
            evidence_expires_us: u64::MAX,
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
    /// quota (`admission.rs`); a refused report changes nothing. O(endpoints in the report).
    pub fn ingest_as(&mut self, report: &Report, principal: &str, now_us: u64) -> Result<(), Rejection> {
        let known_principal = self.principal_ids.get(principal).copied();
        if let Err(refused) = self.admit(report, known_principal, principal, now_us) {
            self.retry_after_expiry(refused, now_us, |book| book.admit(report, known_principal, principal, now_us))?;
        }
        let principal = match known_principal {
            Some(id) => id,
            None => self.enter_principal(principal),
        };
        let held_before = self.principals.get(&principal).map_or(0, |r| r.bytes);
        let p = &self.params;
        let interval_us = p.interval_us(report.interval_ms);
        let expires_us = now_us.saturating_add(p.reporter_ttl_us(interval_us));
        let (max_seen_age_us, rate_new_counters) = (p.max_seen_age_us, p.rate_new_counters);
        let Entered { id, superseded, mut routes } =
            self.enter_incarnation(report, principal, interval_us, expires_us, now_us);
        let WeightBook { clusters, principals, observations, next_layout, bytes, .. } = self;
        let Some(record) = principals.get_mut(&principal) else { return Ok(()) };
        let (route_bytes, now_route_bytes) = (ROUTE.of(0) * routes.len(), ROUTE.of(0) * report.clusters.len());
        *bytes = (*bytes + now_route_bytes).saturating_sub(route_bytes);
        record.bytes = (record.bytes + now_route_bytes).saturating_sub(route_bytes);
        routes.resize_with(report.clusters.len(), Route::default);
        let who = Entering {
            id,
            principal,
            incarnation: report.incarnation,
            superseded: superseded.as_deref(),
            interval_us,
            expires_us,
            max_seen_age_us,
            rate_new_counters,
            now_us,
        };
        let mut totals = Totals { observations, bytes, next_layout };
        for (c, route) in report.clusters.iter().zip(routes.iter_mut()) {
            ingest::enter_cluster(clusters, c, route, record, &mut totals, &who);
        }
        if let Some(r) = self.reporters.get_mut(&report.reporter).and_then(|list| list.first_mut()) {
            r.routes = routes;
        }
        self.note_growth(principal, held_before, now_us);
        Ok(())
    }

    /// Check the caps and the principal's quotas before touching anything (`admission.rs`).
    fn admit(&self, report: &Report, principal: Option<u32>, name: &str, now_us: u64) -> Result<(), Rejection> {
        let holdings = Holdings {
            params: &self.params,
            clusters: &self.clusters,
            reporters: self.reporter_count,
            observations: self.observations,
            bytes: self.bytes,
            fair: FairRoom { params: &self.params, principals: &self.principals, now_us },
        };
        let sender = Sender {
            principal,
            record: principal.and_then(|id| self.principals.get(&id)),
            principal_name: name,
            known: principal.and_then(|id| self.reporter(&report.reporter, id, Some(report.incarnation))),
        };
        holdings.admit(report, &sender)
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

    /// `attest_as` the trusted principal.
    pub fn attest(&mut self, attestation: &Attestation, now_us: u64) -> Result<(), Rejection> {
        self.attest_as(TRUSTED_PRINCIPAL, attestation, now_us)
    }

    /// Enter one validated attestation from `principal`, which the caller found allowed to speak
    /// for its cluster (`evidence.rs`, `callers.rs`), charged to it within its quota. Err = refused
    /// by a cap or the quota, changing nothing. O(sources).
    pub fn attest_as(&mut self, principal: &str, attestation: &Attestation, now_us: u64) -> Result<(), Rejection> {
        let id = self.principal_id(principal);
        let check = |book: &WeightBook| {
            let attester = Attester::of(id, id.and_then(|id| book.principals.get(&id)), principal, &book.params);
            let fair = FairRoom { params: &book.params, principals: &book.principals, now_us };
            evidence::check(&book.evidence, attestation, &book.params, book.bytes, &attester, &fair)
        };
        if let Err(refused) = check(self) {
            self.retry_after_expiry(refused, now_us, check)?;
        }
        let id = id.unwrap_or_else(|| self.enter_principal(principal));
        let held_before = self.principals.get(&id).map_or(0, |r| r.bytes);
        let charged = evidence::enter(&mut self.evidence, attestation, &self.params, &mut self.bytes, id, now_us);
        charged.settle(&mut self.principals, id);
        self.evidence_expires_us = self.evidence_expires_us.min(charged.expires_us);
        self.note_growth(id, held_before, now_us);
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

    /// Recompute the weights of one cluster (no-op if unknown), in the steps of the crate docs
    /// (`recompute.rs`), and publish its reply view. O(observations of the cluster).
    pub fn recompute_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { params, clusters, external_cpu, scratch, evidence, principal_ids, .. } = self;
        if let Some(cluster) = clusters.get_mut(name) {
            let attested = Attested { evidence: evidence.get(name), ids: principal_ids };
            recompute::recompute_cluster(params, cluster, name, external_cpu, attested, scratch, now_us);
        }
    }

    /// A live incarnation of `name` reporting as `principal`: `incarnation`'s, or (None) the one
    /// that reported last.
    fn reporter(&self, name: &str, principal: u32, incarnation: Option<u64>) -> Option<&ReporterRecord> {
        let mut mine = self.reporters.get(name)?.iter().filter(|r| r.principal == principal);
        match incarnation {
            Some(i) => mine.find(|r| r.incarnation == i),
            None => mine.next(),
        }
    }

    /// The book's id of a principal, if it holds anything.
    fn principal_id(&self, principal: &str) -> Option<u32> {
        self.principal_ids.get(principal).copied()
    }

    /// A page of clusters by name: the first `limit` names after `after` (in byte order) with each
    /// one's endpoint count, and whether more names follow. Holds `limit` references, never a copy
    /// of every name (O(clusters x log limit)).
    pub fn cluster_page(&self, after: &str, limit: usize) -> (Vec<(&str, usize)>, bool) {
        let mut page = std::collections::BinaryHeap::with_capacity(limit.saturating_add(1).min(4_096));
        let mut more = false;
        for (name, cluster) in self.clusters.iter().filter(|(name, _)| name.as_str() > after) {
            page.push((name.as_str(), cluster.endpoints.len()));
            if page.len() > limit {
                page.pop();
                more = true;
            }
        }
        (page.into_sorted_vec(), more)
    }

    /// How many endpoints a cluster has (None: not tracked).
    pub fn cluster_endpoints(&self, name: &str) -> Option<usize> {
        self.clusters.get(name).map(|c| c.endpoints.len())
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

    /// Each tracked cluster's name and how many endpoints `decisions_of` would copy, borrowed:
    /// attested clusters first, then by principals holding them (most first), then by name.
    pub fn decided_counts<'a>(&'a self) -> Vec<(&'a str, usize)> {
        let key = |(name, c): (&'a String, &ClusterRecord)| {
            (!self.evidence.contains_key(name), usize::MAX - c.principals.len(), name.as_str(), c.decided())
        };
        let mut counts: Vec<_> = self.clusters.iter().map(key).collect();
        counts.sort_unstable();
        counts.into_iter().map(|(_, _, name, decided)| (name, decided)).collect()
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
    /// spread the work of `expire` like that of `recompute` (`expiry.rs`).
    pub fn expire_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { clusters, principals, observations, next_layout, bytes, .. } = self;
        expiry::expire_cluster(clusters, principals, &mut Totals { observations, bytes, next_layout }, name, now_us);
    }

    /// The rest of `expire`: silent reporters and attesters, principals holding nothing, and old
    /// CPU values (O(reporters + attested endpoints + principals + CPU entries)).
    pub fn expire_reporters(&mut self, now_us: u64) {
        self.evidence_expires_us = evidence::expire(&mut self.evidence, &mut self.bytes, &mut self.principals, now_us);
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
        expiry::expire_principals(principals, principal_ids, bytes);
        let endpoints = self.clusters.values().map(|c| c.endpoints.len()).sum();
        self.scratch.shrink(self.observations, endpoints);
        let max_age = self.params.cpu_max_age_us;
        self.external_cpu.retain(|_, (_, at)| now_us.saturating_sub(*at) <= max_age);
        expiry::shrink_sparse(&mut self.reporters);
        expiry::shrink_sparse(&mut self.clusters);
        expiry::shrink_sparse(&mut self.external_cpu);
        if expiry::shrink_sparse(&mut self.principals) {
            self.principal_ids.shrink_to_fit();
        }
    }

    /// The view of `clusters` as seen by `reporter` of the trusted principal (see `ingest`).
    pub fn reply<'a>(&self, reporter: &str, clusters: impl IntoIterator<Item = &'a str>, now_us: u64) -> Reply {
        self.reply_as(TRUSTED_PRINCIPAL, reporter, clusters, now_us)
    }

    /// The view of `clusters` as `reporter` of `principal` (its incarnation that reported last: call
    /// right after `ingest_as`) sees it; unknown clusters and endpoints not yet recomputed omitted.
    pub fn reply_as<'a>(
        &self,
        principal: &str,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
    ) -> Reply {
        reply_plan::typed(&self.clusters, &self.asking(principal, reporter, now_us), clusters)
    }

    /// What a reply to `reporter` of `principal` about `clusters` needs (call right after
    /// `ingest_as`, under the same lock): the known clusters' views, in order, within `max_endpoints`
    /// endpoints (truncated where too large), and the asker's own in-flight counts (`reply_plan.rs`).
    pub fn reply_plan<'a>(
        &self,
        principal: &str,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
        max_endpoints: usize,
    ) -> ReplyPlan {
        reply_plan::plan(&self.clusters, &self.asking(principal, reporter, now_us), clusters, max_endpoints)
    }

    /// A reply to the incarnation of `reporter` of `principal` that reported last, at `now_us`.
    fn asking(&self, principal: &str, reporter: &str, now_us: u64) -> Asking<'_> {
        let last = self.principal_id(principal).and_then(|id| self.reporter(reporter, id, None));
        Asking::new(&self.params, last, now_us)
    }
}
