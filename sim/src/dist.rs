//! Random draws on tailweight-math's seedable generator.

use tailweight_math::rng::Rng;

/// Exp(1): -ln(U) with U in (0, 1].
pub fn exp1(rng: &mut Rng) -> f64 {
    -(1.0 - rng.next_f64()).ln()
}

/// Two independent standard normals by Box-Muller.
pub fn normal_pair(rng: &mut Rng) -> (f64, f64) {
    let u1 = 1.0 - rng.next_f64();
    let u2 = rng.next_f64();
    let r = (-2.0 * u1.ln()).sqrt();
    let (sin, cos) = (std::f64::consts::TAU * u2).sin_cos();
    (r * cos, r * sin)
}

/// A seed for one component, so that adding draws in one place does not shift another's.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    let mut r = Rng::new(seed ^ stream.wrapping_mul(0xA24B_AED4_963E_E407));
    r.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(mut draw: impl FnMut() -> f64, n: usize) -> (f64, f64) {
        let xs: Vec<f64> = (0..n).map(|_| draw()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        (mean, var)
    }

    #[test]
    fn exponential_and_normal_have_their_moments() {
        let mut rng = Rng::new(1);
        let (m, v) = moments(|| exp1(&mut rng), 200_000);
        assert!((m - 1.0).abs() < 0.01 && (v - 1.0).abs() < 0.03, "{m} {v}");
        let pairs: Vec<(f64, f64)> = (0..100_000).map(|_| normal_pair(&mut rng)).collect();
        let mut it = pairs.iter().flat_map(|&(a, b)| [a, b]);
        let (m, v) = moments(|| it.next().unwrap_or(0.0), 200_000);
        assert!(m.abs() < 0.01 && (v - 1.0).abs() < 0.02, "{m} {v}");
        let covariance = pairs.iter().map(|(a, b)| a * b).sum::<f64>() / pairs.len() as f64;
        assert!(covariance.abs() < 0.01, "the pair is uncorrelated: {covariance}");
    }

    #[test]
    fn derived_seeds_differ_by_stream() {
        assert_ne!(derive_seed(1, 1), derive_seed(1, 2));
        assert_eq!(derive_seed(1, 1), derive_seed(1, 1));
    }
}
