//! What the book keeps: per reporter (who it is, where its last report's endpoints are), per cluster
//! (its endpoints in order, with an index by address) and per endpoint (what each reporter said and
//! the state learned from it).

use crate::decision::{EndpointDecision, Method};
use crate::ejection::Ejection;
use crate::held_capacity::HeldCapacity;
use crate::latency_model::LatencyModel;
use crate::merge::Merged;
use crate::observation::Observation;
use crate::published::PublishedCluster;
use crate::rate_history::RateHistory;
use crate::route::Route;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use tailweight_math::hash::IdMap;
use tailweight_wire::protocol;

/// The book's totals, which entering a report grows and expiring shrinks.
pub(crate) struct Totals<'a> {
    pub observations: &'a mut usize,
    pub bytes: &'a mut usize,
    /// The next cluster layout number (see `Route`).
    pub next_layout: &'a mut u64,
}

/// One principal: an identity the service vouches for (a mesh identity, or a reporter name when the
/// service trusts report bodies), and what it holds of the book (bounded by the quotas).
#[derive(Debug, Clone, Default)]
pub(crate) struct PrincipalRecord {
    /// Live reporter incarnations.
    pub reporters: usize,
    pub observations: usize,
    /// Clusters holding at least one of its observations.
    pub clusters: usize,
    /// What it costs the book (`memory.rs`): its reporters, their observations, and the endpoints
    /// and clusters its reports entered, until they expire.
    pub bytes: usize,
    /// When its bytes last grew (`fair_room.rs`: whether it is waiting for room).
    pub grew_at_us: u64,
}

/// One live incarnation of a reporter name.
#[derive(Debug, Clone)]
pub(crate) struct ReporterRecord {
    /// The book's own id for it (keys its observations).
    pub id: u64,
    /// The principal it reported as (a name is one reporter per principal).
    pub principal: u32,
    pub incarnation: u64,
    pub interval_us: u64,
    pub expires_us: u64,
    /// Where its last report's endpoints are, per cluster in report order.
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterRecord {
    pub endpoints: EndpointRecords,
    /// Changes whenever endpoint indices move (and differs between clusters): see `Route`.
    pub layout: u64,
    pub generation: u64,
    pub computed_at_us: Option<u64>,
    /// When the book first heard of the cluster (its first endpoints do not slow-start).
    pub created_us: u64,
    /// The principal whose report created it (its bytes count against that principal's quota).
    pub creator: u32,
    /// What each principal holds here (for the per-principal quotas, and to know when a recompute
    /// must merge principals apart).
    pub principals: HashMap<u32, Held>,
    /// The reply view published by the last recompute.
    pub published: Option<std::sync::Arc<PublishedCluster>>,
}

impl ClusterRecord {
    /// Its endpoints the last recompute decided.
    pub fn decided(&self) -> usize {
        self.endpoints.iter().filter(|e| e.decision.is_some()).count()
    }

    /// Time since the last recompute (None before the first).
    pub fn elapsed_us(&self, now_us: u64) -> Option<u64> {
        self.computed_at_us.map(|t| now_us.saturating_sub(t))
    }
}

/// What one principal holds in one cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub observations: usize,
    /// Endpoints with at least one of its observations.
    pub endpoints: usize,
}

/// A cluster's endpoints: a vector (recomputes walk it in order) with an index by address.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndpointRecords {
    list: Vec<EndpointRecord>,
    pub index: HashMap<String, usize>,
}

impl EndpointRecords {
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, address: &str) -> Option<&EndpointRecord> {
        self.index.get(address).and_then(|i| self.list.get(*i))
    }

    /// Look up `id`'s observation of each endpoint at `indices` and drop the answer: the lookups
    /// are independent, so their cache misses overlap here instead of queueing up one endpoint at
    /// a time behind the work of `ingest`.
    pub fn warm(&self, indices: &[u32], id: u64) {
        let mut sum = 0u64;
        for i in indices {
            if let Some(o) = self.list.get(*i as usize).and_then(|e| e.obs.get(&id)) {
                sum = sum.wrapping_add(o.requests);
            }
        }
        std::hint::black_box(sum);
    }

    pub fn get_at(&self, i: usize) -> Option<&EndpointRecord> {
        self.list.get(i)
    }

    pub fn at(&mut self, i: usize) -> &mut EndpointRecord {
        &mut self.list[i]
    }

    /// The endpoint at `address`, entered (as created by `creator`) if new.
    pub fn get_or_insert(&mut self, address: &str, creator: u32, now_us: u64) -> &mut EndpointRecord {
        let i = match self.index.get(address) {
            Some(i) => *i,
            None => {
                self.list.push(EndpointRecord::new(address, creator, now_us));
                self.index.insert(address.to_string(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        &mut self.list[i]
    }

    pub fn iter(&self) -> std::slice::Iter<'_, EndpointRecord> {
        self.list.iter()
    }

    pub fn as_mut_slice(&mut self) -> &mut [EndpointRecord] {
        &mut self.list
    }

    /// Keep the endpoints `keep` says to; true if any went (indices moved).
    pub fn retain(&mut self, keep: impl FnMut(&mut EndpointRecord) -> bool) -> bool {
        let before = self.list.len();
        self.list.retain_mut(keep);
        if self.list.len() != before {
            self.index = self.list.iter().enumerate().map(|(i, e)| (e.address.clone(), i)).collect();
            return true;
        }
        false
    }
}

/// One endpoint: what its reporters said, and what the book learned from it.
#[derive(Debug, Clone)]
pub(crate) struct EndpointRecord {
    pub address: String,
    pub ip: Option<IpAddr>,
    /// When the book first heard of it (slow start).
    pub first_seen_us: u64,
    /// The principal whose report entered it (its bytes count against that principal's quota).
    pub creator: u32,
    /// What each reporter (by id) last said about it.
    pub obs: IdMap<Observation>,
    /// Its observations by principal (usually one entry).
    pub principals: Vec<(u32, u32)>,
    /// The latency path's service time and concurrency.
    pub latency: LatencyModel,
    pub ejection: Ejection,
    /// The published weight (None before the first recompute).
    pub weight: Option<f64>,
    pub held: HeldCapacity,
    pub decision: Option<EndpointDecision>,
    /// Merged counts over the window of a metrics-store CPU value (kept while the IP has one).
    pub rates: RateHistory,
    /// The last recompute whose merged numbers showed traffic here (`traffic.rs`).
    pub last_traffic_us: Option<u64>,
    /// Whether the last recompute was its first with traffic after a quiet spell (`traffic.rs`).
    pub back_from_quiet: bool,
}

impl EndpointRecord {
    /// Whether `principal` has an observation here.
    pub fn held_by(&self, principal: u32) -> bool {
        self.principals.iter().any(|(p, _)| *p == principal)
    }

    /// Count one more observation of `principal`; true if it is its first here.
    pub fn add_principal(&mut self, principal: u32) -> bool {
        match self.principals.iter_mut().find(|(p, _)| *p == principal) {
            Some((_, n)) => {
                *n += 1;
                false
            }
            None => {
                self.principals.push((principal, 1));
                true
            }
        }
    }

    /// The decision as far as steps 1 and 2 make it: merged numbers and learned state, weight and
    /// capacity still the previous ones until steps 3 to 5 fill them in.
    pub fn merged_decision(&self, m: Merged) -> EndpointDecision {
        EndpointDecision {
            address: self.address.clone(),
            weight: self.weight.unwrap_or(1.0),
            method: Method::Median,
            capacity: None,
            backlog: 0.0,
            target: 1.0,
            qps: m.qps,
            eps: m.eps,
            inflight: m.inflight,
            view_inflight: m.inflight,
            latency_us: m.latency_us.map_or(0, |l| l.round().min(protocol::MAX_LATENCY_US as f64) as u64),
            service_time_us: self.latency.service_us,
            concurrency: self.latency.concurrency,
            cpu: m.cpu.map(|c| c.utilization),
            cpu_source: m.cpu.map(|c| c.source.as_str()),
            error_ratio: self.ejection.error_ratio,
            ejected: self.ejection.ejected,
            served_age_ms: m.served_age_ms,
            reporters: m.reporters,
            counted: true,
        }
    }

    /// The asking reporter's counted in-flight requests here (0 if it has none or is not live).
    pub fn own_inflight(&self, asking: Option<&ReporterRecord>, now_us: u64) -> f64 {
        asking.and_then(|r| self.obs.get(&r.id)).filter(|o| o.live(now_us)).map_or(0.0, |o| o.counted_inflight)
    }

    fn new(address: &str, creator: u32, now_us: u64) -> Self {
        EndpointRecord {
            creator,
            address: address.to_string(),
            ip: address.parse::<SocketAddr>().ok().map(|a| a.ip()),
            first_seen_us: now_us,
            obs: IdMap::default(),
            principals: Vec::new(),
            latency: LatencyModel::default(),
            ejection: Ejection::default(),
            weight: None,
            held: HeldCapacity::default(),
            decision: None,
            rates: RateHistory::default(),
            last_traffic_us: None,
            back_from_quiet: false,
        }
    }
}
