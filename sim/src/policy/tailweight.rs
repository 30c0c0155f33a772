//! tailweight as the filter runs it, one core `Balancer` per client proxy (one worker each, so no
//! siblings): `pick` per request (a steered pick names the endpoint; exploration and "no candidate"
//! go to Envoy's fallback LEAST_REQUEST on the proxy's own active requests), `complete` per
//! response with the served address, latency, failure and ORCA load, `tick` every sync interval.
//!
//! With the aggregator (`tailweight`): on the first tick of each report interval the proxy sends
//! `Report { clusters: balancer.snapshot(now) }`; it reaches the simulated aggregator (core's
//! `WeightBook`) after the network delay, which ingests it and answers at once with its current
//! view; the reply arrives one delay later and, like the filter's shared-data hand-over, is applied
//! on the proxy's next tick with `apply_view(view, received, ttl)`. The aggregator recomputes and
//! expires every report interval.

use super::active::Active;
use super::{phase, Choice, Ctx, Outcome, Policy, Timer};
use std::net::SocketAddrV4;
use tailweight_core::orca::OrcaLoad;
use tailweight_core::rng::Rng;
use tailweight_core::weights::{WeightBook, WeightParams};
use tailweight_core::wire::{self, Reply, Report};
use tailweight_core::{Balancer, FilterConfig, Pick, ResponseClass, Settings};

/// The cluster every client sends to (Istio's naming).
pub const CLUSTER: &str = "outbound|8080||backend.sim.svc.cluster.local";
/// A choice's token: the in-flight epoch of a steered pick shifted left, with this bit set.
const STEERED: u32 = 1;
const FALLBACK: u32 = 0;

const TICK: u8 = 0;
const REPORT_ARRIVES: u8 = 1;
const REPLY_ARRIVES: u8 = 2;
const RECOMPUTE: u8 = 3;

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

struct Aggregator {
    book: WeightBook,
    report_interval_ns: u64,
    /// What each client sent and has not been ingested yet, and replies not yet arrived / applied.
    in_transit: Vec<Option<Report>>,
    replies: Vec<Option<Reply>>,
    ready: Vec<Option<(Reply, u64)>>,
    last_report_epoch: Vec<u64>,
    incarnation: u64,
    rejected: u64,
}

pub struct Tailweight {
    balancers: Vec<Balancer>,
    addresses: Vec<String>,
    fallback: Active,
    rng: Rng,
    sync_interval_ns: u64,
    aggregator: Option<Aggregator>,
    /// Requests left to the fallback (exploration or nothing known), for the results.
    pub fallbacks: u64,
    pub steered: u64,
}

impl Tailweight {
    /// `config` is the filter's plugin configuration; `with_aggregator` adds the report/reply loop.
    pub fn new(clients: u32, endpoints: u32, config: &FilterConfig, with_aggregator: bool, seed: u64) -> Tailweight {
        let mut rng = Rng::new(seed);
        let settings = Settings::from(config);
        let balancers = (0..clients).map(|_| Balancer::new(settings.clone(), rng.next_u64())).collect();
        let report_interval_ms = config.aggregator.as_ref().map_or(1_000, |a| a.report_interval_ms);
        let aggregator = with_aggregator.then(|| Aggregator {
            book: WeightBook::new(WeightParams::default()),
            report_interval_ns: report_interval_ms * 1_000_000,
            in_transit: vec![None; clients as usize],
            replies: vec![None; clients as usize],
            ready: vec![None; clients as usize],
            last_report_epoch: vec![u64::MAX; clients as usize],
            incarnation: rng.next_u64() | 1,
            rejected: 0,
        });
        Tailweight {
            balancers,
            addresses: (0..endpoints).map(address).collect(),
            fallback: Active::new(clients, endpoints as usize),
            rng,
            sync_interval_ns: config.sync_interval_ms * 1_000_000,
            aggregator,
            fallbacks: 0,
            steered: 0,
        }
    }

    /// Reports the aggregator refused (a cap was hit).
    pub fn rejected_reports(&self) -> u64 {
        self.aggregator.as_ref().map_or(0, |a| a.rejected)
    }

    fn on_tick(&mut self, client: u32, ctx: &mut Ctx) {
        let now_us = ctx.now_ns / 1_000;
        let balancer = &mut self.balancers[client as usize];
        balancer.tick(now_us);
        let Some(agg) = &mut self.aggregator else { return };
        if let Some((reply, received_us)) = agg.ready[client as usize].take() {
            for view in &reply.clusters {
                balancer.apply_view(view, received_us, u64::from(reply.ttl_ms) * 1_000);
            }
        }
        let epoch = ctx.now_ns / agg.report_interval_ns;
        if agg.last_report_epoch[client as usize] != epoch {
            agg.last_report_epoch[client as usize] = epoch;
            let clusters = balancer.snapshot(now_us);
            if !clusters.is_empty() {
                agg.in_transit[client as usize] = Some(Report {
                    version: wire::VERSION,
                    reporter: reporter_id(client),
                    incarnation: agg.incarnation ^ u64::from(client),
                    interval_ms: (agg.report_interval_ns / 1_000_000) as u32,
                    clusters,
                });
                ctx.after(ctx.network_delay_ns, Timer { kind: REPORT_ARRIVES, arg: client });
            }
        }
    }

    fn on_report(&mut self, client: u32, ctx: &mut Ctx) {
        let Some(agg) = &mut self.aggregator else { return };
        let Some(report) = agg.in_transit[client as usize].take() else { return };
        let now_us = ctx.now_ns / 1_000;
        if agg.book.ingest(&report, now_us).is_err() {
            agg.rejected += 1;
            return;
        }
        agg.replies[client as usize] = Some(agg.book.reply(&report.reporter, [CLUSTER], now_us));
        ctx.after(ctx.network_delay_ns, Timer { kind: REPLY_ARRIVES, arg: client });
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
        let pick = self.balancers[client as usize].pick(CLUSTER, ctx.now_ns / 1_000);
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
                Choice { endpoint: self.fallback.least_of_two(client, &mut self.rng), token: FALLBACK }
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
        let result = tailweight_core::RequestOutcome {
            served: Some(served),
            attempts: 1,
            latency_us: outcome.latency_ns / 1_000,
            class,
            load: Some(load),
        };
        let balancer = &mut self.balancers[client as usize];
        // The response is the first and only message: it ends the wait and the request at once.
        let chosen = (choice.token & STEERED == STEERED).then_some(served);
        if let Some(chosen) = chosen {
            balancer.release(CLUSTER, chosen, u64::from(choice.token >> 1));
        }
        balancer.complete(CLUSTER, chosen, &result, ctx.now_ns / 1_000);
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
            RECOMPUTE => {
                if let Some(agg) = &mut self.aggregator {
                    let now_us = ctx.now_ns / 1_000;
                    agg.book.expire(now_us);
                    agg.book.recompute(now_us);
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
    fn addresses_round_trip_and_are_valid_for_core() {
        for e in [0u32, 1, 255, 256, 70_000, (1 << 24) - 2] {
            let a = address(e);
            assert!(wire::is_endpoint_address(&a), "{a}");
            assert_eq!(endpoint_of(&a), Some(e), "{a}");
        }
        assert_eq!(address(0), "10.0.0.1:8080");
        assert_eq!(endpoint_of("11.0.0.1:8080"), None);
        assert_eq!(endpoint_of("10.0.0.0:8080"), None);
        assert_eq!(endpoint_of("garbage"), None);
    }
}
