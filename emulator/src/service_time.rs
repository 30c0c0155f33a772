//! Service time of one request: base x speed x cold x J, J ~ LogNormal(-sigma^2/2, sigma) so E[J] = 1,
//! cold = the warm-up multiplier of a backend that started serving recently (cold_multiplier).

use tailweight_math::rng::Rng;

/// One draw of a standard normal (Box-Muller; u1 in (0, 1] so ln is finite).
pub fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.next_f64();
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Mean-1 lognormal factor with shape `sigma` (0 = always 1).
pub fn jitter_factor(rng: &mut Rng, sigma: f64) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    (sigma * standard_normal(rng) - sigma * sigma / 2.0).exp()
}

/// Warm-up multiplier `t` seconds after a backend started serving: linear in time from `factor` at
/// t = 0 down to 1 at t = `cold_s`, then 1:
/// cold(t) = 1 + (factor - 1) x max(0, 1 - t / cold_s)   (cold_s = 0: always 1).
pub fn cold_multiplier(factor: f64, cold_s: f64, t: f64) -> f64 {
    if cold_s <= 0.0 || t >= cold_s {
        return 1.0;
    }
    1.0 + (factor - 1.0) * (1.0 - t.max(0.0) / cold_s)
}

/// Service time in microseconds; `slowdown` is speed x cold.
pub fn service_us(rng: &mut Rng, base_ms: f64, slowdown: f64, sigma: f64) -> u64 {
    (base_ms * 1e3 * slowdown * jitter_factor(rng, sigma)).round().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_log_sd(sigma: f64, n: usize) -> (f64, f64) {
        let mut rng = Rng::new(42);
        let draws: Vec<f64> = (0..n).map(|_| jitter_factor(&mut rng, sigma)).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let logs: Vec<f64> = draws.iter().map(|x| x.ln()).collect();
        let log_mean = logs.iter().sum::<f64>() / n as f64;
        let log_var = logs.iter().map(|l| (l - log_mean).powi(2)).sum::<f64>() / n as f64;
        (mean, log_var.sqrt())
    }

    #[test]
    fn jitter_has_mean_one_and_the_requested_shape() {
        for sigma in [0.1, 0.2, 0.5] {
            let (mean, sd) = mean_and_log_sd(sigma, 200_000);
            assert!((mean - 1.0).abs() < 0.01, "sigma {sigma}: mean {mean}");
            assert!((sd - sigma).abs() < 0.01 * sigma.max(0.1) * 2.0, "sigma {sigma}: log sd {sd}");
        }
    }

    #[test]
    fn no_jitter_is_exact() {
        let mut rng = Rng::new(1);
        assert_eq!(service_us(&mut rng, 10.0, 2.618, 0.0), 26_180);
    }

    #[test]
    fn cold_multiplier_falls_linearly_to_one() {
        assert_eq!(cold_multiplier(5.0, 10.0, 0.0), 5.0);
        assert_eq!(cold_multiplier(5.0, 10.0, 2.5), 4.0);
        assert_eq!(cold_multiplier(5.0, 10.0, 5.0), 3.0);
        assert_eq!(cold_multiplier(5.0, 10.0, 10.0), 1.0);
        assert_eq!(cold_multiplier(5.0, 10.0, 1e9), 1.0);
        assert_eq!(cold_multiplier(5.0, 0.0, 0.0), 1.0, "no cold period");
        assert_eq!(cold_multiplier(1.0, 10.0, 3.0), 1.0, "factor 1 is warm from the start");
        assert_eq!(cold_multiplier(3.0, 10.0, -1.0), 3.0, "before the start it is at its coldest");
    }

    #[test]
    fn service_time_scales_with_speed() {
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        let slow: u64 = (0..1000).map(|_| service_us(&mut a, 10.0, 5.0, 0.2)).sum();
        let fast: u64 = (0..1000).map(|_| service_us(&mut b, 10.0, 1.0, 0.2)).sum();
        let ratio = slow as f64 / fast as f64;
        assert!((ratio - 5.0).abs() < 0.01, "{ratio}");
    }
}
