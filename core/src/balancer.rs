//! The per-worker balancer: one decision per request, accounting when it completes, and the tick
//! that folds in what siblings and the aggregator know. Everything the filter glue calls is here.
//!
//! The pick (weighted power of two choices scored by expected wait):
//! 1. With probability max(explore_ratio, novelty / 2) leave the request to the fallback LB: it
//!    discovers endpoints we do not know and refreshes the samples of those we avoid.
//! 2. Draw two distinct endpoints, each with probability proportional to its aggregator weight
//!    (uniform without a fresh view; ejected endpoints never).
//! 3. Keep the one with the lower score (in flight + 1) x expected latency x (1 + penalty x failures),
//!    from this proxy's own counts and samples only (see `endpoint`); the other becomes the retry
//!    choice.

use crate::cluster::Cluster;
use crate::config::{FilterConfig, PickParams};
use crate::endpoint::{RequestOutcome, SiblingStats};
use crate::hash::FastMap;
use crate::rng::Rng;
use crate::snapshot::Part;
use crate::wire::{ClusterReport, ClusterView};

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub pick: PickParams,
    pub retry_choices: usize,
    pub endpoint_ttl_us: u64,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
}

impl From<&FilterConfig> for Settings {
    fn from(c: &FilterConfig) -> Self {
        Settings {
            pick: c.pick.clone(),
            retry_choices: c.retry_choices,
            endpoint_ttl_us: c.endpoint_ttl_ms * 1_000,
            max_clusters: c.max_clusters,
            max_endpoints_per_cluster: c.max_endpoints_per_cluster,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&FilterConfig::default())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Pick {
    /// Write `header` (first choice, then retry choices, comma-separated). The first choice is
    /// `header[..first_len]`; its in-flight count has been raised.
    Steer { header: String, first_len: usize },
    /// Left to the fallback LB on purpose (exploration).
    Explore,
    /// Nothing to choose from yet (no endpoint known, or all ejected): the fallback LB decides.
    NoCandidate,
    /// The cluster is not tracked: the cluster limit is reached.
    Untracked,
}

impl Pick {
    pub fn first_choice(&self) -> Option<&str> {
        match self {
            Pick::Steer { header, first_len } => Some(&header[..*first_len]),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Completion {
    /// Did the endpoint we chose serve? None when we chose none or no upstream was reached.
    pub honoured: Option<bool>,
    /// The serving endpoint was new to this worker.
    pub learned: bool,
}

#[derive(Debug, Clone)]
pub struct Balancer {
    settings: Settings,
    clusters: FastMap<Cluster>,
    rng: Rng,
    /// Slots drawn for the current pick (kept to reuse its allocation).
    chosen: Vec<usize>,
}

impl Balancer {
    pub fn new(settings: Settings, seed: u64) -> Self {
        Balancer { settings, clusters: FastMap::default(), rng: Rng::new(seed), chosen: Vec::new() }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.get(name)
    }

    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.clusters.keys().map(String::as_str)
    }

    pub fn endpoints_tracked(&self) -> usize {
        self.clusters.values().map(Cluster::len).sum()
    }

    pub fn pick(&mut self, cluster_name: &str, now_us: u64) -> Pick {
        let Balancer { settings, clusters, rng, chosen } = self;
        let (p, retry_choices) = (&settings.pick, settings.retry_choices);
        let Some(cluster) = cluster_entry(clusters, settings, cluster_name, now_us) else {
            return Pick::Untracked;
        };
        cluster.last_used_us = now_us;
        if cluster.is_empty() {
            return Pick::NoCandidate;
        }
        if rng.chance(p.explore_ratio.max(cluster.novelty() / 2.0)) {
            return Pick::Explore;
        }
        let Some(a) = cluster.sample(rng, now_us) else {
            return Pick::NoCandidate;
        };
        let b = draw_distinct(cluster, rng, now_us, &[a]);
        let prior = cluster.prior_latency_us();
        let score = |slot: usize| cluster.endpoints()[slot].score(now_us, p, prior);
        let (first, second) = match b {
            Some(b) if score(b) < score(a) => (b, Some(a)),
            _ => (a, b),
        };
        chosen.clear();
        chosen.push(first);
        chosen.extend(second);
        while chosen.len() < retry_choices + 1 {
            match draw_distinct(cluster, rng, now_us, chosen) {
                Some(slot) => chosen.push(slot),
                None => break,
            }
        }
        chosen.truncate(retry_choices + 1);
        let first_len = cluster.endpoints()[first].address.len();
        let mut header = String::with_capacity(chosen.len() * 22);
        for (i, slot) in chosen.iter().enumerate() {
            if i > 0 {
                header.push(',');
            }
            header.push_str(&cluster.endpoints()[*slot].address);
        }
        cluster.endpoint_mut(first).local.inflight += 1;
        Pick::Steer { header, first_len }
    }

    /// Account a finished request. `chosen` is the first choice the pick returned (if it steered).
    pub fn complete(
        &mut self,
        cluster_name: &str,
        chosen: Option<&str>,
        outcome: &RequestOutcome,
        now_us: u64,
    ) -> Completion {
        let Balancer { settings, clusters, .. } = self;
        let (p, max_endpoints) = (&settings.pick, settings.max_endpoints_per_cluster);
        let Some(cluster) = cluster_entry(clusters, settings, cluster_name, now_us) else {
            return Completion::default();
        };
        cluster.last_used_us = now_us;
        if let Some(e) = chosen.and_then(|c| cluster.get_mut(c)) {
            e.local.inflight = e.local.inflight.saturating_sub(1);
        }
        let mut learned = false;
        if let Some(served) = outcome.served {
            if let Some((slot, new)) = cluster.learn(served, now_us, max_endpoints) {
                learned = new;
                cluster.endpoint_mut(slot).record(outcome.latency_us, outcome.failed, outcome.load, now_us, p);
            }
        }
        let honoured = match (chosen, outcome.served) {
            (Some(c), Some(s)) => Some(c == s),
            _ => None,
        };
        if honoured == Some(false) {
            // The endpoint we chose did not serve (gone, refused, ejected by Envoy): a failed attempt.
            if let Some(e) = chosen.and_then(|c| cluster.get_mut(c)) {
                e.record(0, true, None, now_us, p);
            }
        }
        if chosen.is_none() {
            cluster.note_discovery(learned);
        }
        Completion { honoured, learned }
    }

    /// Once per tick: forget what is unseen, refresh priors.
    /// Returns the number of endpoints forgotten.
    pub fn tick(&mut self, now_us: u64) -> usize {
        let (ttl, p) = (self.settings.endpoint_ttl_us, &self.settings.pick);
        let mut forgotten = 0;
        for cluster in self.clusters.values_mut() {
            forgotten += cluster.expire(now_us, ttl);
            cluster.refresh_prior(now_us, p);
        }
        self.clusters.retain(|_, c| !c.is_empty() || now_us.saturating_sub(c.last_used_us) < ttl);
        forgotten
    }

    /// Use the aggregator's view of one cluster until `received_us + ttl_us` (unless the global
    /// view is switched off: then it is reported to, never listened to).
    pub fn apply_view(&mut self, view: &ClusterView, received_us: u64, ttl_us: u64) {
        if !self.settings.pick.use_global_view {
            return;
        }
        let max_endpoints = self.settings.max_endpoints_per_cluster;
        if let Some(cluster) = cluster_entry(&mut self.clusters, &self.settings, &view.name, received_us) {
            cluster.apply_view(view, received_us.saturating_add(ttl_us), received_us, max_endpoints);
        }
    }

    /// Replace what we know of the other workers with their latest snapshots.
    pub fn apply_siblings(&mut self, siblings: &[Part], now_us: u64) {
        let Balancer { settings, clusters, .. } = self;
        let (max_endpoints, ttl) = (settings.max_endpoints_per_cluster, settings.endpoint_ttl_us);
        for cluster in clusters.values_mut() {
            for slot in 0..cluster.len() {
                cluster.endpoint_mut(slot).siblings = SiblingStats::default();
            }
        }
        for sibling in siblings {
            for report in sibling.clusters {
                let Some(cluster) = cluster_entry(clusters, settings, &report.name, now_us) else { continue };
                for e in &report.endpoints {
                    let sampled_us = (e.latency_ewma_us > 0)
                        .then(|| sibling.written_us.saturating_sub(e.latency_age_ms.saturating_mul(1_000)));
                    // A sibling's recent sample is a sighting (learn from it); its stale knowledge is not.
                    let recent = sampled_us.filter(|t| now_us.saturating_sub(*t) < ttl);
                    let slot = match recent {
                        Some(seen) => cluster.learn(&e.address, seen, max_endpoints).map(|(slot, _)| slot),
                        None => cluster.slot_of(&e.address),
                    };
                    let Some(slot) = slot else { continue };
                    let endpoint = cluster.endpoint_mut(slot);
                    if sibling.live {
                        endpoint.siblings.inflight += e.inflight;
                    }
                    if let Some(t) = sampled_us {
                        if endpoint.siblings.latency.is_none_or(|(_, known)| t > known) {
                            endpoint.siblings.latency = Some((e.latency_ewma_us as f64, t));
                        }
                    }
                    if let Some(seen) = recent {
                        endpoint.last_seen_us = endpoint.last_seen_us.max(seen);
                    }
                }
            }
        }
    }

    /// This worker's observations, for its siblings and for the report.
    pub fn snapshot(&self, now_us: u64) -> Vec<ClusterReport> {
        crate::snapshot::of_clusters(self.clusters.iter(), now_us)
    }
}

/// The cluster, created if new and there is room under the cluster limit.
fn cluster_entry<'a>(
    clusters: &'a mut FastMap<Cluster>,
    settings: &Settings,
    name: &str,
    now_us: u64,
) -> Option<&'a mut Cluster> {
    if !clusters.contains_key(name) {
        if clusters.len() >= settings.max_clusters {
            return None;
        }
        clusters.insert(name.to_string(), Cluster::new(now_us, settings.pick.default_latency_us));
    }
    clusters.get_mut(name)
}

/// A slot not in `taken`, drawn by weight; None when no such slot turns up in a few draws.
fn draw_distinct(cluster: &mut Cluster, rng: &mut Rng, now_us: u64, taken: &[usize]) -> Option<usize> {
    if cluster.len() <= taken.len() {
        return None;
    }
    (0..8).filter_map(|_| cluster.sample(rng, now_us)).find(|slot| !taken.contains(slot))
}

#[cfg(test)]
mod tests;
