//! Ejection: an endpoint that mostly fails is taken out of the picks (the filter only probes it)
//! until its smoothed error ratio falls well below the threshold again, or a window brings only good
//! answers, at least `READMIT_MIN_ANSWERS` of them. Its weight goes on following its capacity
//! meanwhile (down to the floor, for a dead one), so when it is readmitted it gets back the weight it
//! had while it was last healthy (error ratio below a quarter of the threshold; its weight at
//! ejection if higher), relative to the others: both are kept as ratios to the live mean (see
//! `Ejection::resume`), since while it was out the others' weights rose to fill the mean of 1 and
//! its old absolute weight would be no more than theirs. A recovered endpoint returns to its share
//! at once instead of climbing back from the floor by `max_step` a recompute. In full when the
//! evidence that readmits it is strong (`Ejection::strong_evidence`: a flapping endpoint must show
//! more); otherwise (fewer answers, or the ratio faded) halved for each other ejection within
//! `FLAP_MEMORY_US`, so a flapping one does not. A flap needs a good answer: an endpoint
//! readmitted because its ratio faded while nothing reached it, and ejected again before it answered
//! well, is still in the same outage; that ejection neither counts nor replaces the weight held
//! from the outage's start (a 20 s outage used to count three or four ejections and come back at
//! an eighth of its share).

use crate::merge::Merged;
use crate::params::WeightParams;
use tailweight_math::ewma::decay_weight;
use tailweight_math::ramp::FLAP_MEMORY_US;

/// Good answers in one window, and no failure, that readmit an ejected endpoint at once (one probe
/// from each of a few proxies).
pub const READMIT_MIN_ANSWERS: f64 = 3.0;

/// The smoothed error ratio of one endpoint and whether it is ejected.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Ejection {
    pub error_ratio: f64,
    pub ejected: bool,
    /// The weight it had when last ejected, as a ratio to the live mean then (see `resume`), and
    /// ejections in a row (see the module docs).
    pub held_weight: Option<f64>,
    pub recent_ejections: u32,
    pub readmitted_us: u64,
    /// Good answers in the window that readmitted it, if one did (see the module docs).
    pub readmitting_answers: f64,
    /// Whether it answered well since it was last readmitted (see the module docs).
    pub answered_since_readmitted: bool,
    /// The weight it had at the last recompute it was healthy, as a ratio to the live mean then.
    pub healthy_weight: Option<f64>,
}

impl Ejection {
    /// Step 2, errors: fold one recompute's merged rates in, `elapsed_us` after the last one (None:
    /// the first; it counts as a second). A window's `eps / qps` moves the ratio toward it with weight
    /// `(1 - exp(-elapsed / error_decay)) x min(1, requests / eject_min_requests)`: a thin window (the
    /// probes an ejected endpoint gets) moves it in proportion to its evidence, so a recovered
    /// endpoint is readmitted as soon as its probes succeed, not when the ratio has faded (the
    /// first window, before any weight was published, sets it when it is full); a window without
    /// requests lets it fade, `ratio x exp(-elapsed / error_fade)`. Ejected at a ratio of at least
    /// `eject_ratio`, readmitted below half of it (between: as it was), or at once by a window of at
    /// least `READMIT_MIN_ANSWERS` requests and no failure (the ratio then starts again from 0).
    pub fn learn(&mut self, m: &Merged, first_sample: bool, p: &WeightParams, elapsed_us: Option<u64>) {
        let dt_us = elapsed_us.unwrap_or(1_000_000);
        let window_requests = m.qps * dt_us as f64 / 1e6;
        self.readmitting_answers = 0.0;
        self.answered_since_readmitted |= !self.ejected && m.qps > m.eps;
        if self.ejected && m.eps <= 0.0 && window_requests >= READMIT_MIN_ANSWERS {
            self.error_ratio = 0.0;
            self.readmitting_answers = window_requests;
        } else if m.qps > 0.0 {
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
    /// before the first); `was_ejected` what it was before this recompute's `learn`; `live_mean` the
    /// mean published weight of the endpoints not ejected before it (1 if none). The weights it keeps
    /// are relative, `weight / live_mean`, and a readmitted one resumes with
    /// `max(weight, kept x live_mean now)` (kept halved as `resumed_weight` says, unless
    /// `strong_evidence`).
    pub fn resume(
        &mut self,
        was_ejected: bool,
        weight: Option<f64>,
        live_mean: f64,
        p: &WeightParams,
        now_us: u64,
    ) -> Option<f64> {
        let live_mean = if live_mean.is_finite() && live_mean > 0.0 { live_mean } else { 1.0 };
        let resumed = self.resumed(was_ejected, weight, live_mean, now_us);
        if !self.ejected && self.error_ratio < p.eject_ratio / 4.0 {
            if let Some(w) = resumed {
                self.healthy_weight = Some(w / live_mean);
            }
        }
        resumed
    }

    fn resumed(&mut self, was_ejected: bool, weight: Option<f64>, live_mean: f64, now_us: u64) -> Option<f64> {
        match (was_ejected, self.ejected) {
            (false, true) => {
                let forgiven = now_us.saturating_sub(self.readmitted_us) > FLAP_MEMORY_US;
                if forgiven {
                    self.recent_ejections = 0;
                }
                let same_outage = !forgiven && !self.answered_since_readmitted && self.held_weight.is_some();
                if !same_outage {
                    self.recent_ejections = self.recent_ejections.saturating_add(1);
                    self.held_weight = match (weight.map(|w| w / live_mean), self.healthy_weight) {
                        (Some(w), Some(h)) => Some(w.max(h)),
                        (w, h) => w.or(h),
                    };
                }
                weight
            }
            (true, false) => {
                self.readmitted_us = now_us;
                self.answered_since_readmitted = self.readmitting_answers > 0.0;
                let held = if self.strong_evidence() { self.held_weight } else { self.resumed_weight() };
                let held = held.map(|h| h * live_mean);
                match (weight, held) {
                    (Some(w), Some(h)) => Some(w.max(h)),
                    (w, h) => w.or(h),
                }
            }
            _ => weight,
        }
    }

    /// The window that readmits it had only good answers, at least `READMIT_MIN_ANSWERS x 2^(other
    /// ejections within FLAP_MEMORY_US)` of them.
    fn strong_evidence(&self) -> bool {
        let others = self.recent_ejections.saturating_sub(1).min(16);
        self.readmitting_answers >= READMIT_MIN_ANSWERS * f64::from(1u32 << others)
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
        // 5 answers in a second, one failed, half of eject_min_requests: half a full window's step
        // toward 0.2.
        e.learn(&window(5.0, 1.0), false, &p, Some(1_000_000));
        let step = (1.0 - (-0.5f64).exp()) * 0.5;
        assert!((e.error_ratio - (0.8 * (1.0 - step) + 0.2 * step)).abs() < 1e-12, "{e:?}");
        // 2 good answers, below READMIT_MIN_ANSWERS: a fifth of a full step toward 0.
        e.error_ratio = 0.8;
        e.learn(&window(2.0, 0.0), false, &p, Some(1_000_000));
        let step = (1.0 - (-0.5f64).exp()) * 0.2;
        assert!((e.error_ratio - 0.8 * (1.0 - step)).abs() < 1e-12, "{e:?}");
        let before = e.error_ratio;
        e.learn(&window(0.0, 0.0), false, &p, Some(p.error_fade_us as u64));
        assert!((e.error_ratio - before * (-1.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_recovered_endpoint_answering_its_probes_is_readmitted_in_one_window() {
        let p = WeightParams::default();
        let mut e = Ejection { error_ratio: 1.0, ejected: true, ..Default::default() };
        // Four probes in a second (one from each of four proxies), all answered well.
        e.learn(&window(4.0, 0.0), false, &p, Some(1_000_000));
        assert_eq!((e.error_ratio, e.ejected), (0.0, false));
        // One failure among them: the evidence path, still ejected.
        let mut e = Ejection { error_ratio: 1.0, ejected: true, ..Default::default() };
        e.learn(&window(4.0, 1.0), false, &p, Some(1_000_000));
        assert!(e.ejected, "{e:?}");
    }

    #[test]
    fn a_readmitted_endpoint_resumes_the_weight_it_had_while_healthy() {
        let p = WeightParams::default();
        let mut e = Ejection::default();
        assert_eq!(e.resume(false, Some(1.5), 1.0, &p, 0), Some(1.5));
        // It starts failing: its weight falls before the ratio reaches the threshold.
        e.error_ratio = 0.3;
        e.resume(false, Some(1.0), 1.0, &p, 1_000_000);
        e.error_ratio = 0.6;
        e.ejected = true;
        e.resume(false, Some(0.8), 1.0, &p, 2_000_000);
        e.ejected = false;
        e.error_ratio = 0.0;
        assert_eq!(e.resume(true, Some(0.05), 1.0, &p, 20_000_000), Some(1.5), "its healthy weight");
    }

    #[test]
    fn strong_evidence_restores_the_weight_at_ejection_and_a_flapper_needs_more_of_it() {
        let p = WeightParams::default();
        let eject = |e: &mut Ejection, now: u64| {
            e.error_ratio = 1.0;
            e.learn(&window(100.0, 100.0), false, &p, Some(1_000_000));
            assert!(e.ejected);
            e.resume(false, Some(1.2), 1.0, &p, now);
        };
        let readmit = |e: &mut Ejection, answers: f64, now: u64| {
            e.learn(&window(answers, 0.0), false, &p, Some(1_000_000));
            assert!(!e.ejected, "{e:?}");
            e.resume(true, Some(0.05), 1.0, &p, now)
        };
        let mut e = Ejection::default();
        eject(&mut e, 0);
        assert_eq!(readmit(&mut e, 3.0, 5_000_000), Some(1.2));
        // Ejected again within the flap memory: 3 good answers readmit it at half, 6 in full.
        eject(&mut e, 6_000_000);
        assert_eq!(readmit(&mut e, 3.0, 7_000_000), Some(0.6), "weak evidence for a flapper");
        eject(&mut e, 8_000_000);
        assert_eq!(readmit(&mut e, 12.0, 9_000_000), Some(1.2), "three ejections in a row: 12 answers");
        eject(&mut e, 10_000_000);
        assert_eq!(readmit(&mut e, 23.0, 11_000_000), Some(0.15), "four in a row: 24 needed, else 1/8");
    }

    #[test]
    fn a_readmitted_endpoint_resumes_its_weight_relative_to_the_live_mean() {
        let p = WeightParams::default();
        let mut e = Ejection::default();
        // Twice the mean of 0.75 while healthy; ejected at 0.9 against a live mean of 0.9.
        assert_eq!(e.resume(false, Some(1.5), 0.75, &p, 0), Some(1.5));
        e.ejected = true;
        e.resume(false, Some(0.9), 0.9, &p, 1_000_000);
        // The others rose to 1.4 while it was out: back at twice theirs.
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 1.4, &p, 20_000_000), Some(2.8));
        assert_eq!(e.resume(false, Some(2.0), f64::NAN, &p, 21_000_000), Some(2.0));
        assert_eq!(e.healthy_weight, Some(2.0), "no live mean: 1");
    }

    #[test]
    fn a_readmitted_endpoint_resumes_its_weight_halved_for_each_recent_ejection() {
        let p = WeightParams::default();
        let mut e = Ejection { ejected: true, ..Default::default() };
        assert_eq!(e.resume(false, Some(1.2), 1.0, &p, 0), Some(1.2));
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 1.0, &p, 5_000_000), Some(1.2), "back to its share at once");
        e.answered_since_readmitted = true;
        e.ejected = true;
        e.resume(false, Some(1.2), 1.0, &p, 6_000_000);
        e.ejected = false;
        assert_eq!(e.resume(true, Some(0.05), 1.0, &p, 9_000_000), Some(0.6), "flapping: half of it");
        e.answered_since_readmitted = true;
        e.ejected = true;
        e.resume(false, Some(1.2), 1.0, &p, 9_000_000 + FLAP_MEMORY_US + 1);
        e.ejected = false;
        assert_eq!(
            e.resume(true, Some(0.05), 1.0, &p, 9_000_000 + FLAP_MEMORY_US + 2),
            Some(1.2),
            "up for long: forgiven"
        );
        assert_eq!(e.resume(false, Some(0.3), 1.0, &p, 0), Some(0.3), "no change, no effect");
    }

    #[test]
    fn readmitted_by_fading_and_failing_again_is_the_same_outage_not_a_flap() {
        // Down for 20 s: ejected; its ratio fades while the proxies keep away, it is readmitted,
        // the first requests fail, ejected again, twice. Then it is back and answers its probes
        // (3, weak evidence for a flapper): it resumes its whole healthy share, not an eighth.
        let p = WeightParams::default();
        let mut e = Ejection::default();
        assert_eq!(e.resume(false, Some(1.5), 1.0, &p, 0), Some(1.5));
        let fail = |e: &mut Ejection, now: u64| {
            for _ in 0..3 {
                e.learn(&window(20.0, 20.0), false, &p, Some(1_000_000));
            }
            assert!(e.ejected, "{e:?}");
            e.resume(false, Some(0.05), 1.0, &p, now);
        };
        fail(&mut e, 1_000_000);
        for at in [8_000_000, 15_000_000] {
            e.error_ratio = 0.2;
            e.learn(&window(0.0, 0.0), false, &p, Some(1_000_000));
            assert!(!e.ejected, "faded: readmitted {e:?}");
            e.resume(true, Some(0.05), 1.0, &p, at);
            fail(&mut e, at + 1_000_000);
        }
        assert_eq!(e.recent_ejections, 1, "{e:?}");
        e.learn(&window(3.0, 0.0), false, &p, Some(1_000_000));
        assert_eq!(e.resume(true, Some(0.05), 1.0, &p, 21_000_000), Some(1.5), "{e:?}");
        // A good answer after a readmission makes the next ejection a flap.
        e.learn(&window(10.0, 0.0), false, &p, Some(1_000_000));
        fail(&mut e, 23_000_000);
        assert_eq!(e.recent_ejections, 2, "{e:?}");
    }
}
