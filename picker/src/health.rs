//! Whether an endpoint answers, as one worker sees it. Four things, each with its rule here:
//!
//! - **Recent failures**: a ratio that each failure moves toward 1 and each success toward 0 (at
//!   least `FAILURE_MIN_STEP` of the way per event, so a burst is seen at any request rate) and that
//!   fades with `exp(-idle / failure_decay)` while nothing happens: old failures are forgiven by time,
//!   not only by new successes an avoided endpoint would never get. It weighs on the score (see
//!   `Endpoint::score`).
//! - **Suspension**: after `SUSPEND_AFTER` failures in a row with the ratio at `SUSPEND_RATIO` or
//!   more, the endpoint gets no normal picks. It gets one probe request when `probe_at` comes; a failed
//!   probe doubles the wait (up to `MAX_PROBE_DOUBLINGS` times), a successful one ends the suspension.
//!   Overload answers (429, RESOURCE_EXHAUSTED) count as failures for the ratio but never suspend:
//!   a shedding endpoint is alive and busy, it backs off through its score.
//! - **Absence**: Envoy did not even try an endpoint we picked (it is not in the cluster, e.g. a
//!   deleted pod, or the cluster does not read the override header). It gets no picks until it serves
//!   a request again (the fallback load balancer found it in the cluster).
//! - **Ramps**: after a suspension ends, and when an endpoint joins a cluster this worker has known
//!   for longer than the slow-start window, its sampling weight grows linearly from `RAMP_FLOOR` to
//!   full over the ramp's window (Envoy's slow start with aggression 1): a recovered or cold pod is
//!   not flooded. The recovery ramp doubles with each suspension within `FLAP_MEMORY_US` of the last
//!   recovery, so a flapping endpoint never returns at full rate (the ramp's shape and the flap
//!   memory are `tailweight_math::ramp`'s: the aggregator's weights use them too).
//! - **Strong evidence**: a recovery ramp ends early, at full share, after enough good answers in a
//!   row at normal latency (the count is `Health::note_answer_latency`'s): an endpoint that is
//!   plainly back is not held at a fraction for the whole window, and a flapping one must show more.
//!   Slow-start ramps (cold pods) run their full window.

use crate::outcome::ResponseClass;
use tailweight_math::ewma::DecayingRatio;
use tailweight_math::ramp::{Ramp, FLAP_MEMORY_US};

/// Each failure or success moves the failure ratio at least this far toward 1 or 0.
pub const FAILURE_MIN_STEP: f64 = 0.3;
/// Suspend at this failure ratio...
pub const SUSPEND_RATIO: f64 = 0.5;
/// ...after this many failures in a row (two in a row reach it from nothing: 1 - 0.7^2 = 0.51).
pub const SUSPEND_AFTER: u32 = 2;
/// Probe waits double at most this many times (a probe interval of 250 ms backs off to 1 s).
pub const MAX_PROBE_DOUBLINGS: u32 = 2;
/// A suspension that follows a health check's pass with no good user answer since (the check said
/// healthy, users' requests failed: a health path that answers 2xx while the application fails)
/// starts its probe wait one doubling further than the last such one, up to this many (250 ms x 32
/// = 8 s): each such cycle costs two failed user requests, so a destination whose checks lie costs
/// ever fewer, down to below the one per second users' probes cost. A good user answer resets it.
pub const MAX_UNCONFIRMED_DOUBLINGS: u32 = 5;
/// Recovery ramps double at most this many times for a flapping endpoint.
pub const MAX_RAMP_DOUBLINGS: u32 = 4;

/// The time constants health needs (from `PickParams`), in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthTimes {
    pub failure_decay_us: f64,
    pub probe_interval_us: u64,
    pub recovery_ramp_us: u64,
    /// Good answers in a row at normal latency that end a first recovery ramp early (see
    /// `note_answer_latency`; 0: a ramp always runs its length).
    pub recovery_evidence_answers: u32,
}

/// Whether normal picks may choose the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Availability {
    #[default]
    Available,
    /// No normal picks; a probe at `probe_at_us`, after `doublings` failed probes.
    Suspended { probe_at_us: u64, doublings: u32 },
    /// Envoy refused a pick of it: no picks until it serves a request again.
    Absent,
}

/// One endpoint's health in one worker.
#[derive(Debug, Clone, Default)]
pub struct Health {
    failures: DecayingRatio,
    consecutive_failures: u32,
    availability: Availability,
    ramp: Option<Ramp>,
    /// The ramp is a recovery's (not a slow start), and the good answers at normal latency in a row
    /// since it began.
    recovering: bool,
    strong_answers: u32,
    /// Suspensions since the endpoint last stayed up for `FLAP_MEMORY_US`, and when it last recovered.
    flaps: u32,
    recovered_us: u64,
    /// A health check's pass ended the last suspension and no user request has answered well since;
    /// and the doublings the last suspension after such a pass started with.
    check_unconfirmed: bool,
    unconfirmed_doublings: u32,
    /// When the current (or last) suspension began, and the doublings its probe wait began with.
    suspended_us: u64,
    suspension_doublings: u32,
}

/// What a recorded response changed, for the sampler (weights) and the caller's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthChange {
    None,
    Suspended,
    Recovered,
    /// An absent endpoint served again.
    Returned,
    /// Strong evidence ended a recovery ramp: full share now.
    RampCut,
}

impl Health {
    pub fn availability(&self) -> Availability {
        self.availability
    }

    pub fn ramp(&self) -> Option<Ramp> {
        self.ramp
    }

    /// The recent failure ratio as of `now` (faded while no response arrived).
    pub fn failure_ratio(&self, now_us: u64, t: &HealthTimes) -> f64 {
        self.failures.value_at(now_us, t.failure_decay_us)
    }

    /// Normal picks may choose it (not suspended, not absent).
    pub fn pickable(&self) -> bool {
        self.availability == Availability::Available
    }

    /// The share of its sampling weight it gets now: 0 when not pickable, the ramp's factor while one
    /// runs, else 1.
    pub fn weight_factor(&self, now_us: u64) -> f64 {
        if !self.pickable() {
            return 0.0;
        }
        self.ramp.map_or(1.0, |r| r.factor(now_us))
    }

    /// Start a ramp of `window_us` (slow start of an endpoint new to a known cluster).
    pub fn start_ramp(&mut self, now_us: u64, window_us: u64) {
        if window_us > 0 {
            self.ramp = Some(Ramp { start_us: now_us, window_us });
        }
        self.recovering = false;
    }

    /// End finished ramps; true if one ended (the sampler's weights change).
    pub fn settle_ramp(&mut self, now_us: u64) -> bool {
        match self.ramp {
            Some(r) if r.done(now_us) => {
                self.ramp = None;
                true
            }
            _ => false,
        }
    }

    /// A response attributed to this endpoint.
    pub fn record(&mut self, class: ResponseClass, now_us: u64, t: &HealthTimes) -> HealthChange {
        let bad = !class.is_success();
        self.failures.observe(bad, now_us, t.failure_decay_us, FAILURE_MIN_STEP);
        if bad {
            self.strong_answers = 0;
        } else {
            self.consecutive_failures = 0;
            return match self.availability {
                Availability::Suspended { .. } => {
                    self.recover(now_us, t);
                    HealthChange::Recovered
                }
                Availability::Absent => {
                    self.availability = Availability::Available;
                    HealthChange::Returned
                }
                Availability::Available => HealthChange::None,
            };
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        match self.availability {
            Availability::Suspended { doublings, .. } => {
                // A failed probe (or a late failure): wait longer before the next one.
                let doublings = (doublings + 1).min(MAX_PROBE_DOUBLINGS).max(doublings);
                self.availability =
                    Availability::Suspended { probe_at_us: now_us + probe_wait(t, doublings), doublings };
                HealthChange::None
            }
            _ if class == ResponseClass::Failure
                && self.consecutive_failures >= SUSPEND_AFTER
                && self.failures.value() >= SUSPEND_RATIO =>
            {
                if now_us.saturating_sub(self.recovered_us) > FLAP_MEMORY_US {
                    self.flaps = 0;
                }
                self.flaps = self.flaps.saturating_add(1);
                self.ramp = None;
                let doublings = if std::mem::take(&mut self.check_unconfirmed) {
                    self.unconfirmed_doublings = (self.unconfirmed_doublings + 1).min(MAX_UNCONFIRMED_DOUBLINGS);
                    self.unconfirmed_doublings
                } else {
                    0
                };
                self.availability =
                    Availability::Suspended { probe_at_us: now_us + probe_wait(t, doublings), doublings };
                self.suspended_us = now_us;
                self.suspension_doublings = doublings;
                HealthChange::Suspended
            }
            _ => HealthChange::None,
        }
    }

    /// A good answer (already `record`ed) at normal latency or not (see `Endpoint::record`): a recovery
    /// ramp ends (RampCut) after `recovery_evidence_answers x 2^min(flaps - 1, MAX_RAMP_DOUBLINGS)`
    /// normal answers in a row since it began, the probe's included (`flaps`: suspensions within the
    /// flap memory); a failure or a slow answer starts the count again. Never with 0 answers.
    pub fn note_answer_latency(&mut self, normal: bool, now_us: u64, t: &HealthTimes) -> HealthChange {
        if t.recovery_evidence_answers == 0 || !self.recovering || self.ramp.is_none_or(|r| r.done(now_us)) {
            return HealthChange::None;
        }
        if !normal {
            self.strong_answers = 0;
            return HealthChange::None;
        }
        self.strong_answers = self.strong_answers.saturating_add(1);
        let needed = t.recovery_evidence_answers << self.flaps.saturating_sub(1).min(MAX_RAMP_DOUBLINGS);
        if self.strong_answers < needed {
            return HealthChange::None;
        }
        self.ramp = None;
        self.recovering = false;
        HealthChange::RampCut
    }

    /// A failed health check at `now_us`, as a failed probe (`record`), except that with `back_off`
    /// false the wait to the next is the one the suspension began with: where the checks of all
    /// callers together are held to a rate (see `health_check::check_share`), backing off would only
    /// slow the comeback.
    pub fn record_failed_check(&mut self, now_us: u64, t: &HealthTimes, back_off: bool) -> HealthChange {
        let change = self.record(ResponseClass::Failure, now_us, t);
        if let (false, Availability::Suspended { .. }) = (back_off, self.availability) {
            let doublings = self.suspension_doublings;
            self.availability = Availability::Suspended { probe_at_us: now_us + probe_wait(t, doublings), doublings };
        }
        change
    }

    /// When the current suspension began (None unless suspended).
    pub fn suspended_since_us(&self) -> Option<u64> {
        self.probe_due_us().map(|_| self.suspended_us)
    }

    /// A health check's pass just ended its suspension (see `MAX_UNCONFIRMED_DOUBLINGS`).
    pub fn recovered_by_check(&mut self) {
        self.check_unconfirmed = true;
    }

    /// A user request answered well: what a health check said is confirmed.
    pub fn confirm(&mut self) {
        self.check_unconfirmed = false;
        self.unconfirmed_doublings = 0;
    }

    /// Envoy did not try this endpoint when we picked it.
    pub fn mark_absent(&mut self) {
        self.availability = Availability::Absent;
        self.ramp = None;
    }

    /// When its probe is due (None unless suspended).
    pub fn probe_due_us(&self) -> Option<u64> {
        match self.availability {
            Availability::Suspended { probe_at_us, .. } => Some(probe_at_us),
            _ => None,
        }
    }

    /// A probe goes out now: no other before its wait has passed (it may take that long to answer).
    pub fn probe_sent(&mut self, now_us: u64, t: &HealthTimes) {
        if let Availability::Suspended { doublings, .. } = self.availability {
            self.availability = Availability::Suspended { probe_at_us: now_us + probe_wait(t, doublings), doublings };
        }
    }

    fn recover(&mut self, now_us: u64, t: &HealthTimes) {
        self.availability = Availability::Available;
        self.recovered_us = now_us;
        // The failures that suspended it are forgiven; the ramp limits what a flapping one gets.
        self.failures = DecayingRatio::default();
        let doublings = self.flaps.saturating_sub(1).min(MAX_RAMP_DOUBLINGS);
        self.start_ramp(now_us, t.recovery_ramp_us << doublings);
        self.recovering = self.ramp.is_some();
        self.strong_answers = 0;
    }
}

/// probe_interval x 2^doublings.
fn probe_wait(t: &HealthTimes, doublings: u32) -> u64 {
    t.probe_interval_us << doublings.min(MAX_UNCONFIRMED_DOUBLINGS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailweight_math::ramp::RAMP_FLOOR;

    const MS: u64 = 1_000;
    const T: HealthTimes = HealthTimes {
        failure_decay_us: 1_000_000.0,
        probe_interval_us: 250 * MS,
        recovery_ramp_us: 1_000 * MS,
        recovery_evidence_answers: 3,
    };

    #[test]
    fn a_run_of_failures_suspends_and_a_probe_success_recovers_with_a_ramp() {
        let mut h = Health::default();
        assert_eq!(h.record(ResponseClass::Failure, 0, &T), HealthChange::None, "one failure is not a run");
        assert!(h.pickable());
        assert_eq!(h.record(ResponseClass::Failure, 1, &T), HealthChange::Suspended);
        assert!(!h.pickable());
        assert_eq!(h.weight_factor(1), 0.0);
        assert_eq!(h.probe_due_us(), Some(1 + 250 * MS));
        // The probe fails: the wait doubles, twice at most.
        h.probe_sent(250 * MS, &T);
        assert_eq!(h.record(ResponseClass::Failure, 260 * MS, &T), HealthChange::None);
        assert_eq!(h.probe_due_us(), Some(260 * MS + 500 * MS));
        h.record(ResponseClass::Failure, 800 * MS, &T);
        h.record(ResponseClass::Failure, 1_900 * MS, &T);
        assert_eq!(h.probe_due_us(), Some(1_900 * MS + 1_000 * MS), "capped at 4 x the interval");
        // It answers well: available again at once, weight ramping from 10% over the recovery ramp.
        assert_eq!(h.record(ResponseClass::Success, 3_000 * MS, &T), HealthChange::Recovered);
        assert!(h.pickable());
        assert!((h.weight_factor(3_000 * MS) - RAMP_FLOOR).abs() < 1e-12);
        assert!((h.weight_factor(3_500 * MS) - 0.55).abs() < 1e-12);
        assert_eq!(h.weight_factor(4_000 * MS), 1.0);
        assert_eq!(h.failure_ratio(3_000 * MS, &T), 0.0, "its failures are forgiven");
        assert!(h.settle_ramp(4_000 * MS) && h.ramp().is_none());
    }

    #[test]
    fn a_flapping_endpoint_ramps_back_more_slowly_each_time() {
        let mut h = Health::default();
        let mut now = 0;
        let mut windows = vec![];
        for _ in 0..4 {
            h.record(ResponseClass::Failure, now, &T);
            h.record(ResponseClass::Failure, now + 1, &T);
            now += 300 * MS;
            assert_eq!(h.record(ResponseClass::Success, now, &T), HealthChange::Recovered);
            windows.push(h.ramp().unwrap().window_us / MS);
            now += 2_000 * MS;
        }
        assert_eq!(windows, [1_000, 2_000, 4_000, 8_000]);
        // Up for longer than the flap memory: the next suspension is a first one again.
        now += FLAP_MEMORY_US;
        h.record(ResponseClass::Failure, now, &T);
        h.record(ResponseClass::Failure, now + 1, &T);
        h.record(ResponseClass::Success, now + 300 * MS, &T);
        assert_eq!(h.ramp().unwrap().window_us, 1_000 * MS);
    }

    fn suspend_and_recover(h: &mut Health, now: u64) {
        h.record(ResponseClass::Failure, now, &T);
        h.record(ResponseClass::Failure, now + 1, &T);
        assert_eq!(h.record(ResponseClass::Success, now + 300 * MS, &T), HealthChange::Recovered);
    }

    #[test]
    fn strong_evidence_ends_a_recovery_ramp_and_a_flapper_needs_twice_as_much() {
        let mut h = Health::default();
        suspend_and_recover(&mut h, 0);
        // The probe's answer and the next at normal latency: not yet; a slow one starts again.
        assert_eq!(h.note_answer_latency(true, 300 * MS, &T), HealthChange::None);
        assert_eq!(h.note_answer_latency(true, 310 * MS, &T), HealthChange::None);
        assert_eq!(h.note_answer_latency(false, 320 * MS, &T), HealthChange::None);
        assert_eq!(h.note_answer_latency(true, 330 * MS, &T), HealthChange::None);
        assert_eq!(h.note_answer_latency(true, 340 * MS, &T), HealthChange::None);
        assert!(h.weight_factor(340 * MS) < 0.5, "still ramping");
        assert_eq!(h.note_answer_latency(true, 350 * MS, &T), HealthChange::RampCut);
        assert_eq!((h.weight_factor(350 * MS), h.ramp()), (1.0, None), "full share at once");
        assert_eq!(h.note_answer_latency(true, 360 * MS, &T), HealthChange::None, "nothing left to cut");
        // Suspended again within the flap memory: six answers in a row, and a failure resets them.
        suspend_and_recover(&mut h, 1_000 * MS);
        let mut now = 1_300 * MS;
        for _ in 0..5 {
            assert_eq!(h.note_answer_latency(true, now, &T), HealthChange::None);
            now += MS;
        }
        h.record(ResponseClass::Failure, now, &T);
        let cut =
            (0..6).map(|i| h.note_answer_latency(true, now + i * MS, &T)).position(|c| c == HealthChange::RampCut);
        assert_eq!(cut, Some(5), "the sixth in a row after the failure");
    }

    #[test]
    fn with_no_evidence_answers_configured_a_recovery_ramp_runs_its_length() {
        let t = HealthTimes { recovery_evidence_answers: 0, ..T };
        let mut h = Health::default();
        suspend_and_recover(&mut h, 0);
        for i in 0..50 {
            assert_eq!(h.note_answer_latency(true, 300 * MS + i * MS, &t), HealthChange::None);
        }
        assert!(h.weight_factor(350 * MS) < 0.5, "still ramping");
    }

    #[test]
    fn a_slow_start_ramp_runs_its_window_whatever_the_answers() {
        let mut h = Health::default();
        h.start_ramp(0, 10_000 * MS);
        for i in 0..20 {
            assert_eq!(h.note_answer_latency(true, i * MS, &T), HealthChange::None);
        }
        assert!(h.weight_factor(20 * MS) < 0.2);
    }

    #[test]
    fn overload_backs_off_through_the_ratio_but_never_suspends() {
        let mut h = Health::default();
        for i in 0..10 {
            h.record(ResponseClass::Overload, i, &T);
        }
        assert!(h.pickable());
        assert!(h.failure_ratio(10, &T) > 0.9);
    }

    #[test]
    fn old_failures_fade_by_time_alone() {
        let mut h = Health::default();
        h.record(ResponseClass::Overload, 0, &T);
        let r0 = h.failure_ratio(0, &T);
        assert!((h.failure_ratio(2_000 * MS, &T) - r0 * (-2.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn an_absent_endpoint_returns_when_it_serves_again() {
        let mut h = Health::default();
        h.start_ramp(0, 10_000 * MS);
        h.mark_absent();
        assert!(!h.pickable() && h.ramp().is_none());
        assert_eq!(h.probe_due_us(), None, "absent endpoints are not probed: they are not in the cluster");
        assert_eq!(h.record(ResponseClass::Failure, 5, &T), HealthChange::None);
        assert!(!h.pickable());
        assert_eq!(h.record(ResponseClass::Success, 10, &T), HealthChange::Returned);
        assert!(h.pickable());
    }
}
