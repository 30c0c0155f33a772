//! One VM's state: its balancer, metrics, shared-data slot, and what it has taken from the shared
//! views. The tick folds the other workers' snapshots and the aggregator's views in, and elects
//! the one VM that reports this period.

use crate::host;
use crate::metrics::{self, Metrics};
use crate::reporter::Reporter;
use crate::shared::{self, Slot};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use tailweight_core::snapshot::{self, Part};
use tailweight_core::{Balancer, FilterConfig, Settings};

/// A slot not rewritten for this many ticks belongs to a VM that is gone: its counters still
/// count, its in-flight requests do not.
const LIVE_TICKS: u64 = 3;

pub struct Worker {
    pub config: FilterConfig,
    pub balancer: Balancer,
    pub metrics: Metrics,
    pub reporter: Option<Reporter>,
    slot: Option<u64>,
    /// CAS token of the view applied per cluster, so unchanged views are not parsed again.
    seen_views: HashMap<String, Option<u32>>,
    newest_view_us: u64,
}

impl Worker {
    pub fn new(config: FilterConfig) -> Self {
        let seed = random_u64();
        shared::init(seed);
        let reporter = config.aggregator.as_ref().map(|_| Reporter::new(reporter_id(&config), shared::incarnation()));
        Worker {
            balancer: Balancer::new(Settings::from(&config), seed),
            metrics: Metrics::define(config.per_endpoint_metrics),
            reporter,
            slot: None,
            seen_views: HashMap::new(),
            newest_view_us: 0,
            config,
        }
    }

    pub fn tick(&mut self, now_us: u64) {
        let forgotten = self.balancer.tick(now_us);
        host::increment(self.metrics.endpoints_forgotten, forgotten as i64);
        let own = Slot { written_us: now_us, clusters: self.balancer.snapshot(now_us) };
        let slot = *self.slot.get_or_insert_with(|| shared::claim_slot().unwrap_or(u64::MAX));
        if slot != u64::MAX {
            shared::publish_slot(slot, &own);
        }
        let others: Vec<Slot> =
            (0..shared::slots_claimed()).filter(|s| *s != slot).filter_map(shared::read_slot).collect();
        let live_after = now_us.saturating_sub(LIVE_TICKS * self.config.sync_interval_ms * 1_000);
        let parts: Vec<Part> = others
            .iter()
            .map(|s| Part { written_us: s.written_us, live: s.written_us >= live_after, clusters: &s.clusters })
            .collect();
        self.balancer.apply_siblings(&parts, now_us);
        // Every VM knows the same endpoints after folding its siblings in, so any writer is right.
        host::record(self.metrics.endpoints_tracked, self.balancer.endpoints_tracked() as u64);
        host::record(self.metrics.clusters_paused, self.balancer.clusters_paused(now_us) as u64);
        self.apply_views(now_us);
        if self.reporter.is_some() {
            self.maybe_report(now_us, &own, &parts);
        }
    }

    fn apply_views(&mut self, now_us: u64) {
        let clusters: Vec<String> = self.balancer.cluster_names().map(str::to_string).collect();
        for cluster in clusters {
            let seen = self.seen_views.get(&cluster).copied().flatten();
            if let Some((stored, cas)) = shared::view_if_changed(&cluster, seen) {
                self.balancer.apply_view(&stored.view, stored.received_us, u64::from(stored.ttl_ms) * 1_000);
                self.newest_view_us = self.newest_view_us.max(stored.received_us);
                self.seen_views.insert(cluster, cas);
                metrics::inc(self.metrics.views_applied);
            }
        }
        self.seen_views.retain(|c, _| self.balancer.cluster(c).is_some());
        if self.newest_view_us > 0 {
            host::record(self.metrics.weights_age_ms, now_us.saturating_sub(self.newest_view_us) / 1_000);
        }
    }

    /// The first VM to tick in a report period sends this Envoy's report: all slots merged.
    fn maybe_report(&mut self, now_us: u64, own: &Slot, others: &[Part]) {
        let Some(aggregator) = &self.config.aggregator else { return };
        let epoch = now_us / 1_000 / aggregator.report_interval_ms;
        if !shared::claim_report(epoch) {
            return;
        }
        let mut parts = others.to_vec();
        parts.push(Part { written_us: own.written_us, live: true, clusters: &own.clusters });
        let merged = snapshot::merge(&parts, now_us);
        if let Some(reporter) = &mut self.reporter {
            reporter.send(aggregator, merged, &self.metrics);
        }
    }
}

/// POD_NAME.POD_NAMESPACE from the VM env (Istio `vmConfig.env`), else Envoy's node id.
fn reporter_id(config: &FilterConfig) -> String {
    if let Some(id) = &config.reporter_id {
        return id.clone();
    }
    match (host::env("POD_NAME"), host::env("POD_NAMESPACE")) {
        (Some(pod), Some(ns)) => format!("{pod}.{ns}"),
        (Some(pod), None) => pod,
        // Envoy 1.40 serves the node as `xds.node`; older hosts as `node`.
        _ => host::property(&["xds", "node", "id"])
            .or_else(|| host::property(&["node", "id"]))
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| "envoy".into()),
    }
}

/// Randomness from the host (WASI random_get, through std's hasher keys) mixed with the clock.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(host::now_us());
    h.finish()
}
