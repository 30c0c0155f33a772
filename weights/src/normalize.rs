//! Published weights from desired ones: mean exactly 1, each weight within a factor `max_step` of
//! its previous value (new endpoints are free), and never below `floor` (so slow endpoints keep
//! getting probes). All three hold at once: w_i = clamp(c x desired_i, lo_i, hi_i) with
//! lo_i = max(prev_i / max_step, floor), hi_i = max(prev_i x max_step, floor), and the one scale c
//! that makes the mean 1 (found by bisection; the sum is monotone in c). A solution exists when
//! floor <= 1 - 1/max_step, which `WeightParams::validate` enforces.

/// Bounds for one endpoint: its previous weight, if it had one.
pub fn bounds(previous: Option<f64>, max_step: f64, floor: f64) -> (f64, f64) {
    match previous {
        Some(p) if p.is_finite() && p > 0.0 => ((p / max_step).max(floor), (p * max_step).max(floor)),
        _ => (floor, f64::INFINITY),
    }
}

/// Write into `out` the weights for `desired` (positive, finite) within `lo_hi`, with mean 1 over
/// the endpoints `counted` says (all of them, unless a cluster has endpoints too few of its
/// principals report: see `consensus::supported`); the others get the same scale.
pub fn normalize(desired: &[f64], lo_hi: &[(f64, f64)], counted: &[bool], out: &mut Vec<f64>) {
    out.clear();
    let n = counted.iter().filter(|c| **c).count();
    if n == 0 {
        out.extend(desired.iter().zip(lo_hi).map(|(d, (lo, hi))| d.clamp(*lo, *hi)));
        return;
    }
    let target = n as f64;
    let sum_at = |c: f64| -> f64 {
        desired
            .iter()
            .zip(lo_hi)
            .zip(counted)
            .filter(|(_, c)| **c)
            .map(|((d, (lo, hi)), _)| (c * d).clamp(*lo, *hi))
            .sum()
    };
    // Bracket c in log space, then bisect: 200 halvings of the log interval are far more than enough.
    let (mut lo_c, mut hi_c) = (1.0f64, 1.0f64);
    let mut guard = 0;
    while sum_at(lo_c) > target && guard < 2_000 {
        lo_c /= 2.0;
        guard += 1;
    }
    while sum_at(hi_c) < target && guard < 4_000 {
        hi_c *= 2.0;
        guard += 1;
    }
    for _ in 0..200 {
        let mid = (lo_c * hi_c).sqrt();
        if sum_at(mid) < target {
            lo_c = mid;
        } else {
            hi_c = mid;
        }
        if hi_c / lo_c < 1.0 + 1e-15 {
            break;
        }
    }
    out.extend(desired.iter().zip(lo_hi).map(|(d, (lo, hi))| (hi_c * d).clamp(*lo, *hi)));
    // Remove the last rounding error on the counted endpoints not pinned at a bound (if any).
    let sum: f64 = out.iter().zip(counted).filter(|(_, c)| **c).map(|(w, _)| *w).sum();
    let free: f64 = out
        .iter()
        .zip(lo_hi)
        .zip(counted)
        .filter(|((w, (lo, hi)), c)| **c && **w > *lo && **w < *hi)
        .map(|((w, _), _)| *w)
        .sum();
    if free > 0.0 && sum.is_finite() {
        let k = 1.0 + (target - sum) / free;
        for ((w, (lo, hi)), c) in out.iter_mut().zip(lo_hi).zip(counted) {
            if *c && *w > *lo && *w < *hi {
                *w *= k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    #[test]
    fn unbounded_weights_are_the_desired_ones_scaled_to_mean_one() {
        let d = [1.0, 2.0, 5.0];
        let mut out = vec![];
        normalize(&d, &[(0.0, f64::INFINITY); 3], &[true; 3], &mut out);
        assert!((mean(&out) - 1.0).abs() < 1e-12);
        assert!((out[2] / out[0] - 5.0).abs() < 1e-9);
    }

    #[test]
    fn step_and_floor_bounds_hold_with_mean_one() {
        let prev = [1.0, 1.0, 1.0, 1.0];
        let desired = [100.0, 1.0, 1.0, 0.0001];
        let lo_hi: Vec<_> = prev.iter().map(|p| bounds(Some(*p), 1.5, 0.05)).collect();
        let mut out = vec![];
        normalize(&desired, &lo_hi, &[true; 4], &mut out);
        assert!((mean(&out) - 1.0).abs() < 1e-9, "{out:?}");
        for (w, p) in out.iter().zip(prev) {
            assert!(*w <= p * 1.5 + 1e-12 && *w >= p / 1.5 - 1e-12, "{out:?}");
        }
        assert_eq!(out[0], 1.5);
        assert!((out[3] - 1.0 / 1.5).abs() < 1e-12);
    }

    #[test]
    fn floor_lifts_a_tiny_weight_at_once() {
        let lo_hi = [bounds(Some(0.01), 1.5, 0.05), bounds(Some(1.99), 1.5, 0.05)];
        let mut out = vec![];
        normalize(&[0.0001, 1.0], &lo_hi, &[true; 2], &mut out);
        assert!(out[0] >= 0.05 - 1e-12 && (mean(&out) - 1.0).abs() < 1e-9, "{out:?}");
    }

    #[test]
    fn endpoints_left_out_of_the_mean_take_the_same_scale() {
        let mut out = vec![];
        normalize(&[1.0, 3.0, 1_000.0], &[(0.0, f64::INFINITY); 3], &[true, true, false], &mut out);
        assert!((out[0] + out[1] - 2.0).abs() < 1e-12 && (out[1] / out[0] - 3.0).abs() < 1e-9, "{out:?}");
        assert!((out[2] / out[0] - 1_000.0).abs() < 1e-6, "{out:?}");
    }
}
