//! Peak-EWMA power of two choices as Finagle, Linkerd and tower run it, per client proxy:
//! cost = rtt_estimate x (pending + 1) for two distinct random endpoints, the cheaper wins (ties to
//! the first). The estimate jumps to a higher sample at once and otherwise moves toward the sample
//! with weight 1 - exp(-elapsed / decay); reading the cost decays it toward zero the same way
//! (tower updates with a zero sample), which is what makes an idle endpoint worth a new try.
//! Linkerd's defaults: rtt 30 ms for an endpoint without samples, decay 10 s.

use super::active::Active;
use super::{Choice, Ctx, Outcome, Policy};
use tailweight_math::ewma::decay_weight;
use tailweight_math::rng::Rng;

pub const DEFAULT_RTT_NS: f64 = 30e6;
pub const DECAY_NS: f64 = 10e9;

#[derive(Debug, Clone, Copy)]
struct Estimate {
    rtt_ns: f64,
    updated_ns: u64,
}

impl Estimate {
    fn update(&mut self, sample_ns: f64, now_ns: u64) -> f64 {
        if sample_ns > self.rtt_ns {
            self.rtt_ns = sample_ns;
        } else {
            // ewma's decay_weight takes the same units for elapsed time and decay.
            let w = decay_weight(now_ns.saturating_sub(self.updated_ns), DECAY_NS);
            self.rtt_ns = self.rtt_ns * w + sample_ns * (1.0 - w);
        }
        self.updated_ns = self.updated_ns.max(now_ns);
        self.rtt_ns
    }
}

pub struct PeakEwmaP2c {
    estimates: Vec<Estimate>,
    pending: Active,
    rng: Rng,
}

impl PeakEwmaP2c {
    pub fn new(clients: u32, endpoints: u32, seed: u64) -> PeakEwmaP2c {
        PeakEwmaP2c {
            estimates: vec![Estimate { rtt_ns: DEFAULT_RTT_NS, updated_ns: 0 }; clients as usize * endpoints as usize],
            pending: Active::new(clients, endpoints as usize),
            rng: Rng::new(seed),
        }
    }

    fn cost(&mut self, client: u32, endpoint: u32, now_ns: u64) -> f64 {
        let i = client as usize * self.pending.endpoints() + endpoint as usize;
        let rtt = self.estimates[i].update(0.0, now_ns);
        rtt * (self.pending.get(client, endpoint) + 1) as f64
    }
}

impl Policy for PeakEwmaP2c {
    fn pick(&mut self, client: u32, ctx: &mut Ctx) -> Choice {
        let n = self.pending.endpoints();
        let a = self.rng.below(n) as u32;
        let endpoint = if n < 2 {
            a
        } else {
            // Two distinct endpoints: the second draw skips the first.
            let mut b = self.rng.below(n - 1) as u32;
            if b >= a {
                b += 1;
            }
            if self.cost(client, a, ctx.now_ns) <= self.cost(client, b, ctx.now_ns) {
                a
            } else {
                b
            }
        };
        self.pending.add(client, endpoint);
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, client: u32, choice: Choice, outcome: &Outcome, ctx: &mut Ctx) {
        self.pending.remove(client, choice.endpoint);
        let i = client as usize * self.pending.endpoints() + choice.endpoint as usize;
        self.estimates[i].update(outcome.latency_ns as f64, ctx.now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_peaks_at_once_and_decays_with_time() {
        let mut e = Estimate { rtt_ns: DEFAULT_RTT_NS, updated_ns: 0 };
        assert_eq!(e.update(50e6, 1), 50e6);
        let after = e.update(0.0, 1 + DECAY_NS as u64);
        assert!((after - 50e6 * (-1.0f64).exp()).abs() < 1.0);
    }

    #[test]
    fn the_slower_endpoint_loses() {
        use crate::queue::Queue;
        use crate::server::Orca;
        let mut p = PeakEwmaP2c::new(1, 2, 3);
        let mut queue = Queue::default();
        let mut ctx = Ctx { now_ns: 1_000, servers: &[], queue: &mut queue, network_delay_ns: 0 };
        let slow = Outcome { latency_ns: 200_000_000, failed: false, orca: Orca::default(), rif: 0 };
        p.pending.add(0, 1);
        p.complete(0, Choice { endpoint: 1, token: 0 }, &slow, &mut ctx);
        for _ in 0..10 {
            let c = p.pick(0, &mut ctx);
            assert_eq!(c.endpoint, 0);
            p.complete(0, c, &Outcome { latency_ns: 1_000_000, ..slow }, &mut ctx);
        }
    }
}
