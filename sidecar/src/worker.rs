//! One client-role worker's state: its balancer, metrics, shared-state slot, and what it has taken
//! from the other workers and the shared views. The tick publishes this worker's snapshot when its
//! observations changed (`slot_lease`), folds in the other workers' snapshots (`siblings`) and the
//! aggregator's views when theirs did, and elects the one worker that reports this period
//! (`report_election`). An idle worker's tick touches no shared state (but the one beat marking it
//! gone: see `tick`).

mod report_election;
mod siblings;
mod slot_lease;

use crate::config::FilterConfig;
use crate::health_checker::HealthChecker;
use crate::host::Host;
use crate::metrics::Metrics;
use crate::reporter::Reporter;
use crate::shared::SharedData;
use crate::tick;
use report_election::ReportElection;
use siblings::Siblings;
pub use slot_lease::SlotHold;
use slot_lease::SlotLease;
use tailweight_picker::{merge_snapshots, Balancer, Settings, SnapshotPart};

/// A worker whose heartbeat is older than this many of the slowest ticks is gone: its counters
/// still count, its in-flight requests do not.
const LIVE_TICKS: u64 = 3;

pub struct Worker {
    pub config: FilterConfig,
    pub balancer: Balancer,
    pub metrics: Metrics,
    pub reporter: Option<Reporter>,
    /// With `health_check_path` or `health_check_grpc`: the out-of-band checks of suspended endpoints.
    pub health_checker: Option<HealthChecker>,
    /// Whether the listener direction was compared with the role yet (on the first request).
    pub direction_checked: bool,
    lease: SlotLease,
    siblings: Siblings,
    election: ReportElection,
    /// CAS token of the view applied per cluster, so unchanged views are not decoded again; the
    /// views version last looked at; when the newest view arrived.
    seen_views: Vec<(String, Option<u32>)>,
    views_version: Option<u64>,
    newest_view_us: u64,
    /// The tick period set now, and the balancer revision at the last tick.
    tick_ms: u64,
    last_revision: u64,
    /// Gauges as last recorded by this worker (None: not set by it), and its share of clusters_paused.
    gauges: [Option<u64>; 3],
    paused_counted: i64,
}

impl Worker {
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn new(config: FilterConfig, host: &impl Host) -> Self {
        let seed = host.random_u64();
        let shared = SharedData(host);
        shared.init(seed);
        let reporter =
            config.aggregator.as_ref().map(|_| Reporter::new(reporter_id(&config, host), shared.incarnation()));
        Worker {
            balancer: Balancer::new(Settings::from(&config), seed),
            metrics: Metrics::define(host, config.per_endpoint_metrics),
            reporter,
            health_checker: config.health_check.clone().map(|h| HealthChecker::new(h, &config.header)),
            direction_checked: false,
            lease: SlotLease::new(host.random_u64()),
            siblings: Siblings::default(),
            election: ReportElection::default(),
            seen_views: Vec::new(),
            views_version: None,
            newest_view_us: 0,
            tick_ms: config.sync_interval_ms,
            last_revision: 0,
            gauges: [None; 3],
            paused_counted: 0,
            config,
        }
    }

    /// The slot this worker holds in the shared state.
    pub fn slot(&self) -> SlotHold {
        self.lease.hold
    }

    /// One tick at `now_us`; returns a new tick period when this worker's request rate calls for one
    /// (see `next_period`).
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn tick(&mut self, host: &impl Host, now_us: u64) -> Option<u64> {
        let forgotten = self.balancer.tick(now_us);
        self.metrics.endpoints_forgotten.add(host, forgotten as u64);
        if let Some(checker) = &mut self.health_checker {
            checker.tick(host, &mut self.balancer, &self.metrics, now_us);
        }
        self.count_paused(host, now_us);
        let shared = SharedData(host);
        // Idle: this worker has never served a request (the main thread's VM, which serves none,
        // from its second tick on) and nothing of it changed since its last tick. It has nothing to
        // publish or report and no request needs its siblings' counts or the views, so it leaves
        // the shared state alone until it has requests (then its next tick catches up), after one
        // last beat marking it gone. A worker that has served requests keeps ticking in full even
        // when quiet: its snapshot and its beat are what keep its endpoints in this proxy's reports.
        if self.lease.idle(&self.balancer) {
            self.lease.leave(&shared);
            self.gauges = [None; 3];
            return self.next_period();
        }
        let (live_ms, ttl_ms) = (self.live_ms(), self.config.endpoint_ttl_ms);
        let had = self.lease.number();
        self.lease.claim(&shared, now_us, live_ms, ttl_ms);
        let own = self.lease.number();
        if let Some(slot) = own.filter(|_| own != had) {
            self.siblings.forget(slot);
        }
        self.lease.publish(&shared, &self.balancer, now_us);
        if self.siblings.read(&shared, own, now_us, live_ms, ttl_ms) {
            let parts: Vec<SnapshotPart> = self.siblings.parts().collect();
            self.balancer.apply_siblings(&parts, now_us);
        }
        self.record_gauges(host, own, now_us);
        self.record_endpoint_gauges(host, now_us);
        self.apply_views(&shared);
        if self.reporter.is_some() {
            self.maybe_report(host, now_us);
        }
        self.next_period()
    }

    /// How long a worker's beat counts as live (its in-flight requests count): `LIVE_TICKS`
    /// slowest ticks.
    #[inline(never)]
    fn live_ms(&self) -> u64 {
        LIVE_TICKS * tick::slowest_tick_ms(self.config.sync_interval_ms)
    }

    /// Pauses are each worker's own: each adds the change of its count (the gauge is the sum over
    /// workers).
    #[inline(never)]
    fn count_paused(&mut self, host: &impl Host, now_us: u64) {
        let paused = self.balancer.clusters_paused(now_us) as i64;
        self.metrics.clusters_paused.add(host, paused - self.paused_counted);
        self.paused_counted = paused;
    }

    /// Gauges are process-wide. Every worker knows the same endpoints and views after folding its
    /// siblings in, so one sets those, each when it changes: the live worker of the lowest slot (a
    /// worker that claimed a slot and went away, e.g. one made while loading the configuration, or
    /// one gone idle, hands over once its heartbeat is stale). A worker without a slot ranks last.
    #[inline(never)]
    fn record_gauges(&mut self, host: &impl Host, own: Option<u64>, now_us: u64) {
        if self.siblings.a_live_one_below(own.unwrap_or(u64::MAX)) {
            self.gauges = [None; 3];
            return;
        }
        let age_ms = if self.newest_view_us > 0 { now_us.saturating_sub(self.newest_view_us) / 1_000 } else { 0 };
        let values = [self.balancer.endpoints_tracked() as u64, age_ms, self.siblings.slots_claimed];
        let gauges = [self.metrics.endpoints_tracked, self.metrics.weights_age_ms, self.metrics.vm_slots];
        for ((gauge, value), last) in gauges.into_iter().zip(values).zip(&mut self.gauges) {
            if *last != Some(value) {
                gauge.set(host, value);
                *last = Some(value);
            }
        }
    }

    /// The tick period for this worker's request rate since its last tick, if it changed.
    #[inline(never)]
    fn next_period(&mut self) -> Option<u64> {
        // Each request moves the revision about three times (pick, release, completion).
        let requests = self.balancer.revision().wrapping_sub(self.last_revision) / 3;
        self.last_revision = self.balancer.revision();
        let wanted = tick::tick_period_ms(tick::requests_per_s(requests, self.tick_ms), self.config.sync_interval_ms);
        (wanted != self.tick_ms).then(|| {
            self.tick_ms = wanted;
            wanted
        })
    }

    /// With `per_endpoint_metrics`, the state, latency and in-flight gauges of each endpoint this
    /// worker has sent requests to, as its picker sees them (with its siblings' folded in), for
    /// `tailweight endpoints`. Health is each worker's own and a gauge is process-wide: each worker
    /// records a gauge when its own value changes, so a gauge shows what the worker that last saw
    /// a change saw (the main thread's VM, which picks nothing, records none).
    #[inline(never)]
    fn record_endpoint_gauges(&mut self, host: &impl Host, now_us: u64) {
        if !self.metrics.per_endpoint() {
            return;
        }
        let Worker { balancer, metrics, .. } = self;
        balancer.inspect_endpoints(now_us, |cluster, address, seen| {
            let values = [seen.state as u64, seen.latency_us, u64::from(seen.inflight)];
            metrics.endpoint_gauges(host, cluster, address, values);
        });
    }

    #[inline(never)]
    fn apply_views(&mut self, shared: &SharedData<impl Host>) {
        let version = shared.views_version();
        if self.views_version == Some(version) {
            return;
        }
        self.views_version = Some(version);
        let clusters: Vec<String> = self.balancer.cluster_names().map(str::to_string).collect();
        for cluster in clusters {
            let known = self.seen_views.iter().position(|(c, _)| *c == cluster);
            let seen = known.and_then(|at| self.seen_views[at].1);
            if let Some((stored, cas)) = shared.view_if_changed(&cluster, seen) {
                self.balancer.apply_view(&stored.view, stored.as_of_us, u64::from(stored.ttl_ms) * 1_000);
                self.newest_view_us = self.newest_view_us.max(stored.as_of_us);
                match known {
                    Some(at) => self.seen_views[at].1 = cas,
                    None => self.seen_views.push((cluster, cas)),
                }
                self.metrics.views_applied.inc(shared.0);
            }
        }
        self.seen_views.retain(|(c, _)| self.balancer.tracks(c));
    }

    /// Send this proxy's report if this worker wins the period (see `report_election`), all
    /// snapshots merged.
    #[inline(never)]
    fn maybe_report(&mut self, host: &impl Host, now_us: u64) {
        let Some(aggregator) = &self.config.aggregator else { return };
        let Worker { siblings, lease, election, .. } = self;
        // A worker without a slot still reports what it saw; its pair is the digest's own key.
        let versions = siblings.versions().chain([(lease.number().unwrap_or(u64::MAX), lease.own_version)]);
        let endpoints =
            || siblings.parts().chain([own_part(lease)]).flat_map(|p| p.clusters).flat_map(|c| &c.endpoints);
        let shared = SharedData(host);
        let Some(period_ms) = election.elect(&shared, aggregator.report_interval_ms, versions, endpoints, now_us)
        else {
            return;
        };
        let parts: Vec<SnapshotPart> = siblings.parts().chain([own_part(lease)]).collect();
        let merged = merge_snapshots(&parts, now_us);
        if let Some(reporter) = &mut self.reporter {
            reporter.send(host, aggregator, period_ms, merged, &self.metrics, now_us);
        }
    }
}

/// This worker's own published snapshot, always live.
fn own_part(lease: &SlotLease) -> SnapshotPart<'_> {
    SnapshotPart { written_us: lease.own.written_us, live: true, clusters: &lease.own.clusters }
}

/// POD_NAME.POD_NAMESPACE from the worker's environment (Istio `vmConfig.env`), else the node id.
fn reporter_id(config: &FilterConfig, host: &impl Host) -> String {
    if let Some(id) = &config.reporter_id {
        return id.clone();
    }
    match (host.env("POD_NAME"), host.env("POD_NAMESPACE")) {
        (Some(pod), Some(ns)) => format!("{pod}.{ns}"),
        (Some(pod), None) => pod,
        _ => host.node_id().filter(|id| !id.is_empty()).unwrap_or_else(|| "envoy".into()),
    }
}
