//! Envoy client_side_weighted_round_robin fed by the servers' ORCA reports, per client proxy.
//! Each response's report sets that host's weight (tailweight-weights' `cswrr_weight`; reports that give none
//! are ignored). Every weight_update_period the proxy
//! rebuilds its scheduler: a weight counts once its host has reported for blackout_period and only
//! while its last report is younger than weight_expiration; hosts without a counted weight get the
//! median of the counted ones (all 1 when none). Picks are weighted round robin (EDF).

use super::edf::Edf;
use super::{phase, Choice, Ctx, Outcome, Policy, Timer};
use crate::cswrr_periods::Periods;
use crate::server::Orca;
use tailweight_math::rng::Rng;
use tailweight_math::stats::median;
use tailweight_weights::cswrr_weight;

/// Envoy's default weight expiration (its blackout and update periods: `cswrr_periods`).
pub const EXPIRATION_NS: u64 = 180_000_000_000;
pub const ERROR_UTILIZATION_PENALTY: f64 = 1.0;
const NEVER: u64 = u64::MAX;
const UPDATE: u8 = 0;

#[derive(Debug, Clone, Copy)]
struct HostWeight {
    weight: f64,
    non_empty_since: u64,
    last_update: u64,
}

pub struct Cswrr {
    periods: Periods,
    endpoints: usize,
    clients: u32,
    hosts: Vec<HostWeight>,
    /// The weights each client's scheduler uses until its next update (clients x endpoints).
    in_use: Vec<f64>,
    schedulers: Vec<Edf>,
    rng: Rng,
}

/// The weight one ORCA report gives its host (None when it gives none), at Envoy's default penalty.
pub fn orca_weight(orca: &Orca) -> Option<f64> {
    cswrr_weight(orca.rps, orca.eps, orca.utilization, ERROR_UTILIZATION_PENALTY)
}

impl Cswrr {
    pub fn new(clients: u32, endpoints: u32, periods: Periods, seed: u64) -> Cswrr {
        let mut rng = Rng::new(seed);
        let endpoints = endpoints as usize;
        let schedulers = (0..clients).map(|_| Edf::new(std::iter::repeat_n(1.0, endpoints), &mut rng)).collect();
        let empty = HostWeight { weight: 0.0, non_empty_since: NEVER, last_update: 0 };
        let cells = clients as usize * endpoints;
        Cswrr { periods, endpoints, clients, hosts: vec![empty; cells], in_use: vec![1.0; cells], schedulers, rng }
    }

    /// The weights one client's scheduler uses from now on.
    fn weights(&mut self, client: u32, now_ns: u64) -> Vec<f64> {
        let blackout_ns = self.periods.blackout_ns;
        let row = &mut self.hosts[client as usize * self.endpoints..(client as usize + 1) * self.endpoints];
        let counted: Vec<Option<f64>> = row
            .iter_mut()
            .map(|h| {
                if h.non_empty_since == NEVER {
                    None
                } else if now_ns.saturating_sub(h.last_update) >= EXPIRATION_NS {
                    h.non_empty_since = NEVER;
                    None
                } else if now_ns.saturating_sub(h.non_empty_since) < blackout_ns {
                    None
                } else {
                    Some(h.weight)
                }
            })
            .collect();
        let mut valid: Vec<f64> = counted.iter().flatten().copied().collect();
        let default = median(&mut valid).unwrap_or(1.0);
        counted.into_iter().map(|w| w.unwrap_or(default)).collect()
    }
}

impl Policy for Cswrr {
    fn start(&mut self, ctx: &mut Ctx) {
        for client in 0..self.clients {
            let period = self.periods.update_ns;
            let first = phase(client, self.clients, period) + period;
            ctx.after(first, Timer { kind: UPDATE, arg: client });
        }
    }

    fn pick(&mut self, client: u32, _ctx: &mut Ctx) -> Choice {
        // Weights are static between updates; every host has one (the median when unknown).
        let row = client as usize * self.endpoints;
        let endpoint = self.schedulers[client as usize].pick(|h| self.in_use[row + h as usize]).unwrap_or(0);
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, client: u32, choice: Choice, outcome: &Outcome, ctx: &mut Ctx) {
        if let Some(w) = orca_weight(&outcome.orca) {
            let h = &mut self.hosts[client as usize * self.endpoints + choice.endpoint as usize];
            if h.non_empty_since == NEVER {
                h.non_empty_since = ctx.now_ns;
            }
            h.last_update = ctx.now_ns;
            h.weight = w;
        }
    }

    fn timer(&mut self, timer: Timer, ctx: &mut Ctx) {
        let client = timer.arg;
        let weights = self.weights(client, ctx.now_ns);
        self.schedulers[client as usize] = Edf::new(weights.iter().copied(), &mut self.rng);
        let row = client as usize * self.endpoints;
        self.in_use[row..row + self.endpoints].copy_from_slice(&weights);
        ctx.after(self.periods.update_ns, timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cswrr_periods::BLACKOUT_NS;
    use crate::queue::Queue;

    fn ok(orca: Orca) -> Outcome {
        Outcome { latency_ns: 1, failed: false, orca, rif: 0 }
    }

    #[test]
    fn weight_is_qps_over_utilisation_with_an_error_penalty() {
        assert_eq!(orca_weight(&Orca { utilization: 0.5, rps: 100.0, eps: 0.0 }), Some(200.0));
        assert_eq!(orca_weight(&Orca { utilization: 0.5, rps: 100.0, eps: 50.0 }), Some(100.0));
        assert_eq!(orca_weight(&Orca { utilization: 0.0, rps: 100.0, eps: 0.0 }), None);
        assert_eq!(orca_weight(&Orca { utilization: 0.5, rps: 0.0, eps: 0.0 }), None);
    }

    #[test]
    fn weights_count_after_blackout_and_others_get_the_median() {
        let mut p = Cswrr::new(1, 4, Periods::default(), 1);
        let mut queue = Queue::default();
        let mut ctx = Ctx { now_ns: 0, servers: &[], queue: &mut queue, network_delay_ns: 0 };
        for (e, w) in [(0, 100.0), (1, 300.0), (2, 200.0)] {
            p.complete(0, Choice { endpoint: e, token: 0 }, &ok(Orca { utilization: 1.0, rps: w, eps: 0.0 }), &mut ctx);
        }
        assert_eq!(p.weights(0, BLACKOUT_NS - 1), vec![1.0; 4], "all in blackout: equal");
        assert_eq!(p.weights(0, BLACKOUT_NS), vec![100.0, 300.0, 200.0, 200.0]);
        assert_eq!(p.weights(0, EXPIRATION_NS), vec![1.0; 4], "expired");
    }

    #[test]
    fn picks_follow_the_weights_after_an_update() {
        let mut p = Cswrr::new(1, 2, Periods::default(), 1);
        let mut queue = Queue::default();
        let mut ctx = Ctx { now_ns: 0, servers: &[], queue: &mut queue, network_delay_ns: 0 };
        for (e, w) in [(0, 300.0), (1, 100.0)] {
            p.complete(0, Choice { endpoint: e, token: 0 }, &ok(Orca { utilization: 1.0, rps: w, eps: 0.0 }), &mut ctx);
        }
        ctx.now_ns = BLACKOUT_NS;
        p.timer(Timer { kind: UPDATE, arg: 0 }, &mut ctx);
        let to_0 = (0..4_000).filter(|_| p.pick(0, &mut ctx).endpoint == 0).count();
        assert!((2_999..=3_001).contains(&to_0), "{to_0}");
    }
}
