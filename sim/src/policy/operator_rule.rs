//! The seed operator's published weight rule (Istio adaptive least request): its numbers
//! (sim/operator-rule.json) and its formulas, the one implementation both the simulated operator
//! (`operator`) and the benchmark harness's controller use; the harness asks
//! `tailweight-sim operator` (a `RuleRequest` as JSON on stdin, a `RuleAnswer` on stdout).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// The rule's numbers (see sim/operator-rule.json's description).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    /// The weight of an endpoint that joins the set (the simulated set never changes).
    pub new_endpoint_weight: f64,
}

/// sim/operator-rule.json, compiled in (a malformed file fails the first use, and the tests).
pub static RULE: LazyLock<OperatorRule> = LazyLock::new(|| {
    let rule: OperatorRule =
        serde_json::from_str(include_str!("../../operator-rule.json")).expect("sim/operator-rule.json: malformed");
    rule.check().expect("sim/operator-rule.json");
    rule
});

impl OperatorRule {
    /// Numbers the formulas can use: a positive period, 0 <= dead_band, 0 < step < 1,
    /// 0 < min_weight <= median_weight <= max_weight, new_endpoint_weight > 0.
    pub fn check(&self) -> Result<(), String> {
        let r = self;
        let ok = r.period_s > 0.0
            && r.dead_band >= 0.0
            && r.step > 0.0
            && r.step < 1.0
            && 0.0 < r.min_weight
            && r.min_weight <= r.median_weight
            && r.median_weight <= r.max_weight
            && r.max_weight.is_finite()
            && r.new_endpoint_weight > 0.0
            && r.new_endpoint_weight.is_finite();
        if ok {
            Ok(())
        } else {
            Err(format!(
                "operator rule: expected period_s > 0, dead_band >= 0, 0 < step < 1, 0 < min_weight <= \
                 median_weight <= max_weight and new_endpoint_weight > 0, got {r:?}"
            ))
        }
    }

    pub fn period_ns(&self) -> u64 {
        (self.period_s * 1e9) as u64
    }
}

/// One pass of the rule over per-pod CPU (None: no sample, the weight stays): mean = mean of the
/// non-zero CPUs; a pod with |cpu - mean| / mean >= dead_band moves
/// w <- clamp(w x (1 - step x (cpu - mean) / mean), min_weight, max_weight); then all scale to a
/// median of median_weight (scale_to_median).
pub fn update_weights(rule: &OperatorRule, weights: &mut [f64], cpu: &[Option<f64>]) {
    let busy: Vec<f64> = cpu.iter().flatten().copied().filter(|c| *c > 0.0).collect();
    if !busy.is_empty() {
        let mean = busy.iter().sum::<f64>() / busy.len() as f64;
        for (w, c) in weights.iter_mut().zip(cpu) {
            let Some(c) = c else { continue };
            let distance = (c - mean) / mean;
            if distance.abs() >= rule.dead_band {
                *w = (*w * (1.0 - rule.step * distance)).clamp(rule.min_weight, rule.max_weight);
            }
        }
    }
    scale_to_median(rule, weights);
}

/// w <- w x median_weight / median(w) (no change while the median is 0).
pub fn scale_to_median(rule: &OperatorRule, weights: &mut [f64]) {
    if weights.is_empty() {
        return;
    }
    let mut sorted = weights.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 };
    if median > 0.0 {
        for w in weights.iter_mut() {
            *w *= rule.median_weight / median;
        }
    }
}

/// What Envoy gets as load_balancing_weight: the weight rounded (half away from zero), at least 1.
pub fn lb_weight(weight: f64) -> u32 {
    weight.round().clamp(1.0, u32::MAX as f64) as u32
}

/// The harness's question, by endpoint address: `capacity` (requests per second at full use) asks
/// for the rule's converged start (capacity-proportional weights at the rule's median); `weights`
/// with `cpu` for one round (endpoints with a CPU sample and no weight start at
/// new_endpoint_weight; endpoints without a sample keep theirs); `weights` alone for their Envoy
/// weights. `rule` defaults to sim/operator-rule.json.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRequest {
    pub rule: Option<OperatorRule>,
    pub capacity: Option<BTreeMap<String, f64>>,
    pub weights: Option<BTreeMap<String, f64>>,
    pub cpu: Option<BTreeMap<String, f64>>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct RuleAnswer {
    pub weights: BTreeMap<String, f64>,
    /// `lb_weight` of each.
    pub lb_weights: BTreeMap<String, u32>,
    /// `lb_weight(new_endpoint_weight)`: what an endpoint that joins between two rounds gets.
    pub new_endpoint_lb_weight: u32,
}

impl RuleRequest {
    pub fn answer(&self) -> Result<RuleAnswer, String> {
        let rule = self.rule.as_ref().unwrap_or(&RULE);
        rule.check()?;
        let weights = match (&self.capacity, &self.weights, &self.cpu) {
            (Some(capacity), None, None) => {
                let (names, mut w): (Vec<&String>, Vec<f64>) = capacity.iter().unzip();
                scale_to_median(rule, &mut w);
                names.into_iter().cloned().zip(w).collect()
            }
            (None, Some(weights), None) => weights.clone(),
            (None, Some(weights), Some(cpu)) => {
                let names: Vec<&String> =
                    weights.keys().chain(cpu.keys()).collect::<BTreeSet<_>>().into_iter().collect();
                let mut w: Vec<f64> =
                    names.iter().map(|n| weights.get(*n).copied().unwrap_or(rule.new_endpoint_weight)).collect();
                let c: Vec<Option<f64>> = names.iter().map(|n| cpu.get(*n).copied()).collect();
                update_weights(rule, &mut w, &c);
                names.into_iter().cloned().zip(w).collect()
            }
            _ => return Err("operator: expected either capacity, or weights (with cpu for a round)".into()),
        };
        if let Some((name, w)) = weights.iter().find(|(_, w)| !w.is_finite()) {
            return Err(format!("operator: the weight of {name} is {w}, not a finite number"));
        }
        let lb_weights = weights.iter().map(|(k, w)| (k.clone(), lb_weight(*w))).collect();
        Ok(RuleAnswer { weights, lb_weights, new_endpoint_lb_weight: lb_weight(rule.new_endpoint_weight) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> RuleRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_rule_file_parses_into_a_usable_rule() {
        let r = &*RULE;
        assert_eq!(r.check(), Ok(()));
        assert_eq!(r.period_ns(), (r.period_s * 1e9) as u64);
    }

    #[test]
    fn the_rule_moves_busy_pods_down_one_step_per_unit_distance() {
        let (m, step, band) = (RULE.median_weight, RULE.step, RULE.dead_band);
        let mut w = vec![m; 5];
        // The non-zero CPUs average 1.0: pod 1 is inside the dead band, pod 4 is idle.
        let cpu = [2.0, 1.0 + 0.8 * band, 0.5 - 0.8 * band, 0.5, 0.0];
        update_weights(&RULE, &mut w, &cpu.map(Some));
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
        update_weights(&RULE, &mut w, &[Some(100.0), Some(0.001)]);
        // The idle pod's weight would grow past max_weight: clamped; then both scale to the median.
        let mean = (100.0 + 0.001) / 2.0;
        let low = (lo * 1.2 * (1.0 - RULE.step * (100.0 - mean) / mean)).max(lo);
        assert!(hi * 0.995 * (1.0 - RULE.step * (0.001 - mean) / mean) > hi, "the case must clamp");
        let scale = RULE.median_weight / ((low + hi) / 2.0);
        assert!((w[0] - low * scale).abs() < 1e-6 && (w[1] - hi * scale).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn the_harness_form_keys_by_address_and_starts_new_endpoints_at_the_new_weight() {
        let m = RULE.median_weight;
        let a = request(&format!(r#"{{"weights": {{"a": {m}, "b": {m}}}, "cpu": {{"a": 1.0, "b": 1.0, "c": 1.0}}}}"#))
            .answer()
            .unwrap();
        assert_eq!(a.weights.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        // The median of (m, m, new) is m: nothing scales.
        assert_eq!((a.weights["a"], a.weights["c"]), (m, RULE.new_endpoint_weight));
        assert_eq!(a.new_endpoint_lb_weight, lb_weight(RULE.new_endpoint_weight));
        // Without a CPU sample a weight stays (before scaling).
        let a = request(r#"{"weights": {"a": 100, "b": 400}, "cpu": {"a": 2.0}}"#).answer().unwrap();
        assert_eq!(a.weights["b"] / a.weights["a"], 4.0);
        let a = request(r#"{"capacity": {"x": 3.0, "y": 1.0, "z": 1.0}}"#).answer().unwrap();
        assert_eq!(a.weights["x"], 3.0 * m);
        assert_eq!(a.lb_weights["y"], lb_weight(m));
    }

    #[test]
    fn envoy_weights_round_half_away_from_zero_and_are_at_least_one() {
        assert_eq!([0.2, 1.5, 2.5, 349.49, 1e12].map(lb_weight), [1, 2, 3, 349, u32::MAX]);
    }

    #[test]
    fn a_bad_question_is_an_error_not_a_panic() {
        for (json, want) in [
            (r#"{"weights": {"a": 1}, "capacity": {"a": 1}}"#, "expected either capacity"),
            (r#"{"cpu": {"a": 1}}"#, "expected either capacity"),
            (
                r#"{"weights": {"a": 1}, "rule": {"period_s": 1, "dead_band": 0, "step": 0.1, "min_weight": 5,
                    "max_weight": 1, "median_weight": 3, "new_endpoint_weight": 1}}"#,
                "min_weight <= median_weight <= max_weight",
            ),
            (r#"{"capacity": {"a": 1e-300, "b": 1e-300, "c": 1e300}}"#, "not a finite number"),
        ] {
            let err = request(json).answer().unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
