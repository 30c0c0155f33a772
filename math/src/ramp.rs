//! Recovery ramps and flapping, shared by the picker (a worker's endpoint health) and the
//! aggregator's weights (smoothing and ejection): an endpoint that comes back is not flooded, and
//! one that keeps coming back is held back longer.

/// A ramp starts at this share of the endpoint's full sampling weight.
pub const RAMP_FLOOR: f64 = 0.1;
/// Suspensions (or ejections) this soon after the last recovery count as flapping (longer recovery
/// ramps, longer ejections).
pub const FLAP_MEMORY_US: u64 = 30_000_000;

/// A sampling weight growing from `RAMP_FLOOR` to 1 over `window_us` from `start_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ramp {
    pub start_us: u64,
    pub window_us: u64,
}

impl Ramp {
    /// RAMP_FLOOR + (1 - RAMP_FLOOR) x min(1, (now - start) / window).
    pub fn factor(&self, now_us: u64) -> f64 {
        if self.window_us == 0 {
            return 1.0;
        }
        let progress = (now_us.saturating_sub(self.start_us) as f64 / self.window_us as f64).min(1.0);
        RAMP_FLOOR + (1.0 - RAMP_FLOOR) * progress
    }

    pub fn done(&self, now_us: u64) -> bool {
        now_us.saturating_sub(self.start_us) >= self.window_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_ramp_is_linear_from_the_floor() {
        let r = Ramp { start_us: 1_000, window_us: 10_000 };
        assert!((r.factor(1_000) - 0.1).abs() < 1e-12);
        assert!((r.factor(6_000) - 0.55).abs() < 1e-12);
        assert_eq!(r.factor(11_000), 1.0);
        assert_eq!(r.factor(0), RAMP_FLOOR, "before its start it is at the floor");
        assert!(!r.done(10_999) && r.done(11_000));
        assert_eq!(Ramp { start_us: 0, window_us: 0 }.factor(0), 1.0);
    }
}
