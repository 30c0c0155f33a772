//! Targets from raw capacities, and the geometric smoothing of weights toward them; an endpoint new
//! to an established cluster has its target ramped up (slow start).

use crate::normalize;
use crate::params::WeightParams;
use crate::record::EndpointRecord;
use tailweight_math::ewma::decay_weight;
use tailweight_math::ramp::Ramp;
use tailweight_math::stats::median;

/// What a cluster's raw capacities make of each endpoint's target.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Targets {
    mean_raw: f64,
    /// For endpoints without a raw capacity, as Envoy's CSWRR gives unweighted hosts the median.
    median_target: f64,
    floor: f64,
}

impl Targets {
    /// Over the endpoints `counted` says (see `normalize`); `sorted` is scratch.
    fn of(raw: &[Option<f64>], counted: &[bool], floor: f64, sorted: &mut Vec<f64>) -> Targets {
        let counted_raw = || raw.iter().zip(counted).filter(|(_, c)| **c).filter_map(|(r, _)| *r);
        let known = counted_raw().count();
        let mean_raw = if known == 0 { 1.0 } else { counted_raw().sum::<f64>() / known as f64 };
        sorted.clear();
        sorted.extend(counted_raw().map(|r| (r / mean_raw).max(floor)));
        let median_target = median(sorted).unwrap_or(1.0);
        Targets { mean_raw, median_target, floor }
    }

    /// Target = raw / mean raw, at least `floor` (and positive); the median target without a raw.
    fn target(&self, raw: Option<f64>) -> f64 {
        raw.map_or(self.median_target, |r| (r / self.mean_raw).max(self.floor)).max(f64::MIN_POSITIVE)
    }
}

/// The share of the way to its target a weight moves `elapsed_us` after the last recompute:
/// `1 - exp(-elapsed / smoothing)`; all of it at the first recompute (None).
fn smoothing_share(elapsed_us: Option<u64>, smoothing_us: f64) -> f64 {
    match elapsed_us {
        Some(dt_us) => 1.0 - decay_weight(dt_us, smoothing_us),
        None => 1.0,
    }
}

/// Geometric smoothing: log w moves a share `alpha` of the way to log target (a weight halving and
/// one doubling take equally long); the target itself without a usable previous weight.
fn smoothed(previous: Option<f64>, target: f64, alpha: f64) -> f64 {
    let desired = match previous {
        Some(w) if w > 0.0 && w.is_finite() => (w.ln() * (1.0 - alpha) + target.ln() * alpha).exp(),
        _ => target,
    };
    if desired.is_finite() && desired > 0.0 {
        desired
    } else {
        1.0
    }
}

/// The slow-start share of an endpoint's target: the ramp from when the book first heard of it,
/// for endpoints that joined a cluster known for longer than `slow_start_us` (the first ones are the
/// book discovering an established set, e.g. after an aggregator restart) and that the book cannot
/// rate yet (`rated` false: no raw capacity, the median target); else 1. A rated endpoint's raw
/// capacity already measures its warm-up (a cold pod's service time is long): ramping it too would
/// count its coldness twice, and the share it cannot take falls on the warm endpoints, which queue.
fn slow_start_factor(first_seen_us: u64, cluster_created_us: u64, now_us: u64, slow_start_us: u64, rated: bool) -> f64 {
    if rated || slow_start_us == 0 || first_seen_us.saturating_sub(cluster_created_us) < slow_start_us {
        return 1.0;
    }
    Ramp { start_us: first_seen_us, window_us: slow_start_us }.factor(now_us)
}

/// The times step 4 needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    /// Since the last recompute (None: the first).
    pub elapsed_us: Option<u64>,
    pub now_us: u64,
    pub cluster_created_us: u64,
}

/// Step 4 (before `normalize`): each endpoint's target from `raw` (aligned with `endpoints`;
/// relative to the `counted` ones) into its decision, its smoothed weight into `desired`, and its
/// `normalize::bounds` into `lo_hi`. `sorted` is scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn smooth_toward_targets(
    endpoints: &mut [EndpointRecord],
    raw: &[Option<f64>],
    counted: &[bool],
    p: &WeightParams,
    t: Times,
    sorted: &mut Vec<f64>,
    desired: &mut Vec<f64>,
    lo_hi: &mut Vec<(f64, f64)>,
) {
    let targets = Targets::of(raw, counted, p.floor, sorted);
    let alpha = smoothing_share(t.elapsed_us, p.smoothing_us);
    desired.clear();
    lo_hi.clear();
    for (endpoint, raw) in endpoints.iter_mut().zip(raw) {
        let ramp =
            slow_start_factor(endpoint.first_seen_us, t.cluster_created_us, t.now_us, p.slow_start_us, raw.is_some());
        let target = (targets.target(*raw) * ramp).max(f64::MIN_POSITIVE);
        if let Some(d) = endpoint.decision.as_mut() {
            d.target = target;
        }
        desired.push(smoothed(endpoint.weight, target, alpha));
        lo_hi.push(normalize::bounds(endpoint.weight, p.max_step, p.floor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_relative_to_the_mean_raw_with_the_median_for_the_unknown() {
        let mut sorted = Vec::new();
        let t = Targets::of(&[Some(100.0), Some(300.0), None, Some(200.0)], &[true; 4], 0.05, &mut sorted);
        assert_eq!((t.mean_raw, t.median_target), (200.0, 1.0));
        assert_eq!((t.target(Some(100.0)), t.target(None), t.target(Some(1.0))), (0.5, 1.0, 0.05));
        let none = Targets::of(&[None, None], &[true; 2], 0.05, &mut sorted);
        assert_eq!(none.target(None), 1.0);
    }

    #[test]
    fn endpoints_joining_an_established_cluster_slow_start() {
        let window = 10_000_000;
        assert_eq!(slow_start_factor(5_000_000, 0, 5_000_000, window, false), 1.0, "one of the first endpoints");
        assert!((slow_start_factor(20_000_000, 0, 20_000_000, window, false) - 0.1).abs() < 1e-12);
        assert!((slow_start_factor(20_000_000, 0, 25_000_000, window, false) - 0.55).abs() < 1e-12);
        assert_eq!(slow_start_factor(20_000_000, 0, 30_000_000, window, false), 1.0);
        assert_eq!(slow_start_factor(20_000_000, 0, 20_000_000, 0, false), 1.0, "off");
        assert_eq!(slow_start_factor(20_000_000, 0, 20_000_000, window, true), 1.0, "rated: its capacity ramps it");
    }

    #[test]
    fn a_weight_moves_geometrically_by_the_elapsed_share() {
        let alpha = smoothing_share(Some(2_000_000), 2_000_000.0);
        assert!((alpha - (1.0 - (-1.0f64).exp())).abs() < 1e-15);
        assert_eq!(smoothing_share(None, 2_000_000.0), 1.0);
        // Half way in log space from 1 to 4 is 2.
        assert!((smoothed(Some(1.0), 4.0, 0.5) - 2.0).abs() < 1e-12);
        assert_eq!(smoothed(None, 4.0, 0.5), 4.0);
        assert_eq!(smoothed(Some(f64::NAN), 4.0, 0.5), 4.0);
    }
}
