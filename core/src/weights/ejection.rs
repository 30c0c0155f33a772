//! Ejection: an endpoint that mostly fails is taken out of the picks (the filter only probes it)
//! until its smoothed error ratio falls well below the threshold again. Its weight goes on following
//! its capacity meanwhile (down to the floor, for a dead one), so when it is readmitted it gets back
//! the weight it had when ejected (if higher), halved for each other ejection within
//! `FLAP_MEMORY_US`: a recovered endpoint returns to its share at once instead of climbing back from
//! the floor by `max_step` a recompute, and a flapping one does not.

use super::merge::Merged;
use super::params::WeightParams;
use crate::ewma::decay_weight;
use crate::health::FLAP_MEMORY_US;

/// The smoothed error ratio of one endpoint and whether it is ejected.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Ejection {
    pub error_ratio: f64,
    pub ejected: bool,
    /// The weight it had when last ejected, and ejections in a row (see the module docs).
    pub held_weight: Option<f64>,
    pub recent_ejections: u32,
    pub readmitted_us: u64,
}

impl Ejection {
    /// Step 2, errors: fold one recompute's merged rates in, `elapsed_us` after the last one (None:
    /// the first; it counts as a second). A window's `eps / qps` moves the ratio toward it with weight
    /// `(1 - exp(-elapsed / error_decay)) x min(1, requests / eject_min_requests)`: a thin window (the
    /// probes an ejected endpoint gets) moves it in proportion to its evidence, so a recovered
    /// endpoint is readmitted as soon as its probes succeed, not when the ratio has faded (the
    /// first window, before any weight was published, sets it when it is full); a window without
    /// requests lets it fade, `ratio x exp(-elapsed / error_fade)`. Ejected at a ratio of at least
    /// `eject_ratio`, readmitted below half of it (between: as it was).
    pub fn learn(&mut self, m: &Merged, first_sample: bool, p: &WeightParams, elapsed_us: Option<u64>) {
        let dt_us = elapsed_us.unwrap_or(1_000_000);
        let window_requests = m.qps * dt_us as f64 / 1e6;
        if m.qps > 0.0 {
            let evidence =
                if p.eject_min_requests > 0.0 { (window_requests / p.eject_min_requests).min(1.0) } else { 1.0 };
            let step = (1.0 - decay_weight(dt_us, p.error_decay_us)) * evidence;
            let sample = (m.eps / m.qps).clamp(0.0, 1.0);
            self.error_ratio =
                if first_sample && evidence >= 1.0 { sample } else { self.error_ratio * (1.0 - step) + sample * step };
        } else {
            self.error_ratio *= decay_weight(dt_us, p.error_fade_us);
        }
        if self.error_ratio >= p.eject_ratio {
            self.ejected = true;
        } else if self.error_ratio < p.eject_ratio / 2.0 {
            self.ejected = false;
        }
    }

    /// Step 2, after `learn`: the weight an endpoint resumes with. `weight` is its published one (None
    /// before the first); `was_ejected` what it was before this recompute's `learn`.
    pub fn resume(&mut self, was_ejected: bool, weight: Option<f64>, now_us: u64) -> Option<f64> {
        match (was_ejected, self.ejected) {
            (false, true) => {
                if now_us.saturating_sub(self.readmitted_us) > FLAP_MEMORY_US {
                    self.recent_ejections = 0;
                }
                self.recent_ejections = self.recent_ejections.saturating_add(1);
                self.held_weight = weight;
                weight
            }
            (true, false) => {
                self.readmitted_us = now_us;
                let held = self.resumed_weight();
                self.held_weight = None;
                match (weight, held) {
                    (Some(w), Some(h)) => Some(w.max(h)),
                    (w, h) => w.or(h),
                }
            }
            _ => weight,
        }
    }

    /// What a readmission resumes with: the weight at ejection x 0.5^(ejections in a row - 1).
    fn resumed_weight(&self) -> Option<f64> {
        let halvings = self.recent_ejections.saturating_sub(1).min(16) as i32;
        self.held_weight.map(|w| w * 0.5f64.powi(halvings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(qps: f64, eps: f64) -> Merged {
        Merged { qps, eps, reporters: 1, ..Merged::default() }
    }

    #[test]
    fn ejects_at_the_ratio_and_readmits_below_half_of_it() {
        let p = WeightParams::default();
        let mut e = Ejection::default();
        e.learn(&window(100.0, 50.0), true, &p, None);
        assert_eq!((e.error_ratio, e.ejected), (0.5, true));
        // Between half the threshold and the threshold: stays ejected.
        e.error_ratio = 0.3;
        e.learn(&window(100.0, 30.0), false, &p, Some(1_000_000));
        assert!(e.ejected, "{e:?}");
        e.learn(&window(100.0, 0.0), false, &p, Some(10_000_000));
        assert!(e.error_ratio < 0.25 && !e.ejected, "{e:?}");
    }

    #[test]
    fn fades_without_requests_and_weighs_thin_windows_by_their_evidence() {
        let p = WeightParams::default();
        let mut e = Ejection { error_ratio: 0.8, ejected: true, ..Default::default() };
        // 5 successes in a second, half of eject_min_requests: half a full window's step toward 0.
        e.learn(&window(5.0, 0.0), false, &p, Some(1_000_000));
        let step = (1.0 - (-0.5f64).exp()) * 0.5;
        assert!((e.error_ratio - 0.8 * (1.0 - step)).abs() < 1e-12, "{e:?}");
        let before = e.error_ratio;
        e.learn(&window(0.0, 0.0), false, &p, Some(p.error_fade_us as u64));
        assert!((e.error_ratio - before * (-1.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_recovered_endpoint_answering_its_probes_is_readmitted_within_a_few_windows() {
        let p = WeightParams::default();
        let mut e = Ejection { error_ratio: 1.0, ejected: true, ..Default::default() };
        let mut windows = 0;
        while e.ejected {
            // Four probes a second, all answered well.
            e.learn(&window(4.0, 0.0), false, &p, Some(1_000_000));
            windows += 1;
        }
        // (1 - e^-0.5) x 0.4 of the way to 0 a window: 9 windows from 1 to below 0.25. Meanwhile the
        // filters that probed it trust their own good answers over the view's ejection.
        assert!(windows <= 10, "{windows} windows");
    }

    #[test]
    fn a_readmitted_endpoint_resumes_its_weight_halved_for_each_recent_ejection() {
        let mut e = Ejection { ejected: true, ..Default::default() };
        assert_eq!(e.resume(false, Some(1.2), 0), Some(1.2));
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 5_000_000), Some(1.2), "back to its share at once");
        e.ejected = true;
        e.resume(false, Some(1.2), 6_000_000);
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 9_000_000), Some(0.6), "flapping: half of it");
        e.ejected = true;
        e.resume(false, Some(1.2), 9_000_000 + FLAP_MEMORY_US + 1);
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 9_000_000 + FLAP_MEMORY_US + 2), Some(1.2), "up for long: forgiven");
        assert_eq!(e.resume(false, Some(0.3), 0), Some(0.3), "no change, no effect");
    }
}
