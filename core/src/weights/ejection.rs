//! Ejection: an endpoint that mostly fails is taken out of the picks (the filter only probes it)
//! until its smoothed error ratio falls well below the threshold again.

use super::merge::Merged;
use super::params::WeightParams;
use crate::ewma::decay_weight;

/// The smoothed error ratio of one endpoint and whether it is ejected.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Ejection {
    pub error_ratio: f64,
    pub ejected: bool,
}

impl Ejection {
    /// Step 2, errors: fold one recompute's merged rates in, `elapsed_us` after the last one (None:
    /// the first; it counts as a second). A window with at least `eject_min_requests` requests moves
    /// the ratio toward its own `eps / qps` with weight `1 - exp(-elapsed / error_decay)` (the first
    /// sample, before any weight was published, sets it); a window without requests lets it fade,
    /// `ratio x exp(-elapsed / error_fade)`, so an ejected endpoint gets probed again. Ejected at a
    /// ratio of at least `eject_ratio`, readmitted below half of it (between: as it was).
    pub fn learn(&mut self, m: &Merged, first_sample: bool, p: &WeightParams, elapsed_us: Option<u64>) {
        let dt_us = elapsed_us.unwrap_or(1_000_000);
        let window_requests = m.qps * dt_us as f64 / 1e6;
        if window_requests >= p.eject_min_requests && m.qps > 0.0 {
            let keep = decay_weight(dt_us, p.error_decay_us);
            let sample = (m.eps / m.qps).clamp(0.0, 1.0);
            self.error_ratio = if first_sample { sample } else { self.error_ratio * keep + sample * (1.0 - keep) };
        } else if m.qps == 0.0 {
            self.error_ratio *= decay_weight(dt_us, p.error_fade_us);
        }
        if self.error_ratio >= p.eject_ratio {
            self.ejected = true;
        } else if self.error_ratio < p.eject_ratio / 2.0 {
            self.ejected = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(qps: f64, eps: f64) -> Merged {
        Merged { qps, eps, inflight: 0.0, latency_us: None, cpu: None, reporters: 1 }
    }

    #[test]
    fn ejects_at_the_ratio_and_readmits_below_half_of_it() {
        let p = WeightParams::default();
        let mut e = Ejection::default();
        e.learn(&window(100.0, 50.0), true, &p, None);
        assert_eq!(e, Ejection { error_ratio: 0.5, ejected: true });
        // Between half the threshold and the threshold: stays ejected.
        e.error_ratio = 0.3;
        e.learn(&window(100.0, 30.0), false, &p, Some(1_000_000));
        assert!(e.ejected, "{e:?}");
        e.learn(&window(100.0, 0.0), false, &p, Some(10_000_000));
        assert!(e.error_ratio < 0.25 && !e.ejected, "{e:?}");
    }

    #[test]
    fn fades_without_requests_and_ignores_thin_windows() {
        let p = WeightParams::default();
        let mut e = Ejection { error_ratio: 0.8, ejected: true };
        e.learn(&window(5.0, 5.0), false, &p, Some(1_000_000));
        assert_eq!(e.error_ratio, 0.8, "5 requests are fewer than eject_min_requests");
        e.learn(&window(0.0, 0.0), false, &p, Some(p.error_fade_us as u64));
        assert!((e.error_ratio - 0.8 * (-1.0f64).exp()).abs() < 1e-12);
    }
}
