//! The seed operator (Istio adaptive least request): every period it reads each pod's CPU (the
//! one-minute rate) and applies its published rule (update_weights; the numbers live in
//! sim/operator-rule.json, which the benchmark harness's e2e/bench/operator.py reads too). The
//! weights reach every proxy (ServiceEntry, EDS) as integers, and Envoy runs weighted
//! LEAST_REQUEST on them: EDF with weight / (active + 1) (active_request_bias 1.0), or plain two
//! choices while all are equal.
//!
//! Like the benchmark harness, the run starts from the weights the rule converges to (it moves one
//! small step per period, hours from its published start at new_endpoint_weight each):
//! capacity-proportional, scaled to the rule's median. This is the operator's best case.

use super::active::Active;
use super::edf::Edf;
use super::{Choice, Ctx, Outcome, Policy, Timer};
use serde::Deserialize;
use std::sync::LazyLock;
use tailweight_math::rng::Rng;

/// The rule's numbers (see sim/operator-rule.json's description; its new_endpoint_weight is the
/// harness's alone: the simulated endpoint set never changes).
#[derive(Debug, Deserialize)]
pub struct OperatorRule {
    pub period_s: f64,
    /// Relative CPU distance below which a weight stays.
    pub dead_band: f64,
    /// Relative weight change per unit of relative CPU distance.
    pub step: f64,
    pub min_weight: f64,
    pub max_weight: f64,
    /// Every round scales the weights so that their median is this.
    pub median_weight: f64,
}

/// sim/operator-rule.json, compiled in (a malformed file fails the first use, and the tests).
pub static RULE: LazyLock<OperatorRule> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../operator-rule.json")).expect("sim/operator-rule.json: malformed")
});

fn period_ns() -> u64 {
    (RULE.period_s * 1e9) as u64
}

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

/// One pass of the operator's rule over per-pod CPU: mean = mean of the non-zero CPUs; a pod with
/// |cpu - mean| / mean >= dead_band moves w <- clamp(w x (1 - step x (cpu - mean) / mean),
/// min_weight, max_weight); then all scale to a median of median_weight (scale_to_median).
pub fn update_weights(weights: &mut [f64], cpu: &[f64]) {
    let busy: Vec<f64> = cpu.iter().copied().filter(|c| *c > 0.0).collect();
    if busy.is_empty() {
        return;
    }
    let mean = busy.iter().sum::<f64>() / busy.len() as f64;
    for (w, c) in weights.iter_mut().zip(cpu) {
        let distance = (c - mean) / mean;
        if distance.abs() >= RULE.dead_band {
            *w = (*w * (1.0 - RULE.step * distance)).clamp(RULE.min_weight, RULE.max_weight);
        }
    }
    scale_to_median(weights);
}

/// w <- w x median_weight / median(w) (no change while the median is 0).
fn scale_to_median(weights: &mut [f64]) {
    let mut sorted = weights.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 };
    if median > 0.0 {
        for w in weights.iter_mut() {
            *w *= RULE.median_weight / median;
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
        ctx.after(period_ns(), Timer { kind: 0, arg: 0 });
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
        ctx.after(period_ns(), timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_file_parses_into_a_usable_rule() {
        let r = &*RULE;
        assert!(r.period_s > 0.0 && r.step > 0.0 && r.step < 1.0 && r.dead_band >= 0.0, "{r:?}");
        assert!(0.0 < r.min_weight && r.min_weight <= r.median_weight && r.median_weight <= r.max_weight, "{r:?}");
        assert_eq!(period_ns(), (r.period_s * 1e9) as u64);
    }

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
    fn the_rule_moves_busy_pods_down_one_step_per_unit_distance() {
        let (m, step, band) = (RULE.median_weight, RULE.step, RULE.dead_band);
        let mut w = vec![m; 5];
        // The non-zero CPUs average 1.0: pod 1 is inside the dead band, pod 4 is idle.
        let cpu = [2.0, 1.0 + 0.8 * band, 0.5 - 0.8 * band, 0.5, 0.0];
        update_weights(&mut w, &cpu);
        let moved = |c: f64| m * (1.0 - step * (c - 1.0));
        let before = [moved(cpu[0]), m, moved(cpu[2]), moved(cpu[3]), moved(cpu[4])];
        let median = moved(cpu[3]); // the middle one of the five
        for (got, b) in w.iter().zip(before) {
            assert!((got - b * m / median).abs() < 1e-9, "{w:?}");
        }
    }

    #[test]
    fn weights_are_clamped_before_scaling() {
        let (lo, hi) = (RULE.min_weight, RULE.max_weight);
        let mut w = vec![lo * 1.2, hi * 0.995];
        update_weights(&mut w, &[100.0, 0.001]);
        // The idle pod's weight would grow past max_weight: clamped; then both scale to the median.
        let mean = (100.0 + 0.001) / 2.0;
        let low = (lo * 1.2 * (1.0 - RULE.step * (100.0 - mean) / mean)).max(lo);
        assert!(hi * 0.995 * (1.0 - RULE.step * (0.001 - mean) / mean) > hi, "the case must clamp");
        let scale = RULE.median_weight / ((low + hi) / 2.0);
        assert!((w[0] - low * scale).abs() < 1e-6 && (w[1] - hi * scale).abs() < 1e-6, "{w:?}");
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
