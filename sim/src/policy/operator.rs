//! The seed operator (Istio adaptive least request): every 30 s it reads each pod's CPU (the
//! one-minute rate), takes the mean of the non-zero ones, and moves each weight
//! w <- clamp(w x (1 - 0.01 x (cpu - mean) / mean), 100, 600) unless |cpu - mean| / mean < 5%;
//! then scales all by 350 / median. The weights reach every proxy (ServiceEntry, EDS) as
//! integers, and Envoy runs weighted LEAST_REQUEST on them: EDF with weight / (active + 1)
//! (active_request_bias 1.0), or plain two choices while all are equal.
//!
//! Like the benchmark harness, the run starts from the weights the rule converges to (it moves
//! 1% per 30 s, hours from its published start of 1000 each): capacity-proportional, scaled by
//! 350 / median. This is the operator's best case.

use super::active::Active;
use super::edf::Edf;
use super::{Choice, Ctx, Outcome, Policy, Timer};
use tailweight_core::rng::Rng;

pub const PERIOD_NS: u64 = 30_000_000_000;

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

/// One pass of the operator's rule over per-pod CPU.
pub fn update_weights(weights: &mut [f64], cpu: &[f64]) {
    let busy: Vec<f64> = cpu.iter().copied().filter(|c| *c > 0.0).collect();
    if busy.is_empty() {
        return;
    }
    let mean = busy.iter().sum::<f64>() / busy.len() as f64;
    for (w, c) in weights.iter_mut().zip(cpu) {
        let distance = (c - mean) / mean;
        if distance.abs() >= 0.05 {
            *w = (*w * (1.0 - 0.01 * distance)).clamp(100.0, 600.0);
        }
    }
    scale_to_median(weights);
}

fn scale_to_median(weights: &mut [f64]) {
    let mut sorted = weights.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 };
    if median > 0.0 {
        for w in weights.iter_mut() {
            *w *= 350.0 / median;
        }
    }
}

impl Operator {
    /// `capacities`: each endpoint's requests per second at full use (workers / service time).
    pub fn new(clients: u32, capacities: &[f64], seed: u64) -> Operator {
        let mut weights = capacities.to_vec();
        scale_to_median(&mut weights);
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
        self.lb_weights = self.weights.iter().map(|w| w.round().max(1.0)).collect();
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
        ctx.after(PERIOD_NS, Timer { kind: 0, arg: 0 });
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
        let cpu: Vec<f64> = ctx.servers.iter().map(|s| s.cpu).collect();
        update_weights(&mut self.weights, &cpu);
        self.publish();
        ctx.after(PERIOD_NS, timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_from_capacity_weights_scaled_to_a_median_of_350() {
        let op = Operator::new(2, &[200.0, 100.0, 100.0, 25.0], 1);
        assert_eq!(op.lb_weights(), &[700.0, 350.0, 350.0, 88.0], "integers, 87.5 rounded");
        assert!(!op.equal);
        assert!(Operator::new(1, &[5.0, 5.0], 1).equal, "equal capacities: plain least request");
    }

    #[test]
    fn the_rule_moves_busy_pods_down_one_percent_per_unit_distance() {
        let mut w = vec![350.0; 5];
        // Mean of the non-zero CPUs = 1.0; pod 1 is within 5% of it; pod 4 is idle.
        update_weights(&mut w, &[2.0, 1.04, 0.46, 0.5, 0.0]);
        let before = [350.0 * 0.99, 350.0, 350.0 * 1.0054, 350.0 * 1.005, 350.0 * 1.01];
        let median = 350.0 * 1.005;
        for (got, b) in w.iter().zip(before) {
            assert!((got - b * 350.0 / median).abs() < 1e-9, "{w:?}");
        }
    }

    #[test]
    fn weights_are_clamped_before_scaling() {
        let mut w = vec![120.0, 597.0];
        update_weights(&mut w, &[100.0, 0.001]);
        // 597 x (1 + 0.01 x 0.99998) is above 600: clamped; then both scale by 350 / median.
        let low = 120.0 * (1.0 - 0.01 * (100.0 - 50.0005) / 50.0005);
        let scale = 350.0 / ((low + 600.0) / 2.0);
        assert!((w[0] - low * scale).abs() < 1e-6 && (w[1] - 600.0 * scale).abs() < 1e-6, "{w:?}");
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
            op.complete(0, c, &Outcome { latency_ns: 1, failed: false, orca: Default::default() }, &mut ctx);
        }
        // Nothing stays active, so the split is the weights' 3:1.
        assert!((2_990..=3_010).contains(&counts[0]), "{counts:?}");
    }
}
