//! tailweight as the filter runs it, one `tailweight_picker::Balancer` per client proxy (one worker each, so no
//! siblings): `pick` per request (a steered pick names the endpoint; exploration and "no candidate"
//! go to Envoy's fallback LEAST_REQUEST on the proxy's own active requests), `complete` per
//! response with the served address, latency, failure and ORCA load, `tick` every sync interval.
//! With load stamps read (`reads_stamps`) each response's stamp (the server's requests in flight
//! right after it) reaches `note_stamp` at its headers: every simulated server stamps truly.
//!
//! With the aggregator (`tailweight`): on the first tick of each report interval the proxy sends
//! `Report { clusters: balancer.snapshot(now) }`; it reaches the simulated aggregator (tailweight-weights'
//! `WeightBook`) after the network delay, which ingests it and answers at once with its current
//! view; the reply arrives one delay later and, like the filter's shared-data hand-over, is applied
//! on the proxy's next tick with `apply_view(view, received, ttl)`. The aggregator recomputes and
//! expires every report interval, and counts what it costs (`AggregatorCost`).
//!
//! With health checks configured, each tick also runs the due checks (`tailweight_checks`).
//!
//! Research variants (`Variant`): with `subset=N` each proxy's Envoy cluster is its deterministic
//! subset (the fallback draws there, the view lists only it); `orca_max_age_ms` and
//! `smoothing_ms` set the book's parameters, and `view_inflight` its view in-flight (the
//! aggregator's `--view-inflight`; see sim/README.md).
//! With `probe_stamps=X` each pick also probes X random endpoints (`probe_transit`); the answers
//! (the endpoint's requests in flight when the probe reached it) reach `note_stamp` as stamps.

use super::active::Active;
use super::probe_transit::ProbeTransit;
use super::tailweight_checks::HealthCheckCount;
use super::{phase, Choice, Ctx, Outcome, Policy, Timer};
use crate::server::Status;
use crate::variant::{deterministic_subsets, Variant};
use serde::Serialize;
use std::net::SocketAddrV4;
use tailweight_math::rng::Rng;
use tailweight_picker::{Balancer, CheckProtocol, DueHealthCheck, Pick, ResponseClass, Settings};
use tailweight_sidecar::FilterConfig;
use tailweight_weights::WeightBook;
use tailweight_wire::orca::OrcaLoad;
use tailweight_wire::protocol;
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::reply::Reply;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::Report;
use tailweight_wire::stamp::LoadStamp;

/// The cluster every client sends to (Istio's naming).
pub const CLUSTER: &str = "outbound|8080||backend.sim.svc.cluster.local";
/// The users' `:authority` (what health checks are sent with).
const AUTHORITY: &str = "backend.sim.svc.cluster.local:8080";
/// A choice's token: the in-flight epoch of a steered pick shifted left, with this bit set.
const STEERED: u32 = 1;
const FALLBACK: u32 = 0;

const TICK: u8 = 0;
const REPORT_ARRIVES: u8 = 1;
const REPLY_ARRIVES: u8 = 2;
const RECOMPUTE: u8 = 3;
const PROBES_ARRIVE: u8 = 4;

/// One report (and reply) in this many is serialised to measure the bytes per endpoint entry.
const BYTES_SAMPLE_EVERY: u64 = 64;
/// Delta entries are counted up to this many clients x endpoints (one counter each).
const DELTA_MAX_CELLS: usize = 1 << 24;

/// Endpoint i is 10.a.b.c:8080 with a.b.c = i + 1 in base 256.
pub fn address(endpoint: u32) -> String {
    let n = endpoint + 1;
    format!("10.{}.{}.{}:8080", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// The endpoint index of an address written by `address`.
pub fn endpoint_of(address: &str) -> Option<u32> {
    let a: SocketAddrV4 = address.parse().ok()?;
    let [ten, x, y, z] = a.ip().octets();
    if ten != 10 {
        return None;
    }
    (u32::from(x) << 16 | u32::from(y) << 8 | u32::from(z)).checked_sub(1)
}

/// What the aggregator did and what it cost over the whole run (for the results' `extra`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AggregatorCost {
    pub reports: u64,
    /// Endpoint entries in all reports, and those a delta report would carry: entries whose request
    /// counter moved since the proxy's previous report, or with requests in flight.
    pub report_entries: u64,
    pub delta_entries: u64,
    pub reply_entries: u64,
    /// JSON bytes per report / reply entry, measured on one report and reply in `BYTES_SAMPLE_EVERY`.
    sampled_report_bytes: u64,
    sampled_report_entries: u64,
    sampled_reply_bytes: u64,
    sampled_reply_entries: u64,
}

impl AggregatorCost {
    pub fn report_bytes_per_entry(&self) -> f64 {
        self.sampled_report_bytes as f64 / self.sampled_report_entries.max(1) as f64
    }

    pub fn reply_bytes_per_entry(&self) -> f64 {
        self.sampled_reply_bytes as f64 / self.sampled_reply_entries.max(1) as f64
    }
}

/// A client's last report: the start of the report period it claimed (None: never reported), the
/// requests it had completed then, and when.
#[derive(Clone, Copy, Default)]
struct SentReport {
    period_start_ms: Option<u64>,
    requests: u64,
    at_ms: u64,
}

struct Aggregator {
    book: WeightBook,
    report_interval_ns: u64,
    /// What each client sent and has not been ingested yet, and replies not yet arrived / applied.
    in_transit: Vec<Option<Report>>,
    replies: Vec<Option<Reply>>,
    ready: Vec<Option<(Reply, u64)>>,
    /// Per client: its last report (the filter's shared `reported`/`report_epoch`), and the
    /// requests it completed so far (what the report period follows).
    last_report: Vec<SentReport>,
    completed: Vec<u64>,
    incarnation: u64,
    rejected: u64,
    /// Per client x endpoint: the request counter in its previous report (for delta reports;
    /// empty above `DELTA_MAX_CELLS`: not counted).
    last_requests: Vec<u64>,
    cost: AggregatorCost,
}

/// Each client's deterministic subset: its endpoints and a membership bitmap.
struct Subsets {
    members: Vec<Vec<u32>>,
    bits: Vec<Vec<u64>>,
}

impl Subsets {
    fn new(clients: u32, endpoints: u32, size: usize, seed: u64) -> Subsets {
        let members = deterministic_subsets(clients, endpoints, size, seed);
        let bits = members
            .iter()
            .map(|m| {
                let mut b = vec![0u64; (endpoints as usize).div_ceil(64)];
                for &e in m {
                    b[e as usize / 64] |= 1 << (e % 64);
                }
                b
            })
            .collect();
        Subsets { members, bits }
    }

    fn contains(&self, client: u32, endpoint: u32) -> bool {
        self.bits[client as usize].get(endpoint as usize / 64).is_some_and(|w| w & (1 << (endpoint % 64)) != 0)
    }
}

pub struct Tailweight {
    balancers: Vec<Balancer>,
    addresses: Vec<String>,
    fallback: Active,
    rng: Rng,
    sync_interval_ns: u64,
    aggregator: Option<Aggregator>,
    subsets: Option<Subsets>,
    /// Requests left to the fallback (exploration or nothing known), for the results.
    pub fallbacks: u64,
    pub steered: u64,
    /// Responses carry server-side load stamps (the filter configuration enables them).
    load_stamps: bool,
    /// Research variant `probe_stamps`: probes per pick, each client's fraction carried over, and
    /// the probes on the network.
    probes_per_pick: f64,
    probe_credit: Vec<f64>,
    probes: ProbeTransit,
    pub health_checks: HealthCheckCount,
    /// The checks due in a tick (kept for its allocation).
    due_checks: Vec<DueHealthCheck>,
}

/// Are the stamps of the one cluster read? As the Helm chart configures the filter: the cluster
/// is in `load_stamp_clusters` when its namespace runs the server role, which by default it does
/// with the aggregator (attestations) and not without; a filter configuration that lists the
/// cluster itself reads them either way. `load_stamp_max_age_ms` 0 turns them off.
pub fn reads_stamps(config: &FilterConfig, with_aggregator: bool) -> bool {
    config.pick.load_stamp_max_age_us > 0 && (with_aggregator || config.reads_stamps_of(CLUSTER))
}

impl Tailweight {
    /// `config` is the filter's plugin configuration; `with_aggregator` adds the report/reply loop.
    pub fn new(
        clients: u32,
        endpoints: u32,
        config: &FilterConfig,
        with_aggregator: bool,
        variant: &Variant,
        seed: u64,
    ) -> Tailweight {
        let mut rng = Rng::new(seed);
        let settings = Settings::from(config);
        let balancers = (0..clients).map(|_| Balancer::new(settings.clone(), rng.next_u64())).collect();
        let report_interval_ms = config.aggregator.as_ref().map_or(1_000, |a| a.report_interval_ms);
        let aggregator = with_aggregator.then(|| Aggregator {
            book: WeightBook::new(variant.weight_params()),
            report_interval_ns: report_interval_ms * 1_000_000,
            in_transit: vec![None; clients as usize],
            replies: vec![None; clients as usize],
            ready: vec![None; clients as usize],
            last_report: vec![SentReport::default(); clients as usize],
            completed: vec![0; clients as usize],
            incarnation: rng.next_u64() | 1,
            rejected: 0,
            last_requests: match clients as usize * endpoints as usize {
                cells if cells <= DELTA_MAX_CELLS => vec![0; cells],
                _ => Vec::new(),
            },
            cost: AggregatorCost::default(),
        });
        // Drawn from the seed only when subsetting, so that other runs keep their random streams.
        let subsets = (variant.subset > 0).then(|| Subsets::new(clients, endpoints, variant.subset, seed ^ 0x5b5e7));
        Tailweight {
            balancers,
            addresses: (0..endpoints).map(address).collect(),
            fallback: Active::new(clients, endpoints as usize),
            rng,
            sync_interval_ns: config.sync_interval_ms * 1_000_000,
            aggregator,
            subsets,
            fallbacks: 0,
            steered: 0,
            load_stamps: reads_stamps(config, with_aggregator),
            probes_per_pick: variant.probe_stamps,
            probe_credit: vec![0.0; if variant.probe_stamps > 0.0 { clients as usize } else { 0 }],
            probes: ProbeTransit::default(),
            health_checks: HealthCheckCount::default(),
            due_checks: Vec::new(),
        }
    }

    /// Variant `probe_stamps`: answers that came back become stamps, then this pick's probes go out.
    fn probe(&mut self, client: u32, ctx: &mut Ctx) {
        while let Some(a) = self.probes.deliver(ctx.now_ns) {
            let served = self.addresses[a.endpoint as usize].as_str();
            self.balancers[a.client as usize].note_stamp(CLUSTER, served, LoadStamp { rif: a.rif }, a.at_ns / 1_000);
        }
        let credit = &mut self.probe_credit[client as usize];
        *credit += self.probes_per_pick;
        let at_server_ns = ctx.now_ns + ctx.network_delay_ns;
        if *credit >= 1.0 {
            ctx.after(ctx.network_delay_ns, Timer { kind: PROBES_ARRIVE, arg: 0 });
        }
        while *credit >= 1.0 {
            *credit -= 1.0;
            self.probes.send(client, self.rng.below(self.addresses.len()) as u32, at_server_ns);
        }
    }

    /// Reports the aggregator refused (a cap was hit).
    pub fn rejected_reports(&self) -> u64 {
        self.aggregator.as_ref().map_or(0, |a| a.rejected)
    }

    /// What the aggregator did and cost (None without one).
    pub fn aggregator_cost(&self) -> Option<&AggregatorCost> {
        self.aggregator.as_ref().map(|a| &a.cost)
    }

    /// The aggregator's last weight of each endpoint it decided on (empty without one).
    pub fn view_weights(&self) -> Vec<(u32, f64)> {
        let Some(agg) = &self.aggregator else { return Vec::new() };
        let decisions = agg.book.decisions(Some(CLUSTER));
        let endpoints = decisions.iter().flat_map(|d| &d.endpoints);
        endpoints.filter_map(|e| endpoint_of(&e.address).map(|i| (i, e.weight))).collect()
    }

    fn on_tick(&mut self, client: u32, ctx: &mut Ctx) {
        let now_us = ctx.now_ns / 1_000;
        let balancer = &mut self.balancers[client as usize];
        balancer.tick(now_us);
        self.health_checks.run_due(balancer, &mut self.due_checks, ctx, endpoint_of);
        let Some(agg) = &mut self.aggregator else { return };
        if let Some((reply, received_us)) = agg.ready[client as usize].take() {
            for view in &reply.clusters {
                balancer.apply_view(view, received_us, u64::from(reply.ttl_ms) * 1_000);
            }
        }
        // As the filter does: the report period follows the requests since the last report.
        let now_ms = ctx.now_ns / 1_000_000;
        let (last, requests) = (agg.last_report[client as usize], agg.completed[client as usize]);
        let interval_ms = agg.report_interval_ns / 1_000_000;
        let period_ms =
            tailweight_sidecar::report_period_ms(Some(requests - last.requests), now_ms - last.at_ms, interval_ms);
        let start_ms = now_ms / period_ms * period_ms;
        if last.period_start_ms.is_none_or(|last_start| start_ms > last_start) {
            agg.last_report[client as usize] = SentReport { period_start_ms: Some(start_ms), requests, at_ms: now_ms };
            let clusters = balancer.snapshot(now_us);
            if !clusters.is_empty() {
                let report = Report {
                    version: protocol::VERSION,
                    reporter: reporter_id(client),
                    incarnation: agg.incarnation ^ u64::from(client),
                    interval_ms: period_ms as u32,
                    clusters,
                };
                agg.count_report(client, &report, self.addresses.len());
                agg.in_transit[client as usize] = Some(report);
                ctx.after(ctx.network_delay_ns, Timer { kind: REPORT_ARRIVES, arg: client });
            }
        }
    }

    fn on_report(&mut self, client: u32, ctx: &mut Ctx) {
        let Some(agg) = &mut self.aggregator else { return };
        let Some(report) = agg.in_transit[client as usize].take() else { return };
        let now_us = ctx.now_ns / 1_000;
        let ingested = agg.book.ingest(&report, now_us);
        let Some(mut reply) = ingested.is_ok().then(|| agg.book.reply(&report.reporter, [CLUSTER], now_us)) else {
            agg.rejected += 1;
            return;
        };
        if let Some(subsets) = &self.subsets {
            for view in &mut reply.clusters {
                view.endpoints.retain(|v| endpoint_of(&v.address).is_some_and(|e| subsets.contains(client, e)));
            }
        }
        agg.count_reply(&reply);
        agg.replies[client as usize] = Some(reply);
        ctx.after(ctx.network_delay_ns, Timer { kind: REPLY_ARRIVES, arg: client });
    }
}

impl Aggregator {
    fn count_report(&mut self, client: u32, report: &Report, endpoints: usize) {
        let c = &mut self.cost;
        c.reports += 1;
        for e in report.clusters.iter().flat_map(|cl| &cl.endpoints) {
            c.report_entries += 1;
            let Some(i) = endpoint_of(&e.address).filter(|i| (*i as usize) < endpoints) else { continue };
            let Some(last) = self.last_requests.get_mut(client as usize * endpoints + i as usize) else { continue };
            if e.requests != *last || e.inflight > 0 {
                c.delta_entries += 1;
            }
            *last = e.requests;
        }
        if c.reports % BYTES_SAMPLE_EVERY == 1 {
            c.sampled_report_bytes += write_report(report).len() as u64;
            c.sampled_report_entries += report.clusters.iter().map(|cl| cl.endpoints.len() as u64).sum::<u64>();
        }
    }

    fn count_reply(&mut self, reply: &Reply) {
        let c = &mut self.cost;
        let entries: u64 = reply.clusters.iter().map(|cl| cl.endpoints.len() as u64).sum();
        c.reply_entries += entries;
        if c.reports % BYTES_SAMPLE_EVERY == 1 {
            c.sampled_reply_bytes += write_reply(reply).len() as u64;
            c.sampled_reply_entries += entries;
        }
    }

    fn recompute(&mut self, now_us: u64) {
        self.book.expire(now_us);
        self.book.recompute(now_us);
    }
}

fn reporter_id(client: u32) -> String {
    format!("client-{client}.sim")
}

impl Policy for Tailweight {
    fn start(&mut self, ctx: &mut Ctx) {
        let clients = self.balancers.len() as u32;
        for client in 0..clients {
            ctx.after(phase(client, clients, self.sync_interval_ns), Timer { kind: TICK, arg: client });
        }
        if let Some(agg) = &self.aggregator {
            ctx.after(agg.report_interval_ns, Timer { kind: RECOMPUTE, arg: 0 });
        }
    }

    fn pick(&mut self, client: u32, ctx: &mut Ctx) -> Choice {
        if self.probes_per_pick > 0.0 {
            self.probe(client, ctx);
        }
        let balancer = &mut self.balancers[client as usize];
        // As the filter does before each pick (nothing with health checks off).
        balancer.note_user_request(CLUSTER, CheckProtocol::Http, ctx.now_ns / 1_000, || Some(AUTHORITY.into()));
        let pick = balancer.pick(CLUSTER, ctx.now_ns / 1_000);
        let steered = match &pick {
            Pick::Steer { header, first_len, epoch } => {
                header.get(..*first_len).and_then(endpoint_of).zip(Some(*epoch))
            }
            _ => None,
        };
        let choice = match steered {
            Some((endpoint, epoch)) if (endpoint as usize) < self.addresses.len() => {
                self.steered += 1;
                Choice { endpoint, token: ((epoch as u32) << 1) | STEERED }
            }
            _ => {
                self.fallbacks += 1;
                let endpoint = match &self.subsets {
                    Some(s) => self.fallback.least_of_two_among(client, &s.members[client as usize], &mut self.rng),
                    None => self.fallback.least_of_two(client, &mut self.rng),
                };
                Choice { endpoint, token: FALLBACK }
            }
        };
        self.fallback.add(client, choice.endpoint);
        choice
    }

    fn complete(&mut self, client: u32, choice: Choice, outcome: &Outcome, ctx: &mut Ctx) {
        self.fallback.remove(client, choice.endpoint);
        let served = self.addresses[choice.endpoint as usize].as_str();
        let load = OrcaLoad {
            cpu_utilization: Some(outcome.orca.utilization),
            application_utilization: None,
            rps_fractional: Some(outcome.orca.rps),
            eps: Some(outcome.orca.eps),
        };
        let class = if outcome.failed { ResponseClass::Failure } else { ResponseClass::Success };
        let result = tailweight_picker::RequestOutcome {
            served: Some(served),
            attempts: 1,
            latency_us: outcome.latency_ns / 1_000,
            class,
            load: Some(load),
        };
        let balancer = &mut self.balancers[client as usize];
        let now_us = ctx.now_ns / 1_000;
        // The response is the first and only message: it ends the wait and the request at once.
        let chosen = (choice.token & STEERED == STEERED).then_some(served);
        if let Some(chosen) = chosen {
            balancer.release(CLUSTER, chosen, u64::from(choice.token >> 1));
        }
        // The server's sidecar stamps the response headers (a refused connection has none).
        if self.load_stamps && !outcome.failed {
            balancer.note_stamp(CLUSTER, served, LoadStamp { rif: outcome.rif }, now_us);
        }
        balancer.complete(CLUSTER, chosen, &result, now_us);
        if let Some(agg) = &mut self.aggregator {
            agg.completed[client as usize] += 1;
        }
    }

    fn timer(&mut self, timer: Timer, ctx: &mut Ctx) {
        match timer.kind {
            TICK => {
                self.on_tick(timer.arg, ctx);
                ctx.after(self.sync_interval_ns, timer);
            }
            REPORT_ARRIVES => self.on_report(timer.arg, ctx),
            REPLY_ARRIVES => {
                if let Some(agg) = &mut self.aggregator {
                    let client = timer.arg as usize;
                    if let Some(reply) = agg.replies[client].take() {
                        agg.ready[client] = Some((reply, ctx.now_ns / 1_000));
                    }
                }
            }
            PROBES_ARRIVE => {
                let servers = ctx.servers;
                let up = |e: u32| Some(&servers[e as usize]).filter(|s| s.status == Status::Up);
                self.probes.arrive(ctx.now_ns, ctx.network_delay_ns, |e| up(e).map(|s| (s.in_flight(), 0.0)));
            }
            RECOMPUTE => {
                if let Some(agg) = &mut self.aggregator {
                    agg.recompute(ctx.now_ns / 1_000);
                    ctx.after(agg.report_interval_ns, timer);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_are_valid_endpoint_addresses() {
        for e in [0u32, 1, 255, 256, 70_000, (1 << 24) - 2] {
            let a = address(e);
            assert!(tailweight_wire::address::is_endpoint_address(&a), "{a}");
            assert_eq!(endpoint_of(&a), Some(e), "{a}");
        }
        assert_eq!(address(0), "10.0.0.1:8080");
        assert_eq!(endpoint_of("11.0.0.1:8080"), None);
        assert_eq!(endpoint_of("10.0.0.0:8080"), None);
        assert_eq!(endpoint_of("garbage"), None);
    }
}
