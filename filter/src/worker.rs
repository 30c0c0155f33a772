//! One VM's state: its balancer, metrics, shared-data slot, and what it has taken from the other
//! VMs and the shared views. The tick publishes this VM's snapshot when its observations changed,
//! folds in the other VMs' snapshots and the aggregator's views when theirs did, and elects the one
//! VM that reports this period (when there is something to report). An idle VM's tick touches no
//! shared data (but the one setting the gauges: see `tick`).

use crate::digest::report_digest;
use crate::health_checker::HealthChecker;
use crate::host;
use crate::metrics::{self, Metrics};
use crate::reporter::Reporter;
use crate::shared::{self, Slot};
use crate::shared_layout::{Beat, LastReport};
use tailweight_picker::inspect::inspect;
use tailweight_picker::snapshot::{self, Part};
use tailweight_picker::tick;
use tailweight_picker::{Balancer, FilterConfig, Settings};

/// A VM whose heartbeat is older than this many of the slowest ticks is gone: its counters still
/// count, its in-flight requests do not.
const LIVE_TICKS: u64 = 3;
/// The number of slots claimed is read again every this many full ticks (VMs come only when Envoy
/// loads a configuration; a new one is folded in within these ticks).
const SLOTS_REREAD_TICKS: u64 = 8;

/// What this VM last read of another VM's slot.
struct SiblingSlot {
    number: u64,
    version: u64,
    live: bool,
    /// Silent for longer than the endpoint ttl (see `Beat::gone`): its snapshot is dropped and its
    /// beat read only every `SLOTS_REREAD_TICKS` ticks.
    gone: bool,
    snapshot: Slot,
}

pub struct Worker {
    pub config: FilterConfig,
    pub balancer: Balancer,
    pub metrics: Metrics,
    pub reporter: Option<Reporter>,
    /// With `health_check_path`: the out-of-band checks of suspended endpoints.
    pub health_checker: Option<HealthChecker>,
    /// Whether the listener direction was compared with the role yet (on the first request).
    pub direction_checked: bool,
    /// This VM's slot (u64::MAX: none could be claimed), the id it holds it by, and when it last
    /// wrote its beat there.
    slot: Option<u64>,
    holder: u64,
    last_beat_us: u64,
    /// This VM's published snapshot, its version, and the balancer revision it was taken at.
    own: Slot,
    own_version: u64,
    own_revision: Option<u64>,
    siblings: Vec<SiblingSlot>,
    /// CAS token of the view applied per cluster, so unchanged views are not decoded again; the
    /// views version last looked at.
    seen_views: Vec<(String, Option<u32>)>,
    views_version: Option<u64>,
    newest_view_us: u64,
    /// The tick period set now, and the balancer revision at the last tick.
    tick_ms: u64,
    last_revision: u64,
    /// Gauges as last recorded (a gauge is set only when it changes), and this VM's share of
    /// clusters_paused.
    gauges: [u64; 3],
    paused_counted: i64,
    /// Whether this VM set the gauges at its last full tick, and whether it marked itself gone
    /// (idle: see `tick`).
    sets_gauges: bool,
    left: bool,
    /// Full ticks so far, and the slots claimed as last read (see `SLOTS_REREAD_TICKS`).
    full_ticks: u64,
    slots_claimed: u64,
    /// The start (ms) of the latest report period this VM knows was claimed.
    claimed_ms: u64,
}

impl Worker {
    pub fn new(config: FilterConfig) -> Self {
        let seed = host::random_u64();
        shared::init(seed);
        let reporter = config.aggregator.as_ref().map(|_| Reporter::new(reporter_id(&config), shared::incarnation()));
        Worker {
            balancer: Balancer::new(Settings::from(&config), seed),
            metrics: Metrics::define(config.per_endpoint_metrics),
            reporter,
            health_checker: config.health_check.clone().map(|h| HealthChecker::new(h, &config.header)),
            direction_checked: false,
            slot: None,
            holder: host::random_u64(),
            last_beat_us: 0,
            own: Slot::default(),
            own_version: 0,
            own_revision: None,
            siblings: Vec::new(),
            seen_views: Vec::new(),
            views_version: None,
            newest_view_us: 0,
            tick_ms: config.sync_interval_ms,
            last_revision: 0,
            gauges: [u64::MAX; 3],
            paused_counted: 0,
            sets_gauges: false,
            left: false,
            full_ticks: 0,
            slots_claimed: 0,
            claimed_ms: 0,
            config,
        }
    }

    /// One tick; returns a new tick period when this VM's request rate calls for one (see `tick`).
    pub fn tick(&mut self, now_us: u64) -> Option<u64> {
        let probe = crate::probe::span(crate::probe::Site::TickBalancer);
        let forgotten = self.balancer.tick(now_us);
        drop(probe);
        if forgotten > 0 {
            host::increment(self.metrics.endpoints_forgotten, forgotten as i64);
        }
        if let Some(checker) = &mut self.health_checker {
            checker.tick(&mut self.balancer, &self.metrics, now_us);
        }
        self.count_paused(now_us);
        // Idle: this VM has never served a request (the main thread's VM, which serves none, from
        // its second tick on) and nothing of it changed since its last tick. It has nothing to
        // publish or report and no request needs its siblings' counts or the views, so it leaves
        // shared data alone until it has requests (then its next tick catches up), after one last
        // beat marking it gone. A worker that has served requests keeps ticking in full even when
        // quiet: its snapshot and its beat are what keep its endpoints in this Envoy's reports.
        if self.own_revision == Some(self.balancer.revision()) && self.own.clusters.is_empty() {
            if let (Some(slot), false) = (self.slot.filter(|s| *s != u64::MAX), self.left) {
                shared::write_beat(slot, Beat { version: self.own_version, at_us: 0, holder: self.holder });
                self.left = true;
                // A beat at 0 is gone at once: another VM may take the slot over, so this one
                // claims one again when it has requests.
                self.slot = None;
            }
            self.gauges = [u64::MAX; 3];
            self.sets_gauges = false;
            return self.next_period();
        }
        self.left = false;
        let slot = self.own_slot(now_us);
        let probe = crate::probe::span(crate::probe::Site::TickPublish);
        if self.own_revision != Some(self.balancer.revision()) {
            self.own = Slot { written_us: now_us, clusters: self.balancer.snapshot(now_us) };
            self.own_version += 1;
            self.own_revision = Some(self.balancer.revision());
            if slot != u64::MAX {
                shared::publish_slot(slot, &self.own);
            }
        }
        if slot != u64::MAX {
            shared::write_beat(slot, Beat { version: self.own_version, at_us: now_us, holder: self.holder });
            self.last_beat_us = now_us;
        }
        drop(probe);
        let probe = crate::probe::span(crate::probe::Site::TickSiblings);
        let siblings_changed = self.read_siblings(slot, now_us);
        drop(probe);
        let probe = crate::probe::span(crate::probe::Site::TickApplySiblings);
        if siblings_changed {
            let parts: Vec<Part> = self.siblings.iter().map(SiblingSlot::part).collect();
            self.balancer.apply_siblings(&parts, now_us);
        }
        // Gauges are process-wide. Every VM knows the same endpoints and views after folding its
        // siblings in, so one VM sets those, each when it changes: the live VM of the lowest slot
        // (a VM that claimed a slot and went away, e.g. one Envoy made while loading the
        // configuration, or one gone idle, hands over once its heartbeat is stale).
        drop(probe);
        let probe = crate::probe::span(crate::probe::Site::TickGauges);
        self.sets_gauges = self.siblings.iter().all(|s| !s.live || s.number > slot);
        if !self.sets_gauges {
            self.gauges = [u64::MAX; 3];
        } else {
            let age_ms = if self.newest_view_us > 0 { now_us.saturating_sub(self.newest_view_us) / 1_000 } else { 0 };
            let gauges = [self.balancer.endpoints_tracked() as u64, age_ms, self.slots_claimed];
            let metrics = [self.metrics.endpoints_tracked, self.metrics.weights_age_ms, self.metrics.vm_slots];
            for ((metric, value), last) in metrics.into_iter().zip(gauges).zip(&mut self.gauges) {
                if value != *last {
                    host::record(metric, value);
                    *last = value;
                }
            }
        }
        self.record_endpoint_gauges(now_us);
        drop(probe);
        let probe = crate::probe::span(crate::probe::Site::TickViews);
        self.apply_views();
        drop(probe);
        let _probe = crate::probe::span(crate::probe::Site::TickReport);
        if self.reporter.is_some() {
            self.maybe_report(now_us);
        }
        self.next_period()
    }

    /// This VM's slot: the one it holds, or one claimed now (a gone VM's, else a new one; see
    /// `shared::claim_slot`). A VM silent for longer than the live window (the shortest time after
    /// which another VM may take its slot for gone) first checks that it still holds it.
    fn own_slot(&mut self, now_us: u64) -> u64 {
        let live_ms = self.live_ms();
        let silent = now_us.saturating_sub(self.last_beat_us) > live_ms.saturating_mul(1_000);
        match self.slot {
            Some(u64::MAX) => return u64::MAX,
            Some(slot) if !silent || shared::read_beat(slot).is_some_and(|b| b.holder == self.holder) => return slot,
            _ => {}
        }
        let ttl_ms = self.config.endpoint_ttl_ms;
        let claimed = shared::claim_slot(self.holder, now_us, |b| b.gone(now_us, ttl_ms, live_ms));
        let (slot, version) = claimed.unwrap_or((u64::MAX, 0));
        // The first snapshot is published at once, as the slot's next version.
        (self.own_version, self.own_revision, self.slot) = (version, None, Some(slot));
        self.siblings.retain(|s| s.number != slot);
        slot
    }

    /// How long a VM's beat counts as live (its in-flight requests count): `LIVE_TICKS` slowest ticks.
    fn live_ms(&self) -> u64 {
        LIVE_TICKS * tick::slowest_tick_ms(self.config.sync_interval_ms)
    }

    /// Pauses are each worker's own: each VM adds the change of its count (the gauge is the sum
    /// over workers).
    fn count_paused(&mut self, now_us: u64) {
        let paused = self.balancer.clusters_paused(now_us) as i64;
        if paused != self.paused_counted {
            host::increment(self.metrics.clusters_paused, paused - self.paused_counted);
            self.paused_counted = paused;
        }
    }

    /// The tick period for this VM's request rate since its last tick, if it changed.
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

    /// With `per_endpoint_metrics`, the state, latency and in-flight gauges of each endpoint this VM
    /// has sent requests to, as its picker sees them (with its siblings' folded in), for `tailweight
    /// endpoints`. Health is each worker's own and a gauge is process-wide: each VM records a gauge
    /// when its own value changes, so a gauge shows what the worker that last saw a change saw (the
    /// main thread's VM, which picks nothing, records none).
    fn record_endpoint_gauges(&mut self, now_us: u64) {
        if !self.metrics.per_endpoint() {
            return;
        }
        for name in self.balancer.cluster_names() {
            let Some(cluster) = self.balancer.cluster(name) else { continue };
            let fresh = cluster.view_fresh(now_us);
            for endpoint in cluster.endpoints().iter().filter(|e| e.local.requests > 0) {
                let seen = inspect(endpoint, now_us, fresh);
                let values = [seen.state as u64, seen.latency_us, u64::from(seen.inflight)];
                self.metrics.endpoint_gauges(name, &endpoint.address, values);
            }
        }
    }

    /// Read the other VMs' heartbeats, and the slots whose version moved. True if anything the
    /// siblings' stats come from changed (a new snapshot, or a VM that came or went).
    fn read_siblings(&mut self, own_slot: u64, now_us: u64) -> bool {
        let live_ms = self.live_ms();
        let live_after = now_us.saturating_sub(live_ms * 1_000);
        let mut changed = false;
        let reread = self.full_ticks % SLOTS_REREAD_TICKS == 0;
        if reread {
            self.slots_claimed = shared::slots_claimed();
        }
        self.full_ticks += 1;
        for number in (0..self.slots_claimed).filter(|n| *n != own_slot) {
            let known = self.siblings.iter().position(|s| s.number == number);
            if !reread && known.is_some_and(|at| self.siblings[at].gone) {
                continue;
            }
            let Some(beat) = shared::read_beat(number) else { continue };
            let live = beat.at_us >= live_after;
            let gone = beat.gone(now_us, self.config.endpoint_ttl_ms, live_ms);
            let at = known.unwrap_or_else(|| {
                self.siblings.push(SiblingSlot { number, version: 0, live, gone: false, snapshot: Slot::default() });
                self.siblings.len() - 1
            });
            let sibling = &mut self.siblings[at];
            if gone {
                if !sibling.snapshot.clusters.is_empty() {
                    sibling.snapshot = Slot::default();
                    changed = true;
                }
                // Read again once it beats: whatever it publishes then is new.
                sibling.version = beat.version;
            } else if sibling.version != beat.version {
                if let Some(snapshot) = shared::read_slot(number) {
                    (sibling.snapshot, sibling.version) = (snapshot, beat.version);
                    changed = true;
                }
            }
            changed |= sibling.live != live;
            (sibling.live, sibling.gone) = (live, gone);
        }
        changed
    }

    fn apply_views(&mut self) {
        let version = shared::views_version();
        if self.views_version == Some(version) {
            return;
        }
        self.views_version = Some(version);
        let clusters: Vec<String> = self.balancer.cluster_names().map(str::to_string).collect();
        for cluster in clusters {
            let known = self.seen_views.iter().position(|(c, _)| *c == cluster);
            let seen = known.and_then(|at| self.seen_views[at].1);
            if let Some((stored, cas)) = shared::view_if_changed(&cluster, seen) {
                self.balancer.apply_view(&stored.view, stored.received_us, u64::from(stored.ttl_ms) * 1_000);
                self.newest_view_us = self.newest_view_us.max(stored.received_us);
                match known {
                    Some(at) => self.seen_views[at].1 = cas,
                    None => self.seen_views.push((cluster, cas)),
                }
                metrics::inc(self.metrics.views_applied);
            }
        }
        self.seen_views.retain(|(c, _)| self.balancer.cluster(c).is_some());
    }

    /// The first VM to tick in a report period sends this Envoy's report, all slots merged, if
    /// there is something to say: a snapshot changed since the last report (of any VM: the
    /// digest of the slot versions it was made of is in shared data), or requests are in flight.
    /// An idle Envoy sends nothing (the aggregator forgets it; its views expire and it decides
    /// locally until it has traffic again). The period follows the Envoy's request rate since the
    /// last report (`tick::report_period_ms`).
    fn maybe_report(&mut self, now_us: u64) {
        let Some(aggregator) = &self.config.aggregator else { return };
        let now_ms = now_us / 1_000;
        // A period was claimed within the current report interval: every period (a multiple of
        // the interval) that has begun began at or before it, so a claim would fail. Nothing to
        // read until the next interval.
        let interval_ms = aggregator.report_interval_ms.max(1);
        if now_ms / interval_ms * interval_ms <= self.claimed_ms {
            return;
        }
        let own_slot = self.slot.unwrap_or(u64::MAX);
        let digest =
            report_digest(self.siblings.iter().map(|s| (s.number, s.version)).chain([(own_slot, self.own_version)]));
        let endpoints = || {
            self.siblings
                .iter()
                .map(|s| &s.snapshot)
                .chain([&self.own])
                .flat_map(|s| &s.clusters)
                .flat_map(|c| &c.endpoints)
        };
        let last = shared::last_report();
        if digest == last.digest && !endpoints().any(|e| e.inflight > 0) {
            return;
        }
        let requests = endpoints().map(|e| e.requests).fold(0u64, u64::saturating_add);
        let (new_requests, elapsed_ms) = (requests.checked_sub(last.requests), now_ms.saturating_sub(last.at_ms));
        let period_ms = tick::report_period_ms(new_requests, elapsed_ms, aggregator.report_interval_ms);
        let start_ms = now_ms / period_ms * period_ms;
        if let Err(latest_ms) = shared::claim_report(start_ms) {
            self.claimed_ms = self.claimed_ms.max(latest_ms);
            return;
        }
        self.claimed_ms = self.claimed_ms.max(start_ms);
        let mut parts: Vec<Part> = self.siblings.iter().map(SiblingSlot::part).collect();
        parts.push(Part { written_us: self.own.written_us, live: true, clusters: &self.own.clusters });
        let merged = snapshot::merge(&parts, now_us);
        shared::set_last_report(LastReport { digest, requests, at_ms: now_ms });
        if let Some(reporter) = &mut self.reporter {
            reporter.send(aggregator, period_ms, merged, &self.metrics);
        }
    }
}

impl SiblingSlot {
    fn part(&self) -> Part<'_> {
        Part { written_us: self.snapshot.written_us, live: self.live, clusters: &self.snapshot.clusters }
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
