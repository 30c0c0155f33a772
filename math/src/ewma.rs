//! Time-weighted moving averages. Time is always an argument (microseconds), never read here.

/// Peak-sensitive EWMA of latency (Finagle/Linkerd "peak EWMA"):
/// a sample above the estimate replaces it at once; a lower sample pulls it down with weight
/// `1 - exp(-elapsed / decay)`, where `elapsed` is the time since the previous sample. The decay is
/// time-based, so the estimate moves at the same speed whatever the request rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeakEwma {
    estimate_us: f64,
    stamp_us: u64,
}

impl PeakEwma {
    pub fn new(first_sample_us: f64, now_us: u64) -> Self {
        PeakEwma { estimate_us: first_sample_us.max(0.0), stamp_us: now_us }
    }

    pub fn observe(&mut self, sample_us: f64, now_us: u64, decay_us: f64) {
        let sample_us = sample_us.max(0.0);
        if sample_us > self.estimate_us {
            self.estimate_us = sample_us;
        } else {
            let w = decay_weight(now_us.saturating_sub(self.stamp_us), decay_us);
            self.estimate_us = self.estimate_us * w + sample_us * (1.0 - w);
        }
        self.stamp_us = self.stamp_us.max(now_us);
    }

    pub fn value_us(&self) -> f64 {
        self.estimate_us
    }

    /// When the last sample arrived.
    pub fn stamp_us(&self) -> u64 {
        self.stamp_us
    }
}

/// A time-decayed rate of "bad" events among all events (e.g. failures among responses):
/// each event moves the ratio toward 1 (bad) or 0 (good) with weight `1 - exp(-elapsed / decay)`,
/// but never by less than `min_step`, so a burst of failures is seen even at a high request rate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DecayingRatio {
    ratio: f64,
    stamp_us: u64,
}

impl DecayingRatio {
    pub fn observe(&mut self, bad: bool, now_us: u64, decay_us: f64, min_step: f64) {
        let w = decay_weight(now_us.saturating_sub(self.stamp_us), decay_us).min(1.0 - min_step);
        let x = if bad { 1.0 } else { 0.0 };
        self.ratio = self.ratio * w + x * (1.0 - w);
        self.stamp_us = self.stamp_us.max(now_us);
    }

    pub fn value(&self) -> f64 {
        self.ratio
    }

    /// The ratio as of `now`: it fades with `exp(-idle / fade)` while no event arrives, so an
    /// endpoint that failed long ago and has not been tried since is tried again.
    pub fn value_at(&self, now_us: u64, fade_us: f64) -> f64 {
        self.ratio * decay_weight(now_us.saturating_sub(self.stamp_us), fade_us)
    }
}

/// exp(-elapsed / decay): the share of the old value kept after `elapsed`.
pub fn decay_weight(elapsed_us: u64, decay_us: f64) -> f64 {
    if decay_us <= 0.0 {
        return 0.0;
    }
    (-(elapsed_us as f64) / decay_us).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECAY: f64 = 1_000_000.0; // 1 s

    #[test]
    fn rises_at_once_to_a_higher_sample() {
        let mut e = PeakEwma::new(1_000.0, 0);
        e.observe(9_000.0, 10, DECAY);
        assert_eq!(e.value_us(), 9_000.0);
    }

    #[test]
    fn decays_toward_lower_samples_with_exp_weight() {
        let mut e = PeakEwma::new(10_000.0, 0);
        // One decay constant later, a sample of 0 keeps exp(-1) of the old value.
        e.observe(0.0, 1_000_000, DECAY);
        assert!((e.value_us() - 10_000.0 * (-1.0f64).exp()).abs() < 1e-6);
    }

    #[test]
    fn decay_speed_does_not_depend_on_sample_rate() {
        // 1000 samples 1 ms apart move the estimate as far as one sample 1 s later.
        let mut many = PeakEwma::new(10_000.0, 0);
        for i in 1..=1000u64 {
            many.observe(2_000.0, i * 1_000, DECAY);
        }
        let mut one = PeakEwma::new(10_000.0, 0);
        one.observe(2_000.0, 1_000_000, DECAY);
        assert!((many.value_us() - one.value_us()).abs() < 1.0, "{} vs {}", many.value_us(), one.value_us());
    }

    #[test]
    fn same_instant_sample_below_does_not_move_it() {
        let mut e = PeakEwma::new(5_000.0, 100);
        e.observe(1_000.0, 100, DECAY);
        assert_eq!(e.value_us(), 5_000.0);
    }

    #[test]
    fn negative_samples_are_clamped_to_zero() {
        let mut e = PeakEwma::new(-5.0, 0);
        assert_eq!(e.value_us(), 0.0);
        e.observe(-1.0, 1_000_000_000, DECAY);
        assert_eq!(e.value_us(), 0.0);
    }

    #[test]
    fn zero_decay_follows_the_last_sample() {
        let mut e = PeakEwma::new(5_000.0, 0);
        e.observe(1_000.0, 1, 0.0);
        assert_eq!(e.value_us(), 1_000.0);
    }

    #[test]
    fn ratio_moves_at_least_min_step_per_event() {
        let mut r = DecayingRatio::default();
        r.observe(true, 0, DECAY, 0.1);
        assert!((r.value() - 0.1).abs() < 1e-12);
        r.observe(true, 0, DECAY, 0.1);
        assert!((r.value() - 0.19).abs() < 1e-12);
    }

    #[test]
    fn ratio_fades_while_idle() {
        let mut r = DecayingRatio::default();
        r.observe(true, 0, DECAY, 1.0);
        assert_eq!(r.value_at(0, DECAY), 1.0);
        assert!((r.value_at(1_000_000, DECAY) - (-1.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn ratio_forgets_old_failures_over_time() {
        let mut r = DecayingRatio::default();
        for i in 0..50 {
            r.observe(true, i, DECAY, 0.1);
        }
        assert!(r.value() > 0.99);
        r.observe(false, 3 * 1_000_000, DECAY, 0.1);
        assert!(r.value() < 0.06, "{}", r.value());
    }
}
