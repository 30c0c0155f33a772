//! Admission: whether a report fits the book's caps and its principal's quotas, checked before
//! anything is touched (a refused report changes nothing). Counting is exact only when a cap or a
//! quota is within reach; otherwise an upper bound (everything in the report new) clears it.

use crate::fair_room::FairRoom;
use crate::memory::{CLUSTER, ENDPOINT, OBSERVATION, PRINCIPAL, REPORTER, ROUTE};
use crate::params::WeightParams;
use crate::record::{ClusterRecord, Held, PrincipalRecord, ReporterRecord};
use crate::rejection::Rejection;
use std::collections::HashMap;
use tailweight_wire::report::{ClusterReport, Report};

/// What the book holds, as far as admitting a report needs to know.
pub(crate) struct Holdings<'a> {
    pub params: &'a WeightParams,
    pub clusters: &'a HashMap<String, ClusterRecord>,
    /// Live reporter incarnations, observations and bytes in all.
    pub reporters: usize,
    pub observations: usize,
    pub bytes: usize,
    /// The room each principal may fill (`fair_room.rs`).
    pub fair: FairRoom<'a>,
}

/// Who sends the report, as far as the book knows them.
pub(crate) struct Sender<'a> {
    /// The principal's id and what it holds (None: new to the book), and its name.
    pub principal: Option<u32>,
    pub record: Option<&'a PrincipalRecord>,
    pub principal_name: &'a str,
    /// The report's incarnation, if the book holds it.
    pub known: Option<&'a ReporterRecord>,
}

impl Sender<'_> {
    fn held(&self, f: fn(&PrincipalRecord) -> usize) -> usize {
        self.record.map_or(0, f)
    }

    /// What the principal holds in `cluster`.
    fn held_in(&self, cluster: Option<&ClusterRecord>) -> Held {
        cluster.and_then(|cl| self.principal.and_then(|id| cl.principals.get(&id))).copied().unwrap_or_default()
    }
}

/// What a report adds to one cluster.
#[derive(Default)]
struct Added {
    /// Endpoints new to the cluster, and new to the principal there.
    endpoints: usize,
    to_principal: usize,
    /// Observations new to the book, and the bytes of all that is new.
    observations: usize,
    bytes: usize,
}

impl Holdings<'_> {
    /// The caps, then the principal's quotas, in the order of `Rejection`'s first refusal.
    pub fn admit(&self, report: &Report, sender: &Sender) -> Result<(), Rejection> {
        let p = self.params;
        if sender.known.is_none() {
            if self.reporters >= p.max_reporters {
                return Err(Rejection::TooManyReporters);
            }
            if sender.held(|r| r.reporters) >= p.quota(p.max_reporters) {
                return Err(Rejection::PrincipalReporters);
            }
        }
        self.check_clusters(report, sender)?;
        self.check_endpoints_and_bytes(report, sender)
    }

    fn check_clusters(&self, report: &Report, sender: &Sender) -> Result<(), Rejection> {
        let p = self.params;
        if self.clusters.len() + report.clusters.len() > p.max_clusters {
            let new = report.clusters.iter().filter(|c| !self.clusters.contains_key(&c.name)).count();
            if self.clusters.len() + new > p.max_clusters {
                return Err(Rejection::TooManyClusters);
            }
        }
        let cluster_quota = p.quota(p.max_clusters);
        if sender.held(|r| r.clusters) + report.clusters.len() > cluster_quota {
            let new =
                report.clusters.iter().filter(|c| sender.held_in(self.clusters.get(&c.name)).observations == 0).count();
            if sender.held(|r| r.clusters) + new > cluster_quota {
                return Err(Rejection::PrincipalClusters);
            }
        }
        Ok(())
    }

    /// Each cluster's endpoints, then the observations and the bytes, in all and the principal's.
    /// Everything new the report brings is the principal's, so the book's new bytes are its too.
    fn check_endpoints_and_bytes(&self, report: &Report, sender: &Sender) -> Result<(), Rejection> {
        let p = self.params;
        let (endpoint_quota, endpoint_room) = (p.max_endpoints_per_cluster, p.cluster_endpoint_room());
        let in_report: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
        let reporter_bytes = reporter_bytes(report, sender);
        let endpoints = || report.clusters.iter().flat_map(|c| &c.endpoints);
        let upper = reporter_bytes
            + endpoints().map(|e| OBSERVATION.of(e.address.len())).sum::<usize>()
            + report.clusters.iter().map(|c| CLUSTER.of(c.name.len())).sum::<usize>()
            + endpoints().map(|e| ENDPOINT.of(e.address.len())).sum::<usize>();
        let bytes_quota = p.quota(p.max_bytes);
        let held = sender.held(|r| r.bytes);
        let near_budget = self.bytes + upper > self.fair.room_for(sender.principal, held + upper);
        let near_bytes_quota = sender.held(|r| r.bytes) + upper > bytes_quota;
        let near_obs_cap = self.observations + in_report > p.max_observations;
        let (mut new_obs, mut new_bytes) = (0usize, reporter_bytes);
        for c in &report.clusters {
            let cluster = self.clusters.get(&c.name);
            let existing = cluster.map_or(0, |cl| cl.endpoints.len());
            let mine = sender.held_in(cluster).endpoints;
            if existing + c.endpoints.len() <= endpoint_room
                && mine + c.endpoints.len() <= endpoint_quota
                && !near_obs_cap
                && !near_budget
                && !near_bytes_quota
            {
                continue;
            }
            let added = added_in(cluster, c, sender);
            if existing + added.endpoints > endpoint_room {
                return Err(Rejection::TooManyEndpoints);
            }
            if mine + added.to_principal > endpoint_quota {
                return Err(Rejection::PrincipalEndpoints);
            }
            new_obs += added.observations;
            new_bytes += added.bytes;
        }
        if near_obs_cap && self.observations + new_obs > p.max_observations {
            return Err(Rejection::TooManyObservations);
        }
        // What it already holds, renewed, needs no room; anything new, the room its holdings leave.
        if near_budget
            && new_bytes > 0
            && self.bytes + new_bytes > self.fair.room_for(sender.principal, held + new_bytes)
        {
            return Err(Rejection::MemoryBudget);
        }
        if near_bytes_quota && sender.held(|r| r.bytes) + new_bytes > bytes_quota {
            return Err(Rejection::PrincipalMemory);
        }
        Ok(())
    }
}

/// What the report's reporter and principal cost if new, and its routes beyond those it has.
fn reporter_bytes(report: &Report, sender: &Sender) -> usize {
    let new_routes = report.clusters.len().saturating_sub(sender.known.map_or(0, |r| r.routes.len()));
    ROUTE.of(0) * new_routes
        + if sender.known.is_none() { REPORTER.of(report.reporter.len()) } else { 0 }
        + if sender.principal.is_none() { PRINCIPAL.of(sender.principal_name.len()) } else { 0 }
}

/// What cluster report `c` adds to `cluster` (None: a cluster new to the book).
fn added_in(cluster: Option<&ClusterRecord>, c: &ClusterReport, sender: &Sender) -> Added {
    let mut added = Added { bytes: if cluster.is_none() { CLUSTER.of(c.name.len()) } else { 0 }, ..Added::default() };
    for e in &c.endpoints {
        let observation = OBSERVATION.of(e.address.len());
        match cluster.and_then(|cl| cl.endpoints.get(&e.address)) {
            None => {
                added.endpoints += 1;
                added.to_principal += 1;
                added.observations += 1;
                added.bytes += ENDPOINT.of(e.address.len()) + observation;
            }
            Some(endpoint) => {
                if sender.known.is_none_or(|r| !endpoint.obs.contains_key(&r.id)) {
                    added.observations += 1;
                    added.bytes += observation;
                }
                if sender.principal.is_none_or(|id| !endpoint.held_by(id)) {
                    added.to_principal += 1;
                }
            }
        }
    }
    added
}
