//! The per-worker balancer: one decision per request, accounting when it completes, and the tick
//! that folds in what siblings and the aggregator know. Everything the filter glue calls is here.
//!
//! The pick (weighted power of two choices scored by expected wait):
//! 1. A cluster whose picks Envoy mostly refuses is not steered for a while (see `steering`).
//! 2. With probability max(explore_ratio, novelty / 2) explore: try an endpoint a fresh view lists
//!    but we do not know yet (drawn by weight; see `cluster`), else leave the request to the
//!    fallback LB: it discovers endpoints and refreshes the samples of those we avoid.
//! 3. A suspended endpoint whose probe is due gets this request (see `health`), unless its cluster is
//!    health-checked: then `due_health_checks` hands the probe out as a check (see `health_check`).
//! 4. Else draw two distinct candidates, each with probability proportional to its sampling weight
//!    (the aggregator's weight while the view is fresh, times its health's factor: suspended and
//!    absent endpoints never, ramping ones less; a fresh view's suggestions by their view weight),
//!    and keep the one with the lower score (in flight + 1) x (latency + failure cost) x (1 + penalty
//!    x failures), from this proxy's own counts and samples only (see `endpoint`: the latency fades
//!    toward the cluster's prior with the age of its last sample; a suggestion has none: the
//!    cluster's prior latency). Retry choices are drawn among the known endpoints.
//!
//! Accounting: a request counts as in flight to the chosen endpoint until its first response
//! headers (`release`, see `inflight`); when it ends (`complete`) the endpoint that served it is
//! learned if new and charged with the outcome (good or failed). If Envoy used another endpoint
//! than the first choice, it either never tried ours (one attempt: a refused pick, counted apart,
//! and the endpoint is absent from the cluster) or tried it and retried elsewhere (more attempts: a
//! failure of ours if known here; a suggestion is only no longer suggested, see `complete`).

use crate::cluster::{Candidate, Cluster};
use crate::endpoint::SiblingStats;
use crate::health::HealthChange;
use crate::inspect::{inspect, EndpointInspection};
use crate::outcome::{RequestOutcome, ResponseClass};

use crate::snapshot::Part;
use tailweight_math::hash::FastMap;
use tailweight_math::rng::Rng;
use tailweight_wire::reply::ClusterView;
use tailweight_wire::report::ClusterReport;
use tailweight_wire::stamp::LoadStamp;

mod choice;
use choice::LeftToEnvoy;
mod health_checks;
pub(crate) mod learned;
mod settings;
pub use settings::{HealthCheckScope, Settings, DEFAULT_INFLIGHT_BOUND_US};

#[derive(Debug, Clone, PartialEq)]
pub enum Pick {
    /// Write `header` (first choice, then retry choices, comma-separated). The first choice is
    /// `header[..first_len]`; it counts as in flight in `epoch` until `release`.
    Steer { header: String, first_len: usize, epoch: u64 },
    /// Left to the fallback LB on purpose (exploration).
    Explore,
    /// Nothing to choose from yet (no endpoint known, or none pickable): the fallback LB decides.
    NoCandidate,
    /// The cluster is not tracked: the cluster limit is reached.
    Untracked,
    /// Envoy refused most recent picks of this cluster: left to it for a while (see `steering`).
    Paused,
}

impl Pick {
    pub fn first_choice(&self) -> Option<&str> {
        match self {
            Pick::Steer { header, first_len, .. } => header.get(..*first_len),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Completion {
    /// Did the endpoint we chose serve? None when we chose none or no upstream was reached.
    pub honoured: Option<bool>,
    /// Envoy never tried the endpoint we chose (not a failure of it; see the module docs).
    pub refused: bool,
    /// The serving endpoint was new to this worker.
    pub learned: bool,
    /// This request suspended an endpoint (a run of failures) or ended a suspension (a good probe).
    pub suspended: bool,
    pub recovered: bool,
    /// This request paused steering of its cluster for this long (refused picks).
    pub paused_for_us: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Balancer {
    settings: Settings,
    clusters: Clusters,
    rng: Rng,
    /// The in-flight epoch, moved by `tick` (None before the first pick or tick).
    epoch: Option<u64>,
    /// Bumped whenever this worker's own observations change (a steered pick, a release, a
    /// completion, an endpoint forgotten, an in-flight epoch dropped): an unchanged revision means
    /// an unchanged snapshot, which need not be published again.
    revision: u64,
    /// Slots drawn for the current pick (kept to reuse its allocation).
    chosen: Vec<usize>,
}

impl Balancer {
    pub fn new(settings: Settings, seed: u64) -> Self {
        Balancer {
            settings,
            clusters: Clusters::default(),
            rng: Rng::new(seed),
            epoch: None,
            revision: 0,
            chosen: Vec::new(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    #[cfg(test)]
    pub(crate) fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters.get(name)
    }

    /// Is cluster `name` tracked here (it had requests within the endpoint ttl)?
    pub fn tracks(&self, name: &str) -> bool {
        self.clusters.get(name).is_some()
    }

    /// Each endpoint this worker has sent requests to, as the per-endpoint gauges show it: its
    /// cluster, its address and what `inspect` makes of it at `now_us`.
    pub fn inspect_endpoints(&self, now_us: u64, mut each: impl FnMut(&str, &str, EndpointInspection)) {
        for (name, cluster) in &self.clusters.list {
            let fresh = cluster.view_fresh(now_us);
            for endpoint in cluster.endpoints().iter().filter(|e| e.local.requests > 0) {
                each(name, &endpoint.address, inspect(endpoint, now_us, fresh));
            }
        }
    }

    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.clusters.list.iter().map(|(name, _)| name.as_str())
    }

    pub fn endpoints_tracked(&self) -> usize {
        self.clusters.list.iter().map(|(_, c)| c.len()).sum()
    }

    /// See the field: compare two revisions to know whether anything of this worker's changed.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Clusters whose steering is paused now.
    pub fn clusters_paused(&self, now_us: u64) -> usize {
        self.clusters.list.iter().filter(|(_, c)| c.steering.paused(now_us)).count()
    }

    /// One request's pick (see the module docs for the steps; the strategies are `choice`'s).
    pub fn pick(&mut self, cluster_name: &str, now_us: u64) -> Pick {
        let epoch = *self.epoch.get_or_insert(now_us / self.settings.inflight_epoch_us);
        let Balancer { settings, clusters, rng, chosen, .. } = self;
        let Some(cluster) = cluster_entry(clusters, settings, cluster_name, now_us) else {
            return Pick::Untracked;
        };
        cluster.last_used_us = now_us;
        if cluster.is_empty() {
            return Pick::NoCandidate;
        }
        if cluster.steering.paused(now_us) {
            return Pick::Paused;
        }
        let first = match choice::first_choice(cluster, settings, rng, now_us) {
            Ok(first) => first,
            Err(LeftToEnvoy::Explore) => return Pick::Explore,
            Err(LeftToEnvoy::NoCandidate) => return Pick::NoCandidate,
        };
        let (header, first_len) = choice::steer_header(cluster, rng, now_us, first, settings.retry_choices, chosen);
        if let Candidate::Known(slot) = first {
            let endpoint = cluster.endpoint_mut(slot);
            endpoint.local.inflight.add(epoch);
            if let Some(stamp) = endpoint.stamp.as_mut() {
                stamp.sent();
            }
        }
        self.revision += 1;
        Pick::Steer { header, first_len, epoch }
    }

    /// The request steered to `chosen` in `epoch` got its first response headers (or ended without):
    /// it no longer counts as in flight there.
    pub fn release(&mut self, cluster_name: &str, chosen: &str, epoch: u64) {
        let current = self.epoch.unwrap_or(epoch);
        if let Some(e) = self.clusters.get_mut(cluster_name).and_then(|c| c.get_mut(chosen)) {
            e.local.inflight.release(epoch, current);
            self.revision += 1;
        }
    }

    /// The response from `served` carried a load stamp (see `stamp`), received at `now_us`: the
    /// endpoint's latest, among this worker's freshest (only for an endpoint known here).
    pub fn note_stamp(&mut self, cluster_name: &str, served: &str, stamp: LoadStamp, now_us: u64) {
        let pool = self.settings.pick.load_stamp_pool;
        if let Some(cluster) = self.clusters.get_mut(cluster_name) {
            if let Some(slot) = cluster.slot_of(served) {
                cluster.note_stamp(slot, stamp, now_us, pool);
            }
        }
    }

    /// Account a finished request. `chosen` is the first choice the pick returned (if it steered);
    /// its in-flight count is `release`d separately.
    pub fn complete(
        &mut self,
        cluster_name: &str,
        chosen: Option<&str>,
        outcome: &RequestOutcome,
        now_us: u64,
    ) -> Completion {
        let Balancer { settings, clusters, revision, .. } = self;
        let (p, max_endpoints) = (&settings.pick, settings.max_endpoints_per_cluster);
        let Some(cluster) = cluster_entry(clusters, settings, cluster_name, now_us) else {
            return Completion::default();
        };
        cluster.last_used_us = now_us;
        *revision += 1;
        let mut done = Completion::default();
        let mut changes = [HealthChange::None; 2];
        // A steered pick of an endpoint not known here was a trial of a view's suggestion.
        let trial = chosen.filter(|c| cluster.slot_of(c).is_none());
        if let Some(served) = outcome.served {
            // Envoy's upstream is in its cluster: a good answer or a failure teaches it (a pod failing
            // from its first request is charged, not suggested on); only a good one is a discovery.
            let learned = cluster.learn(served, now_us, max_endpoints, p.slow_start_us);
            done.learned = learned.is_some_and(|(_, new)| new) && outcome.class.is_success();
            if let Some((slot, _)) = learned {
                let prior_us = cluster.prior_latency_us();
                let endpoint = cluster.endpoint_mut(slot);
                if outcome.class.is_success() {
                    endpoint.fade_latency(now_us, p, prior_us);
                }
                changes[0] = endpoint.record(outcome.class, outcome.latency_us, outcome.load, now_us, p);
            }
        }
        done.honoured = match (chosen, outcome.served) {
            (Some(c), Some(s)) => Some(c == s),
            _ => None,
        };
        // Envoy tried our choice, it failed, a retry went elsewhere; or, for a choice Envoy does not
        // have (a stale suggestion), the fallback's pick failed and was retried: the attempts do not
        // tell which. A known choice is charged; an unknown one is not learned from this (a left
        // endpoint would be tracked again), only no longer suggested for a ttl either way.
        let retried_away = done.honoured == Some(false) && outcome.attempts > 1;
        if let (Some(false), Some(slot)) = (done.honoured, chosen.and_then(|c| cluster.slot_of(c))) {
            if retried_away {
                changes[1] = cluster.endpoint_mut(slot).record(ResponseClass::Failure, 0, None, now_us, p);
            } else {
                done.refused = true;
                cluster.mark_absent(slot);
            }
        }
        if let (Some(false), Some(address)) = (done.honoured, trial) {
            done.refused |= !retried_away;
            cluster.refuse_suggestion(address, now_us.saturating_add(settings.endpoint_ttl_us));
        }
        if done.honoured.is_some() {
            done.paused_for_us = cluster.steering.note(done.refused, now_us);
        }
        for change in changes {
            done.suspended |= change == HealthChange::Suspended;
            done.recovered |= change == HealthChange::Recovered;
            cluster.health_changed(change);
        }
        // What exploration finds beyond what the view tells: a trial of its suggestion finds nothing new.
        if chosen.is_none() {
            cluster.note_discovery(done.learned);
        } else if trial.is_some() {
            cluster.note_discovery(false);
        }
        done
    }

    /// Once per tick: forget what is unseen, move ramps and in-flight epochs, refresh priors.
    /// Returns the number of endpoints forgotten.
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn tick(&mut self, now_us: u64) -> usize {
        let (ttl, p) = (self.settings.endpoint_ttl_us, &self.settings.pick);
        let epoch = now_us / self.settings.inflight_epoch_us;
        let old_epoch = self.epoch.unwrap_or(epoch);
        let (mut forgotten, mut dropped) = (0, false);
        for (_, cluster) in &mut self.clusters.list {
            forgotten += cluster.expire(now_us, ttl);
            dropped |= cluster.tick(now_us, old_epoch, epoch);
            cluster.refresh_prior(now_us, p);
        }
        // An epoch that dropped no in-flight request changed nothing: an idle worker stays quiet.
        if forgotten > 0 || dropped {
            self.revision += 1;
        }
        self.epoch = Some(epoch);
        self.clusters.retain(|c| !c.is_empty() || now_us.saturating_sub(c.last_used_us) < ttl);
        forgotten
    }

    /// Use the aggregator's view of one cluster until `received_us + ttl_us` (unless the global
    /// view is switched off: then it is reported to, never listened to). Only clusters and
    /// endpoints known here take it (see `cluster`).
    pub fn apply_view(&mut self, view: &ClusterView, received_us: u64, ttl_us: u64) {
        if !self.settings.pick.use_global_view {
            return;
        }
        if let Some(cluster) = self.clusters.get_mut(&view.name) {
            cluster.apply_view(view, received_us.saturating_add(ttl_us), received_us);
        }
    }

    /// Replace what we know of the other workers with their latest snapshots. A sibling's recent
    /// good answer from an endpoint is a sighting (it teaches or keeps the endpoint here too).
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn apply_siblings(&mut self, siblings: &[Part], now_us: u64) {
        let Balancer { settings, clusters, .. } = self;
        let (max_endpoints, ttl, slow_start) =
            (settings.max_endpoints_per_cluster, settings.endpoint_ttl_us, settings.pick.slow_start_us);
        for (_, cluster) in &mut clusters.list {
            for slot in 0..cluster.len() {
                cluster.endpoint_mut(slot).siblings = SiblingStats::default();
            }
        }
        for sibling in siblings {
            for report in sibling.clusters {
                let Some(cluster) = cluster_entry(clusters, settings, &report.name, now_us) else { continue };
                for e in &report.endpoints {
                    let age_us = |age_ms: u64| sibling.written_us.saturating_sub(age_ms.saturating_mul(1_000));
                    let seen_us = e.seen_age_ms.map(age_us).filter(|t| now_us.saturating_sub(*t) < ttl);
                    let slot = match seen_us {
                        Some(seen) => cluster.learn(&e.address, seen, max_endpoints, slow_start).map(|(slot, _)| slot),
                        None => cluster.slot_of(&e.address),
                    };
                    let Some(slot) = slot else { continue };
                    let endpoint = cluster.endpoint_mut(slot);
                    if sibling.live {
                        endpoint.siblings.inflight = endpoint.siblings.inflight.saturating_add(e.inflight);
                    }
                    if e.latency_ewma_us > 0 {
                        let sampled_us = age_us(e.latency_age_ms);
                        if endpoint.siblings.latency.is_none_or(|(_, known)| sampled_us > known) {
                            endpoint.siblings.latency = Some((e.latency_ewma_us as f64, sampled_us));
                        }
                    }
                    if let Some(seen) = seen_us {
                        endpoint.last_success_us = endpoint.last_success_us.max(seen);
                        endpoint.answered_well = true;
                    }
                }
            }
        }
    }

    /// This worker's recent observations, for its siblings and for the report (see `snapshot`).
    pub fn snapshot(&self, now_us: u64) -> Vec<ClusterReport> {
        crate::snapshot::of_clusters(
            self.clusters.list.iter().map(|(name, c)| (name, c)),
            now_us,
            self.settings.endpoint_ttl_us,
        )
    }
}

/// The clusters in the order they were first seen, and each one's position by name. The index is
/// the map type `Cluster` indexes its endpoints with: the filter's module then carries one hash
/// table instance, not a second one of whole clusters (its insert, rehash and lookups: ~4 KB).
#[derive(Debug, Clone, Default)]
struct Clusters {
    list: Vec<(String, Cluster)>,
    at: FastMap<usize>,
}

impl Clusters {
    fn get(&self, name: &str) -> Option<&Cluster> {
        self.at.get(name).map(|&at| &self.list[at].1)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Cluster> {
        self.at.get(name).map(|&at| &mut self.list[at].1)
    }

    /// Keep the clusters `keep` says (rare: an idle cluster is forgotten); the index is rebuilt
    /// when any went.
    fn retain(&mut self, mut keep: impl FnMut(&Cluster) -> bool) {
        let before = self.list.len();
        self.list.retain(|(_, c)| keep(c));
        if self.list.len() != before {
            self.at = self.list.iter().enumerate().map(|(at, (name, _))| (name.clone(), at)).collect();
        }
    }
}

/// The cluster, created if new and there is room under the cluster limit.
fn cluster_entry<'a>(
    clusters: &'a mut Clusters,
    settings: &Settings,
    name: &str,
    now_us: u64,
) -> Option<&'a mut Cluster> {
    let at = match clusters.at.get(name) {
        Some(&at) => at,
        None if clusters.list.len() >= settings.max_clusters => return None,
        None => {
            let mut cluster = Cluster::new(now_us, settings.pick.default_latency_us);
            cluster.health_check_listed = settings.health_check_listed(name);
            clusters.list.push((name.to_string(), cluster));
            clusters.at.insert(name.to_string(), clusters.list.len() - 1);
            clusters.list.len() - 1
        }
    };
    Some(&mut clusters.list[at].1)
}

#[cfg(test)]
mod tests;
