//! One cluster as one worker sees it: the endpoint set (learned from responses, siblings and the
//! aggregator; forgotten when unseen), the aggregator's view with its expiry, and the sampler.

use crate::config::PickParams;
use crate::endpoint::{Endpoint, GlobalStats};
use crate::hash::FastMap;
use crate::rng::Rng;
use crate::stats::median;
use crate::wire::{is_endpoint_address, ClusterView};

/// How quickly the discovery rate follows what exploration finds: novelty <- (1-a) novelty + a [new].
const NOVELTY_STEP: f64 = 0.2;

#[derive(Debug, Clone)]
pub struct Cluster {
    endpoints: Vec<Endpoint>,
    index: FastMap<usize>,
    /// Cumulative sampling weights, aligned with `endpoints`; None while all weights are equal.
    cumulative: Option<Vec<f64>>,
    sampler_stale: bool,
    /// Whether the view was fresh when the sampler was built (its weights count only while fresh).
    sampled_with_view: bool,
    /// The aggregator's view may be used until then.
    view_expires_us: u64,
    /// Latency assumed for endpoints without an estimate: the median of the fresh ones.
    prior_latency_us: f64,
    /// Recent share of exploration picks that found an endpoint not known before (starts at 1).
    novelty: f64,
    pub last_used_us: u64,
}

impl Cluster {
    pub fn new(now_us: u64, default_latency_us: f64) -> Self {
        Cluster {
            endpoints: Vec::new(),
            index: FastMap::default(),
            cumulative: None,
            sampler_stale: false,
            sampled_with_view: false,
            view_expires_us: 0,
            prior_latency_us: default_latency_us,
            novelty: 1.0,
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

    pub fn prior_latency_us(&self) -> f64 {
        self.prior_latency_us
    }

    pub fn novelty(&self) -> f64 {
        self.novelty
    }

    /// The endpoint at `address`, added if new and there is room (as last seen at `seen_us`).
    /// Returns its slot and whether it was added.
    pub fn learn(&mut self, address: &str, seen_us: u64, max_endpoints: usize) -> Option<(usize, bool)> {
        if let Some(&i) = self.index.get(address) {
            return Some((i, false));
        }
        if self.endpoints.len() >= max_endpoints || !is_endpoint_address(address) {
            return None;
        }
        self.endpoints.push(Endpoint::new(address, seen_us));
        self.index.insert(address.to_string(), self.endpoints.len() - 1);
        self.sampler_stale = true;
        Some((self.endpoints.len() - 1, true))
    }

    pub fn endpoint_mut(&mut self, slot: usize) -> &mut Endpoint {
        &mut self.endpoints[slot]
    }

    /// Exploration found a new endpoint, or did not.
    pub fn note_discovery(&mut self, found_new: bool) {
        let x = if found_new { 1.0 } else { 0.0 };
        self.novelty = (1.0 - NOVELTY_STEP) * self.novelty + NOVELTY_STEP * x;
    }

    /// Take the aggregator's view of this cluster: learn its endpoints, replace global stats.
    pub fn apply_view(&mut self, view: &ClusterView, expires_us: u64, now_us: u64, max_endpoints: usize) {
        for e in &mut self.endpoints {
            e.global = None;
        }
        for v in &view.endpoints {
            if let Some((slot, _)) = self.learn(&v.address, now_us, max_endpoints) {
                let e = &mut self.endpoints[slot];
                e.global = Some(GlobalStats { weight: v.weight, latency_us: v.latency_us as f64, ejected: v.ejected });
                e.last_seen_us = e.last_seen_us.max(now_us);
            }
        }
        self.view_expires_us = expires_us;
        self.sampler_stale = true;
    }

    /// Forget endpoints unseen for `ttl` (unless requests are in flight to them). Returns how many.
    pub fn expire(&mut self, now_us: u64, ttl_us: u64) -> usize {
        let before = self.endpoints.len();
        self.endpoints.retain(|e| e.local.inflight > 0 || now_us.saturating_sub(e.last_seen_us) < ttl_us);
        let removed = before - self.endpoints.len();
        if removed > 0 {
            self.index = self.endpoints.iter().enumerate().map(|(i, e)| (e.address.clone(), i)).collect();
            self.sampler_stale = true;
        }
        removed
    }

    /// Once per tick: the prior is the median of the fresh latency estimates (like client-side WRR
    /// giving unweighted hosts the median weight), else of the aggregator's, else the default.
    pub fn refresh_prior(&mut self, now_us: u64, p: &PickParams) {
        let fresh_view = self.view_fresh(now_us);
        let mut fresh: Vec<f64> = self.endpoints.iter().filter_map(|e| e.fresh_latency_us(now_us, p)).collect();
        if fresh.is_empty() && fresh_view {
            fresh = self.endpoints.iter().filter_map(|e| e.global.map(|g| g.latency_us)).filter(|l| *l > 0.0).collect();
        }
        self.prior_latency_us = median(&mut fresh).unwrap_or(p.default_latency_us);
    }

    /// Draw one endpoint slot with probability proportional to its sampling weight.
    pub fn sample(&mut self, rng: &mut Rng, now_us: u64) -> Option<usize> {
        if self.endpoints.is_empty() {
            return None;
        }
        let fresh = self.view_fresh(now_us);
        if self.sampler_stale || fresh != self.sampled_with_view {
            self.rebuild_sampler(fresh);
        }
        match &self.cumulative {
            None => Some(rng.below(self.endpoints.len())),
            Some(cumulative) => {
                let total = *cumulative.last()?;
                if total <= 0.0 {
                    return None;
                }
                let x = rng.next_f64() * total;
                // First slot whose cumulative weight exceeds x (zero-weight slots are never chosen).
                let slot = cumulative.partition_point(|&c| c <= x);
                Some(slot.min(self.endpoints.len() - 1))
            }
        }
    }

    fn rebuild_sampler(&mut self, fresh: bool) {
        let weights: Vec<f64> = self.endpoints.iter().map(|e| e.sampling_weight(fresh)).collect();
        let uniform = weights.iter().all(|w| *w == weights[0]) && weights[0] > 0.0;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::EndpointView;

    fn view(entries: &[(&str, f64, bool)]) -> ClusterView {
        ClusterView {
            name: "c".into(),
            endpoints: entries
                .iter()
                .map(|(a, w, ejected)| EndpointView {
                    address: a.to_string(),
                    weight: *w,
                    latency_us: 1_000,
                    ejected: *ejected,
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn learns_once_within_the_limit_and_only_addresses() {
        let mut c = Cluster::new(0, 30_000.0);
        assert_eq!(c.learn("10.0.0.1:80", 0, 2), Some((0, true)));
        assert_eq!(c.learn("10.0.0.1:80", 0, 2), Some((0, false)));
        assert_eq!(c.learn("not-an-address", 0, 2), None);
        assert_eq!(c.learn("10.0.0.2:80", 0, 2), Some((1, true)));
        assert_eq!(c.learn("10.0.0.3:80", 0, 2), None, "full");
    }

    #[test]
    fn expiry_forgets_unseen_endpoints_but_not_busy_ones() {
        let mut c = Cluster::new(0, 30_000.0);
        c.learn("10.0.0.1:80", 0, 10);
        c.learn("10.0.0.2:80", 0, 10);
        c.learn("10.0.0.3:80", 500, 10);
        c.get_mut("10.0.0.2:80").unwrap().local.inflight = 1;
        assert_eq!(c.expire(1_000, 1_000), 1);
        assert!(c.get("10.0.0.1:80").is_none());
        assert!(c.get("10.0.0.2:80").is_some(), "requests in flight keep it");
        assert_eq!(c.get("10.0.0.3:80").unwrap().address, "10.0.0.3:80", "index rebuilt");
    }

    #[test]
    fn view_teaches_endpoints_and_weights_until_it_expires() {
        let mut c = Cluster::new(0, 30_000.0);
        c.apply_view(&view(&[("10.0.0.1:80", 3.0, false), ("10.0.0.2:80", 1.0, false)]), 1_000, 0, 10);
        assert_eq!(c.len(), 2);
        assert!(c.view_fresh(999) && !c.view_fresh(1_000));
        let mut rng = Rng::new(9);
        let mut hits = [0u32; 2];
        for _ in 0..40_000 {
            hits[c.sample(&mut rng, 0).unwrap()] += 1;
        }
        let share = hits[0] as f64 / 40_000.0;
        assert!((share - 0.75).abs() < 0.02, "weighted 3:1, got {share}");
        // Past expiry, sampling is uniform again.
        hits = [0; 2];
        for _ in 0..40_000 {
            hits[c.sample(&mut rng, 2_000).unwrap()] += 1;
        }
        let share = hits[0] as f64 / 40_000.0;
        assert!((share - 0.5).abs() < 0.02, "uniform, got {share}");
    }

    #[test]
    fn ejected_endpoints_are_never_sampled() {
        let mut c = Cluster::new(0, 30_000.0);
        c.apply_view(&view(&[("10.0.0.1:80", 1.0, true), ("10.0.0.2:80", 1.0, false)]), 1_000, 0, 10);
        let mut rng = Rng::new(1);
        for _ in 0..1_000 {
            assert_eq!(c.sample(&mut rng, 0), Some(1));
        }
        // Known here but absent from the view: the mean weight (1), not excluded.
        c.apply_view(&view(&[("10.0.0.1:80", 1.0, true)]), 1_000, 0, 10);
        assert_eq!(c.sample(&mut rng, 0), Some(1));
        c.apply_view(&view(&[("10.0.0.1:80", 1.0, true), ("10.0.0.2:80", 1.0, true)]), 1_000, 0, 10);
        assert_eq!(c.sample(&mut rng, 0), None, "all ejected: nothing to sample");
    }

    #[test]
    fn a_new_view_clears_global_stats_of_endpoints_it_omits() {
        let mut c = Cluster::new(0, 30_000.0);
        c.apply_view(&view(&[("10.0.0.1:80", 2.0, false), ("10.0.0.2:80", 1.0, false)]), 1_000, 0, 10);
        c.apply_view(&view(&[("10.0.0.1:80", 2.0, false)]), 1_000, 0, 10);
        assert!(c.get("10.0.0.2:80").unwrap().global.is_none());
    }

    #[test]
    fn prior_is_the_median_of_fresh_estimates() {
        let p = PickParams::default();
        let mut c = Cluster::new(0, 30_000.0);
        for (i, lat) in [1_000u64, 2_000, 9_000].iter().enumerate() {
            let (slot, _) = c.learn(&format!("10.0.0.{}:80", i + 1), 0, 10).unwrap();
            c.endpoint_mut(slot).record(*lat, false, None, 0, &p);
        }
        c.refresh_prior(0, &p);
        assert_eq!(c.prior_latency_us(), 2_000.0);
        c.refresh_prior(p.stale_after_us + 1, &p);
        assert_eq!(c.prior_latency_us(), 30_000.0, "all stale, no view: the default");
    }

    #[test]
    fn novelty_decays_when_exploration_finds_nothing_new() {
        let mut c = Cluster::new(0, 30_000.0);
        for _ in 0..10 {
            c.note_discovery(false);
        }
        assert!((c.novelty() - 0.8f64.powi(10)).abs() < 1e-12);
        c.note_discovery(true);
        assert!(c.novelty() > 0.2);
    }
}
