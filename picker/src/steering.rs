//! Whether Envoy honours our picks for one cluster. A pick Envoy did not even try says nothing
//! about the endpoint: it is not in the cluster (a deleted pod), or the cluster does not read the
//! override header at all (its EnvoyFilter patch is missing, or locality-weighted load balancing
//! replaced `override_host`). When most picks of a cluster are refused, steering it only writes a
//! header Envoy ignores: the filter stops steering the cluster for a pause (`FIRST_PAUSE_US`,
//! doubling with each pause that follows another, up to `MAX_PAUSE_US`), then tries again, so a
//! cluster whose patch arrives later gets steered then.
//!
//! The refused share is a moving ratio over picks: ratio <- (1 - REFUSAL_STEP) ratio +
//! REFUSAL_STEP [refused] (a memory of about 1 / REFUSAL_STEP picks); a pause starts when it reaches
//! `PAUSE_RATIO` after at least `MIN_PICKS` picks.

pub const REFUSAL_STEP: f64 = 0.05;
pub const PAUSE_RATIO: f64 = 0.5;
pub const MIN_PICKS: u32 = 20;
pub const FIRST_PAUSE_US: u64 = 30_000_000;
pub const MAX_PAUSE_US: u64 = 600_000_000;

#[derive(Debug, Clone, Default)]
pub struct Steering {
    refused_ratio: f64,
    picks: u32,
    paused_until_us: u64,
    /// Pauses in a row (reset once picks are honoured again after one).
    pauses: u32,
}

impl Steering {
    pub fn paused(&self, now_us: u64) -> bool {
        now_us < self.paused_until_us
    }

    pub fn refused_ratio(&self) -> f64 {
        self.refused_ratio
    }

    /// The result of one steered pick. Returns the length of the pause it starts, if it starts one.
    pub fn note(&mut self, refused: bool, now_us: u64) -> Option<u64> {
        let x = if refused { 1.0 } else { 0.0 };
        self.refused_ratio = (1.0 - REFUSAL_STEP) * self.refused_ratio + REFUSAL_STEP * x;
        self.picks = self.picks.saturating_add(1);
        if self.picks < MIN_PICKS {
            return None;
        }
        if self.refused_ratio < PAUSE_RATIO {
            if self.refused_ratio < PAUSE_RATIO / 4.0 {
                self.pauses = 0;
            }
            return None;
        }
        let pause_us = (FIRST_PAUSE_US << self.pauses.min(8)).min(MAX_PAUSE_US);
        self.pauses = self.pauses.saturating_add(1);
        self.paused_until_us = now_us.saturating_add(pause_us);
        (self.refused_ratio, self.picks) = (0.0, 0);
        Some(pause_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occasional_refusals_never_pause() {
        let mut s = Steering::default();
        for i in 0..1_000u64 {
            // One refused pick in ten: a rollout's removed endpoints, say.
            assert_eq!(s.note(i % 10 == 0, i), None);
        }
        assert!(s.refused_ratio() < PAUSE_RATIO);
    }

    #[test]
    fn mostly_refused_pauses_then_tries_again_with_longer_pauses() {
        let mut s = Steering::default();
        let mut pause = None;
        let mut now = 0;
        for _ in 0..MIN_PICKS {
            pause = pause.or(s.note(true, now));
        }
        // 20 refusals in a row: ratio 1 - 0.95^20 = 0.64.
        assert_eq!(pause, Some(FIRST_PAUSE_US));
        assert!(s.paused(now) && s.paused(FIRST_PAUSE_US - 1) && !s.paused(FIRST_PAUSE_US));
        now = FIRST_PAUSE_US;
        let second = (0..MIN_PICKS).find_map(|_| s.note(true, now));
        assert_eq!(second, Some(2 * FIRST_PAUSE_US), "still refused: the next pause is longer");
        now += 2 * FIRST_PAUSE_US;
        // The patch arrived: picks are honoured and pauses start from the first length again.
        for _ in 0..200 {
            assert_eq!(s.note(false, now), None);
        }
        let third = (0..100).find_map(|_| s.note(true, now));
        assert_eq!(third, Some(FIRST_PAUSE_US));
    }

    #[test]
    fn pauses_are_capped() {
        let mut s = Steering::default();
        let mut longest = 0;
        for round in 0..20u64 {
            let now = round * MAX_PAUSE_US;
            if let Some(p) = (0..MIN_PICKS).find_map(|_| s.note(true, now)) {
                longest = longest.max(p);
            }
        }
        assert_eq!(longest, MAX_PAUSE_US);
    }
}
