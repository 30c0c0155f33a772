//! One cluster as one worker sees it: the endpoint set, the aggregator's view with its expiry, the
//! sampler, the probes of suspended endpoints, and whether Envoy honours our picks (`steering`).
//!
//! Endpoint lifecycle: only this proxy's own evidence keeps an endpoint. It is learned when Envoy
//! sends it a request here (a steered one, or one the fallback load balancer sent there, which
//! proves it is in Envoy's cluster), whether it answers well or fails (a pod failing from its first
//! request is charged with its failures, suspended and reported, not suggested on and on), or a
//! sibling worker saw it answer well, and forgotten `ttl` after its last good answer (or its first
//! contact, if none; unless requests to it are in flight). The aggregator's view never teaches nor
//! refreshes an endpoint: it only weighs the ones known here (a view listing a deleted pod must not
//! keep it alive in every proxy that reports to the aggregator). What a fresh view lists that is not
//! known here is a suggestion of where to explore, if some caller's users were answered well by it
//! lately (`SUGGEST_SERVED_WITHIN_MS`; a new pod failing from its start never is, so the view never
//! sends proxies to it one trial each): an exploring request may be steered to one, drawn
//! by its weight (a trial), and Envoy's answer decides: a good answer teaches it, a refusal (not in
//! the cluster) keeps it from being suggested again for `ttl`. With many proxies each sending a
//! little, this is how a proxy finds the capable endpoints first instead of learning them one
//! uniform fallback request at a time.

use crate::endpoint::{Endpoint, GlobalStats};
use crate::health::HealthChange;
use crate::health_check::CheckTarget;
use crate::own_evidence::own_fresh_share;
use crate::params::PickParams;
use crate::stamp_record::StampRecord;
use crate::steering::Steering;
use tailweight_math::hash::FastMap;
use tailweight_math::rng::Rng;
use tailweight_math::stats::median;
use tailweight_wire::address::is_endpoint_address;
use tailweight_wire::reply::ClusterView;
use tailweight_wire::stamp::LoadStamp;

/// How quickly the discovery rate follows what exploration finds: novelty <- (1-a) novelty + a [new].
const NOVELTY_STEP: f64 = 0.2;
/// A view's endpoint is suggested only if some caller's users were answered well by it within this
/// long (its `served_age_ms`), when the view says it for any endpoint (an aggregator that does not
/// say it: every listed one is).
pub const SUGGEST_SERVED_WITHIN_MS: u64 = 10_000;
/// Refused suggestions remembered per cluster (more are simply suggested again).
const MAX_REFUSED_SUGGESTIONS: usize = 64;

#[derive(Debug, Clone)]
pub struct Cluster {
    endpoints: Vec<Endpoint>,
    index: FastMap<usize>,
    /// Cumulative sampling weights, aligned with `endpoints`; None while all weights are equal
    /// (to `uniform_weight`).
    cumulative: Option<Vec<f64>>,
    uniform_weight: f64,
    sampler_stale: bool,
    /// Whether the view was fresh when the sampler was built (its weights count only while fresh).
    sampled_with_view: bool,
    /// The aggregator's view may be used until then.
    view_expires_us: u64,
    /// The last view's `reporters`.
    view_reporters: Option<u32>,
    /// Latency assumed for endpoints without an estimate: the median of the fresh ones.
    prior_latency_us: f64,
    /// Share of the endpoints known here with a fresh latency estimate of this proxy's own.
    own_fresh_share: f64,
    /// Recent share of exploration picks that found an endpoint not known before (starts at 1).
    novelty: f64,
    /// When this worker first saw the cluster: endpoints joining after the slow-start window ramp up.
    created_us: u64,
    /// The earliest probe due among suspended endpoints (u64::MAX: none).
    next_probe_us: u64,
    /// Some endpoint's ramp is running: its sampling weight changes with time.
    ramping: bool,
    /// Endpoints a fresh view lists that are not known here, with cumulative weights (see the module docs).
    suggestions: Vec<(String, f64)>,
    /// Suggestions Envoy refused (not in the cluster), and until when they are not suggested.
    refused_suggestions: Vec<(String, u64)>,
    /// Slots of the endpoints of this worker's latest load stamps, the most recent last (see `stamp`).
    stamped: Vec<usize>,
    /// The view's in-flight of each suggestion, aligned with `suggestions`.
    suggestion_inflight: Vec<f64>,
    /// What the view lists, unknown here, that is not suggested for want of users served well by it
    /// (`SUGGEST_SERVED_WITHIN_MS`): listed all the same, so the aggregator's weight ramps it.
    unproven: Vec<String>,
    /// What an ejected endpoint that answered well here last draws with (see `readmit_weight`).
    readmit_weight: f64,
    /// What its health checks are sent with (see `health_check`).
    pub check_target: CheckTarget,
    /// Listed for health checks (`health_check_clusters`, or all): its suspended endpoints are
    /// checked out of band if its protocol's check is configured (see `balancer::health_checks`).
    pub health_check_listed: bool,
    /// Whether Envoy honours our picks here.
    pub steering: Steering,
    pub last_used_us: u64,
}

impl Cluster {
    pub fn new(now_us: u64, default_latency_us: f64) -> Self {
        Cluster {
            endpoints: Vec::new(),
            index: FastMap::default(),
            cumulative: None,
            uniform_weight: 1.0,
            sampler_stale: false,
            sampled_with_view: false,
            view_expires_us: 0,
            view_reporters: None,
            prior_latency_us: default_latency_us,
            own_fresh_share: 0.0,
            novelty: 1.0,
            created_us: now_us,
            next_probe_us: u64::MAX,
            ramping: false,
            suggestions: Vec::new(),
            refused_suggestions: Vec::new(),
            stamped: Vec::new(),
            suggestion_inflight: Vec::new(),
            unproven: Vec::new(),
            readmit_weight: 1.0,
            check_target: CheckTarget::default(),
            health_check_listed: false,
            steering: Steering::default(),
            last_used_us: now_us,
        }
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn get(&self, address: &str) -> Option<&Endpoint> {
        self.index.get(address).map(|&i| &self.endpoints[i])
    }

    pub fn slot_of(&self, address: &str) -> Option<usize> {
        self.index.get(address).copied()
    }

    pub fn get_mut(&mut self, address: &str) -> Option<&mut Endpoint> {
        self.index.get(address).map(|&i| &mut self.endpoints[i])
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    pub fn view_fresh(&self, now_us: u64) -> bool {
        now_us < self.view_expires_us
    }

    /// How many callers report the cluster, as a fresh view says (None: no fresh view, or it did
    /// not say).
    pub fn fleet_reporters(&self, now_us: u64) -> Option<u32> {
        self.view_reporters.filter(|_| self.view_fresh(now_us))
    }

    /// The sampling weight of an endpoint the view ejects whose last answer here was good (see
    /// `Endpoint::sampling_weight`): an average live one's, the mean weight of the endpoints the last
    /// view does not eject (1 with none). Not the view's mean of 1: while some are ejected the others'
    /// weights rise to fill it.
    pub fn readmit_weight(&self) -> f64 {
        self.readmit_weight
    }

    pub fn prior_latency_us(&self) -> f64 {
        self.prior_latency_us
    }

    /// As of the last tick: the share of the cluster this proxy has a fresh latency estimate of
    /// (`own_evidence::own_fresh_share`). How much its own counts say about the cluster: near 1
    /// when it reaches every endpoint every few seconds, low when it is one of many proxies that
    /// each reach an endpoint rarely.
    pub fn own_fresh_share(&self) -> f64 {
        self.own_fresh_share
    }

    pub fn novelty(&self) -> f64 {
        self.novelty
    }

    /// The endpoint at `address`, added if new and there is room (first contact at `seen_us`,
    /// which keeps it for `ttl` like a good answer). One joining a cluster known here for longer
    /// than `slow_start_us` starts a ramp (a new pod, likely cold), unless a fresh view lists it
    /// (the aggregator's weight ramps endpoints new to the mesh until it can rate them); the
    /// endpoints found in the cluster's first window do not (this proxy discovering an established
    /// set). Returns its slot and whether it was added.
    pub fn learn(
        &mut self,
        address: &str,
        seen_us: u64,
        max_endpoints: usize,
        slow_start_us: u64,
    ) -> Option<(usize, bool)> {
        if let Some(&i) = self.index.get(address) {
            return Some((i, false));
        }
        if self.endpoints.len() >= max_endpoints || !is_endpoint_address(address) {
            return None;
        }
        let mut endpoint = Endpoint::new(address, seen_us);
        let listed = self.view_fresh(seen_us)
            && (self.suggestions.iter().any(|(a, _)| a == address) || self.unproven.iter().any(|a| a == address));
        if slow_start_us > 0 && seen_us.saturating_sub(self.created_us) >= slow_start_us && !listed {
            endpoint.health.start_ramp(seen_us, slow_start_us);
            self.ramping = true;
        }
        self.endpoints.push(endpoint);
        self.index.insert(address.to_string(), self.endpoints.len() - 1);
        self.sampler_stale = true;
        Some((self.endpoints.len() - 1, true))
    }

    /// A response changed an endpoint's health: the sampler's weights and the probe schedule follow.
    pub fn health_changed(&mut self, change: HealthChange) {
        match change {
            HealthChange::None => {}
            HealthChange::Recovered => {
                self.ramping = true;
                self.sampler_stale = true;
                self.schedule_probes();
            }
            HealthChange::Suspended | HealthChange::Returned | HealthChange::RampCut => {
                self.sampler_stale = true;
                self.schedule_probes();
            }
        }
    }

    /// Envoy did not try the endpoint in `slot` when we picked it: not in the cluster now.
    pub fn mark_absent(&mut self, slot: usize) {
        self.endpoints[slot].health.mark_absent();
        self.sampler_stale = true;
        self.schedule_probes();
    }

    /// A suspended endpoint whose probe is due, marked as probed (None: none due). O(1) unless one is
    /// due: then one scan of the endpoints.
    pub fn take_due_probe(&mut self, now_us: u64, p: &PickParams) -> Option<usize> {
        if now_us < self.next_probe_us {
            return None;
        }
        let slot = self.endpoints.iter().position(|e| e.health.probe_due_us().is_some_and(|at| at <= now_us));
        if let Some(slot) = slot {
            self.endpoints[slot].health.probe_sent(now_us, &p.health_times());
        }
        self.schedule_probes();
        slot
    }

    fn schedule_probes(&mut self) {
        self.next_probe_us = self.endpoints.iter().filter_map(|e| e.health.probe_due_us()).min().unwrap_or(u64::MAX);
    }

    pub fn endpoint_mut(&mut self, slot: usize) -> &mut Endpoint {
        &mut self.endpoints[slot]
    }

    /// A load stamp from the endpoint in `slot`: its latest, and its slot the most recent of the
    /// `pool` kept (an older stamp of the same endpoint leaves the list).
    pub fn note_stamp(&mut self, slot: usize, stamp: LoadStamp, now_us: u64, pool: usize) {
        self.endpoints[slot].stamp = Some(StampRecord::new(stamp, now_us));
        self.stamped.retain(|s| *s != slot);
        self.stamped.push(slot);
        if self.stamped.len() > pool {
            let extra = self.stamped.len() - pool;
            self.stamped.drain(..extra);
        }
    }

    /// Slots of the endpoints of the latest stamps (fresh or not: see `StampRecord::fresh`).
    pub fn stamped(&self) -> &[usize] {
        &self.stamped
    }

    /// Exploration found a new endpoint, or did not.
    pub fn note_discovery(&mut self, found_new: bool) {
        let x = if found_new { 1.0 } else { 0.0 };
        self.novelty = (1.0 - NOVELTY_STEP) * self.novelty + NOVELTY_STEP * x;
    }

    /// Take the aggregator's view of this cluster: replace the global stats of the endpoints known
    /// here; what else it lists becomes the suggestions (see the module docs).
    pub fn apply_view(&mut self, view: &ClusterView, expires_us: u64, now_us: u64) {
        for e in &mut self.endpoints {
            e.global = None;
        }
        self.refused_suggestions.retain(|(_, until)| *until > now_us);
        self.suggestions.clear();
        self.suggestion_inflight.clear();
        self.unproven.clear();
        let mut total = 0.0;
        let says_served = view.endpoints.iter().any(|v| v.served_age_ms.is_some());
        let proven = |v: &tailweight_wire::reply::EndpointView| {
            !says_served || v.served_age_ms.is_some_and(|age| age <= SUGGEST_SERVED_WITHIN_MS)
        };
        for v in &view.endpoints {
            if let Some(&slot) = self.index.get(v.address.as_str()) {
                self.endpoints[slot].global = Some(GlobalStats {
                    weight: v.weight,
                    inflight: v.inflight,
                    latency_us: v.latency_us as f64,
                    ejected: v.ejected,
                    served_us: v.served_age_ms.map(|age| now_us.saturating_sub(age.saturating_mul(1_000))),
                });
            } else if !v.ejected
                && v.weight > 0.0
                && is_endpoint_address(&v.address)
                && !self.refused_suggestions.iter().any(|(a, _)| *a == v.address)
            {
                if !proven(v) {
                    self.unproven.push(v.address.clone());
                    continue;
                }
                total += v.weight;
                self.suggestions.push((v.address.clone(), total));
                self.suggestion_inflight.push(v.inflight);
            }
        }
        let live = || view.endpoints.iter().filter(|v| !v.ejected && v.weight.is_finite() && v.weight > 0.0);
        let n = live().count();
        self.readmit_weight = if n == 0 { 1.0 } else { live().map(|v| v.weight).sum::<f64>() / n as f64 };
        self.view_expires_us = expires_us;
        self.view_reporters = view.reporters;
        self.sampler_stale = true;
    }

    /// Envoy did not try the suggested `address`: not suggested again before `until_us`.
    pub fn refuse_suggestion(&mut self, address: &str, until_us: u64) {
        let mut at = 0;
        self.suggestion_inflight.retain(|_| {
            at += 1;
            self.suggestions[at - 1].0 != address
        });
        self.suggestions.retain(|(a, _)| a != address);
        // Cumulative weights no longer add up after a removal: rebuild them from the differences.
        let mut previous = 0.0;
        let mut total = 0.0;
        for (_, c) in &mut self.suggestions {
            let weight = (*c - previous).max(0.0);
            previous = *c;
            total += weight;
            *c = total;
        }
        if self.refused_suggestions.len() < MAX_REFUSED_SUGGESTIONS {
            self.refused_suggestions.push((address.to_string(), until_us));
        }
    }

    /// Forget endpoints without a good answer for `ttl` (unless requests are in flight to them).
    /// Returns how many.
    pub fn expire(&mut self, now_us: u64, ttl_us: u64) -> usize {
        let keep = |e: &Endpoint| e.local.inflight.count() > 0 || now_us.saturating_sub(e.last_success_us) < ttl_us;
        if self.endpoints.iter().all(keep) {
            return 0;
        }
        let before = self.endpoints.len();
        let stamped: Vec<String> = self.stamped.iter().map(|s| self.endpoints[*s].address.clone()).collect();
        self.endpoints.retain(keep);
        self.index = self.endpoints.iter().enumerate().map(|(i, e)| (e.address.clone(), i)).collect();
        self.stamped = stamped.iter().filter_map(|a| self.index.get(a.as_str()).copied()).collect();
        self.sampler_stale = true;
        self.schedule_probes();
        before - self.endpoints.len()
    }

    /// Once per tick: finished ramps end, running ones move the sampler's weights, and requests sent
    /// two in-flight epochs ago stop counting (see `inflight`). True if that dropped a request.
    pub fn tick(&mut self, now_us: u64, old_epoch: u64, epoch: u64) -> bool {
        if self.ramping {
            let mut running = false;
            for e in &mut self.endpoints {
                e.health.settle_ramp(now_us);
                running |= e.health.ramp().is_some();
            }
            self.ramping = running;
            self.sampler_stale = true;
        }
        let mut dropped = false;
        if epoch != old_epoch {
            for e in &mut self.endpoints {
                dropped |= e.local.inflight.advance(old_epoch, epoch);
            }
        }
        dropped
    }

    /// Once per tick: the prior is the median of the fresh latency estimates (like client-side WRR
    /// giving unweighted hosts the median weight), else of the aggregator's, else the default; and
    /// the share of endpoints with a fresh estimate (`own_fresh_share`); then `refresh_outpaced_view`.
    pub fn refresh_prior(&mut self, now_us: u64, p: &PickParams) {
        let fresh_view = self.view_fresh(now_us);
        let mut fresh: Vec<f64> = self.endpoints.iter().filter_map(|e| e.fresh_latency_us(now_us, p)).collect();
        let listed_unknown = if fresh_view { self.suggestions.len() + self.unproven.len() } else { 0 };
        self.own_fresh_share = own_fresh_share(fresh.len(), self.endpoints.len(), listed_unknown);
        if fresh.is_empty() && fresh_view {
            fresh = self.endpoints.iter().filter_map(|e| e.global.map(|g| g.latency_us)).filter(|l| *l > 0.0).collect();
        }
        self.prior_latency_us = median(&mut fresh).unwrap_or(p.default_latency_us);
        for e in &mut self.endpoints {
            self.sampler_stale |= e.refresh_outpaced_view(now_us, p, self.prior_latency_us, self.readmit_weight);
        }
    }

    /// Draw one endpoint slot with probability proportional to its sampling weight.
    pub fn sample(&mut self, rng: &mut Rng, now_us: u64) -> Option<usize> {
        match self.sample_candidate(rng, now_us, false)? {
            Candidate::Known(slot) => Some(slot),
            Candidate::Suggested(_) => None,
        }
    }

    /// Draw a candidate with probability proportional to its sampling weight: the endpoints known
    /// here and, with `suggestions`, a fresh view's suggestions (by their view weights: the same
    /// scale as the known endpoints' while the view is fresh).
    pub fn sample_candidate(&mut self, rng: &mut Rng, now_us: u64, suggestions: bool) -> Option<Candidate> {
        let fresh = self.view_fresh(now_us);
        if self.sampler_stale || fresh != self.sampled_with_view {
            self.rebuild_sampler(fresh, now_us);
        }
        let known_total = match &self.cumulative {
            None => self.uniform_weight * self.endpoints.len() as f64,
            Some(cumulative) => cumulative.last().copied().unwrap_or(0.0),
        };
        let suggested_total = match self.suggestions.last() {
            Some((_, total)) if suggestions && fresh => *total,
            _ => 0.0,
        };
        let total = known_total + suggested_total;
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        let x = rng.next_f64() * total;
        if x >= known_total {
            let y = x - known_total;
            let at = self.suggestions.partition_point(|(_, c)| *c <= y).min(self.suggestions.len() - 1);
            // Learned since the view came: it is drawn as itself from the next rebuild on.
            return (!self.index.contains_key(self.suggestions[at].0.as_str())).then_some(Candidate::Suggested(at));
        }
        Some(Candidate::Known(match &self.cumulative {
            None => ((x / self.uniform_weight) as usize).min(self.endpoints.len() - 1),
            // First slot whose cumulative weight exceeds x (zero-weight slots are never chosen).
            Some(cumulative) => cumulative.partition_point(|&c| c <= x).min(self.endpoints.len() - 1),
        }))
    }

    /// A suggestion drawn by weight, if the view is fresh and one is still unknown here.
    pub fn sample_suggestion(&self, rng: &mut Rng, now_us: u64) -> Option<usize> {
        let total = self.suggestions.last()?.1;
        if !self.view_fresh(now_us) || total.is_nan() || total <= 0.0 {
            return None;
        }
        let x = rng.next_f64() * total;
        let at = self.suggestions.partition_point(|(_, c)| *c <= x).min(self.suggestions.len() - 1);
        (!self.index.contains_key(self.suggestions[at].0.as_str())).then_some(at)
    }

    /// The view's weight and in-flight of suggestion `at`.
    pub fn suggestion_view(&self, at: usize) -> (f64, f64) {
        let before = if at == 0 { 0.0 } else { self.suggestions[at - 1].1 };
        (self.suggestions[at].1 - before, self.suggestion_inflight.get(at).copied().unwrap_or(0.0))
    }

    /// The address of suggestion `at` (see `sample_candidate`).
    pub fn suggestion(&self, at: usize) -> &str {
        &self.suggestions[at].0
    }

    fn rebuild_sampler(&mut self, fresh: bool, now_us: u64) {
        let readmit = self.readmit_weight;
        let weights: Vec<f64> = self.endpoints.iter().map(|e| e.sampling_weight(fresh, readmit, now_us)).collect();
        let uniform = weights.first().is_some_and(|w0| *w0 > 0.0 && weights.iter().all(|w| w == w0));
        self.uniform_weight = weights.first().copied().unwrap_or(0.0);
        self.cumulative = if uniform {
            None
        } else {
            let mut acc = 0.0;
            Some(
                weights
                    .iter()
                    .map(|w| {
                        acc += w;
                        acc
                    })
                    .collect(),
            )
        };
        self.sampler_stale = false;
        self.sampled_with_view = fresh;
    }
}

/// What a draw returns: an endpoint known here (its slot) or a view's suggestion (its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    Known(usize),
    Suggested(usize),
}

#[cfg(test)]
mod tests;
