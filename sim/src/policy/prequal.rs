//! Prequal (Wydrowski et al., "Load is not what you should balance: Introducing Prequal",
//! NSDI'24), per client proxy, with asynchronous probes. Each query is routed from the client's
//! probe pool (`prequal_pool`: hot-cold lexicographic rule, random below `min_pool` probes), then
//! takes `removes_per_query` probes out of the pool (alternately the oldest and the worst) and sends
//! `probes_per_query` probes to random servers for later queries: a probe reaches its server one
//! network delay later, the server answers with its requests in flight (RIF) and its latency
//! estimate at that RIF (`prequal_server`), and the answer joins the pool one more delay later.
//! Each answer may route `reuse_budget` queries (randomly rounded); a routed query adds one to its
//! probe's RIF. The client's hot threshold is the Q_RIF quantile of the RIFs of its last
//! `rif_history` answers. Parameters: `prequal_config` (the paper's by default).
//!
//! A server that refuses connections or fails every request (scenario events `stop`, `fail`)
//! answers no probe: the probe is lost. (The paper's defences against a failing server that still
//! answers probes, "sinkholing", are not published.) Failed queries file no latency.
//!
//! Probes cost the servers nothing here: a probe reads two counters and a small table, and at
//! 3 probes per query a server answers about 3 probes per query it serves (README, "Prequal").

use super::prequal_config::{LatencySignal, PrequalConfig};
use super::prequal_pool::{quantile, Pool, Probe};
use super::prequal_server::RifLatency;
use super::probe_transit::{ProbeAnswer, ProbeTransit};
use super::{Choice, Ctx, Outcome, Policy, Timer};
use crate::server::Status;
use tailweight_math::rng::Rng;

/// Timer kind: probes sent one network delay ago reach their servers.
const PROBES_ARRIVE: u8 = 1;
/// Weight of each response in the legacy moving-average latency.
const EWMA_ALPHA: f64 = 0.1;

/// One client's state besides its pool.
#[derive(Debug, Clone, Default)]
struct ClientState {
    /// RIFs of its last `rif_history` answers (a ring), and the next slot.
    rif_history: Vec<u32>,
    next_rif: usize,
    /// Fractional probes and removals carried to the next query.
    probe_credit: f64,
    remove_credit: f64,
    remove_worst_next: bool,
}

/// How the picks went, for the run's results.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrequalStats {
    pub picks: u64,
    /// Routed at random: fewer than `min_pool` probes pooled.
    pub random_picks: u64,
    /// Routed by a hot probe: every pooled probe was hot.
    pub hot_picks: u64,
    /// Sum of pool sizes at the picks.
    pub pooled_sum: u64,
    pub probes_sent: u64,
}

pub struct Prequal {
    config: PrequalConfig,
    pools: Vec<Pool>,
    clients: Vec<ClientState>,
    /// The servers' latency by RIF at arrival (the paper's signal) and their moving averages.
    by_rif: RifLatency,
    ewma_ns: Vec<f64>,
    transit: ProbeTransit,
    /// This query's probe targets.
    targets: Vec<u32>,
    endpoints: u32,
    reuse_budget: f64,
    scratch: Vec<u32>,
    rng: Rng,
    pub stats: PrequalStats,
}

impl Prequal {
    pub fn new(clients: u32, endpoints: u32, config: &PrequalConfig, seed: u64) -> Prequal {
        let history = config.rif_history;
        Prequal {
            pools: (0..clients).map(|_| Pool::new(config.pool_size, config.one_probe_per_server)).collect(),
            clients: vec![
                ClientState { rif_history: Vec::with_capacity(history), ..Default::default() };
                clients as usize
            ],
            by_rif: RifLatency::new(endpoints as usize),
            ewma_ns: Vec::new(),
            transit: ProbeTransit::default(),
            targets: Vec::new(),
            endpoints,
            reuse_budget: config.reuse_budget(endpoints as usize),
            scratch: Vec::new(),
            config: config.clone(),
            rng: Rng::new(seed),
            stats: PrequalStats::default(),
        }
    }

    /// What server `e` answers a probe with now: its RIF and its latency estimate (None: it is
    /// down and answers nothing).
    fn answer(&self, e: u32, ctx: &Ctx) -> Option<(u32, f64)> {
        let server = &ctx.servers[e as usize];
        if server.status != Status::Up {
            return None;
        }
        let rif = server.in_flight();
        let latency = match self.config.latency {
            LatencySignal::ByRif => self.by_rif.estimate_ns(e, rif).unwrap_or(0.0),
            LatencySignal::Ewma => self.ewma_ns[e as usize],
        };
        Some((rif, latency))
    }

    /// Answers that reached their clients by `now` join the pools.
    fn receive(&mut self, now: u64) {
        while let Some(a) = self.transit.deliver(now) {
            let uses = self.draw_uses();
            let probe = Probe {
                endpoint: a.endpoint,
                rif: a.rif,
                latency_ns: a.latency_ns,
                received_ns: a.at_ns,
                uses_left: uses,
            };
            self.pools[a.client as usize].insert(probe);
            let c = &mut self.clients[a.client as usize];
            if self.config.rif_history > 0 {
                if c.rif_history.len() < self.config.rif_history {
                    c.rif_history.push(a.rif);
                } else {
                    c.rif_history[c.next_rif] = a.rif;
                }
                c.next_rif = (c.next_rif + 1) % self.config.rif_history;
            }
        }
    }

    /// Queries a new probe may route: the reuse budget, rounded up with the probability of its
    /// fraction (so the mean is the budget).
    fn draw_uses(&mut self) -> u32 {
        let whole = self.reuse_budget.floor();
        whole as u32 + self.rng.chance(self.reuse_budget - whole) as u32
    }

    /// The client's hot threshold: the Q_RIF quantile of its RIF estimate.
    fn threshold(&mut self, client: u32) -> Option<u32> {
        self.scratch.clear();
        if self.config.rif_history > 0 {
            self.scratch.extend_from_slice(&self.clients[client as usize].rif_history);
        } else {
            self.scratch.extend(self.pools[client as usize].probes().iter().map(|p| p.rif));
        }
        quantile(&mut self.scratch, self.config.q_rif)
    }

    /// Take this query's removals out of the client's pool: alternately the oldest and the worst.
    fn remove(&mut self, client: u32, threshold: Option<u32>) {
        let c = &mut self.clients[client as usize];
        c.remove_credit += self.config.removes_per_query;
        while c.remove_credit >= 1.0 {
            c.remove_credit -= 1.0;
            let pool = &mut self.pools[client as usize];
            if c.remove_worst_next {
                pool.remove_worst(threshold);
            } else {
                pool.remove_oldest();
            }
            c.remove_worst_next = !c.remove_worst_next;
        }
    }

    /// Send this query's probes to random servers (distinct ones unless configured otherwise).
    fn probe(&mut self, client: u32, ctx: &mut Ctx) {
        let c = &mut self.clients[client as usize];
        c.probe_credit += self.config.probes_per_query;
        let wanted = (c.probe_credit.floor() as usize).min(self.endpoints as usize);
        c.probe_credit -= wanted as f64;
        let delay = ctx.network_delay_ns;
        self.targets.clear();
        for _ in 0..wanted {
            let mut e = self.rng.below(self.endpoints as usize) as u32;
            while self.config.distinct_targets && self.targets.contains(&e) {
                e = self.rng.below(self.endpoints as usize) as u32;
            }
            self.targets.push(e);
            if self.config.answer_on_arrival {
                self.transit.send(client, e, ctx.now_ns + delay);
            } else if let Some((rif, latency_ns)) = self.answer(e, ctx) {
                // The server's state now, delivered a round trip later.
                let at_ns = ctx.now_ns + 2 * delay;
                self.transit.send_answered(ProbeAnswer { at_ns, client, endpoint: e, rif, latency_ns });
            }
        }
        self.stats.probes_sent += wanted as u64;
        if self.config.answer_on_arrival && wanted > 0 {
            ctx.after(delay, Timer { kind: PROBES_ARRIVE, arg: 0 });
        }
    }
}

impl Policy for Prequal {
    fn start(&mut self, ctx: &mut Ctx) {
        self.ewma_ns = ctx.servers.iter().map(|s| s.mean_service_ns()).collect();
    }

    fn pick(&mut self, client: u32, ctx: &mut Ctx) -> Choice {
        let now = ctx.now_ns;
        self.receive(now);
        self.pools[client as usize].expire(now, self.config.max_age_ns);
        let threshold = self.threshold(client);
        let pool = &mut self.pools[client as usize];
        self.stats.picks += 1;
        self.stats.pooled_sum += pool.len() as u64;
        let endpoint = match pool.select(threshold) {
            Some((i, hot)) if pool.len() >= self.config.min_pool.max(1) => {
                self.stats.hot_picks += hot as u64;
                pool.consume(i)
            }
            _ => {
                self.stats.random_picks += 1;
                self.rng.below(self.endpoints as usize) as u32
            }
        };
        self.remove(client, threshold);
        self.probe(client, ctx);
        // The server tags the query with its RIF at arrival (the query reaches it now).
        Choice { endpoint, token: ctx.servers[endpoint as usize].in_flight() }
    }

    fn complete(&mut self, _client: u32, choice: Choice, outcome: &Outcome, _ctx: &mut Ctx) {
        if outcome.failed {
            return;
        }
        self.by_rif.record(choice.endpoint, choice.token, outcome.latency_ns);
        let ewma = &mut self.ewma_ns[choice.endpoint as usize];
        *ewma += EWMA_ALPHA * (outcome.latency_ns as f64 - *ewma);
    }

    fn timer(&mut self, timer: Timer, ctx: &mut Ctx) {
        if timer.kind != PROBES_ARRIVE {
            return;
        }
        let mut transit = std::mem::take(&mut self.transit);
        transit.arrive(ctx.now_ns, ctx.network_delay_ns, |e| self.answer(e, ctx));
        self.transit = transit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;
    use crate::server::{EndpointSpec, Server};

    const DELAY: u64 = 500_000;
    const MS: u64 = 1_000_000;

    fn servers(n: usize) -> Vec<Server> {
        let spec = EndpointSpec { origin: 0, group: 0, workers: 2, base_ns: 10e6, speed: 1.0, jitter: 0.0 };
        (0..n).map(|_| Server::new(spec.clone())).collect()
    }

    fn ctx<'a>(now_ns: u64, servers: &'a [Server], queue: &'a mut Queue) -> Ctx<'a> {
        Ctx { now_ns, servers, queue, network_delay_ns: DELAY }
    }

    fn answered(p: &Prequal, client: u32, endpoint: u32) -> Option<Probe> {
        p.pools[client as usize].probes().iter().find(|x| x.endpoint == endpoint).copied()
    }

    #[test]
    fn a_probe_is_answered_with_the_servers_state_when_it_arrives_and_pooled_a_round_trip_after_sending() {
        let mut s = servers(4);
        let mut q = Queue::default();
        let config = PrequalConfig { probes_per_query: 4.0, ..PrequalConfig::default() };
        let mut p = Prequal::new(1, 4, &config, 1);
        p.start(&mut ctx(0, &s, &mut q));
        p.pick(0, &mut ctx(0, &s, &mut q));
        assert_eq!(p.stats.probes_sent, 4, "four distinct servers of four");
        assert_eq!(q.pop().map(|(t, _, _)| t), Some(DELAY), "the probes reach the servers half a round trip later");
        s[2].add_busy(0, 3); // server 2 takes three requests while the probes travel
        s[0].status = Status::Stopped; // and server 0 stops: its probe is refused
        p.timer(Timer { kind: PROBES_ARRIVE, arg: 0 }, &mut ctx(DELAY, &s, &mut q));
        p.receive(2 * DELAY - 1);
        assert!(p.pools[0].is_empty(), "the answers are still on their way back");
        p.receive(2 * DELAY);
        assert_eq!(pool_endpoints(&p), [1, 2, 3]);
        assert_eq!(answered(&p, 0, 2).map(|x| x.rif), Some(3), "what server 2 had when the probe came, not at sending");
        assert_eq!(answered(&p, 0, 1).map(|x| x.rif), Some(0));
    }

    #[test]
    fn the_latency_in_a_probe_is_the_servers_median_at_its_current_rif() {
        let mut s = servers(2);
        let mut q = Queue::default();
        let mut p = Prequal::new(1, 2, &PrequalConfig::default(), 1);
        p.start(&mut ctx(0, &s, &mut q));
        let ok = |ms: u64| Outcome { latency_ns: ms * MS, failed: false, orca: Default::default(), rif: 0 };
        // Queries that found server 1 idle took ~10 ms; those that found 3 ahead of them ~40 ms.
        for (rif, ms) in [(0, 9), (0, 10), (0, 11), (3, 38), (3, 40), (3, 45)] {
            p.complete(0, Choice { endpoint: 1, token: rif }, &ok(ms), &mut ctx(0, &s, &mut q));
        }
        let failed = Outcome { failed: true, ..ok(1) };
        p.complete(0, Choice { endpoint: 1, token: 0 }, &failed, &mut ctx(0, &s, &mut q));
        assert_eq!(p.answer(1, &ctx(0, &s, &mut q)), Some((0, 10e6)), "idle: the median at RIF 0 (failures not filed)");
        s[1].add_busy(0, 2);
        s[1].queue.push_back(7);
        assert_eq!(p.answer(1, &ctx(0, &s, &mut q)), Some((3, 40e6)), "three in flight: the median at RIF 3");
        // The earlier moving average answered the same wherever the server stood.
        let legacy = Prequal { config: PrequalConfig::legacy(), ..p };
        let (_, ewma) = legacy.answer(1, &ctx(0, &s, &mut q)).unwrap_or_default();
        assert!(ewma > 10e6 && ewma < 40e6, "{ewma}");
    }

    #[test]
    fn each_probe_routes_about_one_query_at_1000_servers() {
        let mut p = Prequal::new(1, 1_000, &PrequalConfig::default(), 9);
        let draws: Vec<u32> = (0..100_000).map(|_| p.draw_uses()).collect();
        assert!(draws.iter().all(|&u| u == 1 || u == 2));
        let mean = draws.iter().sum::<u32>() as f64 / draws.len() as f64;
        assert!((mean - 2.0 / (0.984 * 3.0 - 1.0)).abs() < 0.003, "mean uses {mean}, the budget 1.0246");
        let mut legacy = Prequal::new(1, 1_000, &PrequalConfig::legacy(), 9);
        assert_eq!(legacy.draw_uses(), 2);
    }

    /// A client's pool holding these (endpoint, rif, latency ms, received ns), each with one use.
    fn pooled(config: &PrequalConfig, probes: &[(u32, u32, f64, u64)]) -> Prequal {
        let mut p = Prequal::new(1, 100, config, 3);
        for &(endpoint, rif, ms, received_ns) in probes {
            p.pools[0].insert(Probe { endpoint, rif, latency_ns: ms * 1e6, received_ns, uses_left: 1 });
        }
        p
    }

    fn pool_endpoints(p: &Prequal) -> Vec<u32> {
        let mut e: Vec<u32> = p.pools[0].probes().iter().map(|x| x.endpoint).collect();
        e.sort_unstable();
        e
    }

    #[test]
    fn each_query_uses_the_fastest_cold_probe_then_removes_the_oldest_and_the_next_the_worst() {
        let s = servers(100);
        let mut q = Queue::default();
        let config = PrequalConfig { probes_per_query: 0.0, ..PrequalConfig::default() };
        // The client's recent answers put the hot threshold at RIF 4.
        let mut p =
            pooled(&config, &[(10, 1, 30.0, 5), (11, 9, 1.0, 6), (12, 2, 20.0, 7), (13, 0, 50.0, 8), (14, 3, 60.0, 9)]);
        p.clients[0].rif_history = vec![0, 1, 2, 3, 4, 4, 9];
        p.start(&mut ctx(0, &s, &mut q));
        let first = p.pick(0, &mut ctx(10, &s, &mut q));
        // Server 11 is the fastest but hot (9 > 4): server 12, the fastest cold one, gets the query;
        // its probe is spent, and the oldest (server 10) is removed.
        assert_eq!(first.endpoint, 12);
        assert_eq!(pool_endpoints(&p), [11, 13, 14]);
        let second = p.pick(0, &mut ctx(11, &s, &mut q));
        // Server 13 (cold, 50 ms) beats 14 (60 ms); the worst left is the hot server 11.
        assert_eq!(second.endpoint, 13);
        assert_eq!(pool_endpoints(&p), [14]);
        // One probe left: below the paper's two, the query goes to a random server.
        p.pick(0, &mut ctx(12, &s, &mut q));
        assert_eq!((p.stats.picks, p.stats.random_picks), (3, 1));
    }

    #[test]
    fn the_legacy_pool_never_removes_and_routes_from_a_single_probe() {
        let s = servers(100);
        let mut q = Queue::default();
        let config = PrequalConfig { probes_per_query: 0.0, ..PrequalConfig::legacy() };
        let mut p = pooled(&config, &[(10, 1, 30.0, 5), (12, 1, 20.0, 7)]);
        p.start(&mut ctx(0, &s, &mut q));
        assert_eq!(p.pick(0, &mut ctx(10, &s, &mut q)).endpoint, 12);
        assert_eq!(pool_endpoints(&p), [10], "nothing removed besides the spent probe");
        assert_eq!(p.pick(0, &mut ctx(11, &s, &mut q)).endpoint, 10);
        assert_eq!(p.stats.random_picks, 0);
    }
}
