//! The seed operator (Istio adaptive least request): every period it reads each pod's CPU (the
//! one-minute rate) and applies its published rule (`operator_rule`, shared with the benchmark
//! harness). The weights reach every proxy (ServiceEntry, EDS) as integers, and Envoy runs weighted
//! LEAST_REQUEST on them: EDF with weight / (active + 1) (active_request_bias 1.0), or plain two
//! choices while all are equal.
//!
//! Like the benchmark harness, the run starts from the weights the rule converges to (it moves one
//! small step per period, hours from its published start at new_endpoint_weight each):
//! capacity-proportional, scaled to the rule's median. This is the operator's best case.

use super::active::Active;
use super::edf::Edf;
use super::operator_rule::{lb_weight, scale_to_median, update_weights, RULE};
use super::{Choice, Ctx, Outcome, Policy, Timer};
use tailweight_math::rng::Rng;

pub struct Operator {
    /// The operator's own (real-valued) weights.
    weights: Vec<f64>,
    /// What Envoy sees: load_balancing_weight, a positive integer.
    lb_weights: Vec<f64>,
    equal: bool,
    active: Active,
    schedulers: Vec<Edf>,
    rng: Rng,
}

impl Operator {
    /// `capacities`: each endpoint's requests per second at full use (workers / service time).
    pub fn new(clients: u32, capacities: &[f64], seed: u64) -> Operator {
        let mut weights = capacities.to_vec();
        scale_to_median(&RULE, &mut weights);
        let mut op = Operator {
            lb_weights: vec![],
            weights,
            equal: true,
            active: Active::new(clients, capacities.len()),
            schedulers: vec![Edf::default(); clients as usize],
            rng: Rng::new(seed),
        };
        op.publish();
        op
    }

    /// Push the weights to every proxy: integers, and a fresh scheduler when they differ.
    fn publish(&mut self) {
        self.lb_weights = self.weights.iter().map(|w| lb_weight(*w) as f64).collect();
        self.equal = self.lb_weights.iter().all(|w| *w == self.lb_weights[0]);
        if !self.equal {
            for s in self.schedulers.iter_mut() {
                *s = Edf::new(self.lb_weights.iter().copied(), &mut self.rng);
            }
        }
    }

    pub fn lb_weights(&self) -> &[f64] {
        &self.lb_weights
    }
}

impl Policy for Operator {
    fn start(&mut self, ctx: &mut Ctx) {
        ctx.after(RULE.period_ns(), Timer { kind: 0, arg: 0 });
    }

    fn pick(&mut self, client: u32, _ctx: &mut Ctx) -> Choice {
        let endpoint = if self.equal {
            self.active.least_of_two(client, &mut self.rng)
        } else {
            let (active, weights) = (&self.active, &self.lb_weights);
            let weight_now = |h: u32| weights[h as usize] / (active.get(client, h) + 1) as f64;
            self.schedulers[client as usize].pick(weight_now).unwrap_or(0)
        };
        self.active.add(client, endpoint);
        Choice { endpoint, token: 0 }
    }

    fn complete(&mut self, client: u32, choice: Choice, _outcome: &Outcome, _ctx: &mut Ctx) {
        self.active.remove(client, choice.endpoint);
    }

    fn timer(&mut self, timer: Timer, ctx: &mut Ctx) {
        let cpu: Vec<Option<f64>> = ctx.servers.iter().map(|s| Some(s.cpu)).collect();
        update_weights(&RULE, &mut self.weights, &cpu);
        self.publish();
        ctx.after(RULE.period_ns(), timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_from_capacity_weights_scaled_to_the_rule_median() {
        let op = Operator::new(2, &[200.0, 100.0, 100.0, 25.0], 1);
        let m = RULE.median_weight;
        let expected = [2.0 * m, m, m, 0.25 * m].map(|w: f64| w.round().max(1.0));
        assert_eq!(op.lb_weights(), &expected, "integers");
        assert!(!op.equal);
        assert!(Operator::new(1, &[5.0, 5.0], 1).equal, "equal capacities: plain least request");
    }

    #[test]
    fn unequal_weights_switch_to_weighted_least_request() {
        use super::super::Queue;
        let mut op = Operator::new(1, &[1.0, 1.0], 1);
        op.weights = vec![300.0, 100.0];
        op.publish();
        assert!(!op.equal);
        let mut queue = Queue::default();
        let mut ctx = Ctx { now_ns: 0, servers: &[], queue: &mut queue, network_delay_ns: 0 };
        let mut counts = [0u32; 2];
        for _ in 0..4_000 {
            let c = op.pick(0, &mut ctx);
            counts[c.endpoint as usize] += 1;
            op.complete(0, c, &Outcome { latency_ns: 1, failed: false, orca: Default::default(), rif: 0 }, &mut ctx);
        }
        // Nothing stays active, so the split is the weights' 3:1.
        assert!((2_990..=3_010).contains(&counts[0]), "{counts:?}");
    }
}
