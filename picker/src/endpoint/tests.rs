use super::*;
use crate::health::Availability;

const OK: ResponseClass = ResponseClass::Success;
const FAIL: ResponseClass = ResponseClass::Failure;

fn params() -> PickParams {
    PickParams { failure_latency_us: 100_000.0, stale_after_us: 1_000_000, ..PickParams::default() }
}

#[test]
fn success_updates_counters_latency_and_last_success() {
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 2_000, None, 10, &params());
    e.record(OK, 4_000, None, 20, &params());
    assert_eq!((e.local.requests, e.local.errors, e.local.latency_sum_us), (2, 0, 6_000));
    assert_eq!(e.local.latency.unwrap().value_us(), 4_000.0, "peak rises at once");
    assert_eq!((e.last_success_us, e.last_response_us), (20, 20));
}

#[test]
fn a_failure_is_counted_but_stays_out_of_the_latency_estimate_and_keeps_nothing_alive() {
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 2_000, None, 5, &params());
    e.record(FAIL, 50, None, 10, &params());
    assert_eq!((e.local.requests, e.local.errors, e.local.latency_sum_us), (2, 1, 2_000));
    assert_eq!(e.local.latency.unwrap().value_us(), 2_000.0);
    assert!(e.health.failure_ratio(10, &params().health_times()) > 0.0);
    assert_eq!(e.last_success_us, 5, "a failure does not keep an endpoint alive");
    assert_eq!(e.last_response_us, 10, "but it is reported");
}

#[test]
fn score_is_inflight_plus_one_times_latency() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 1_000, None, 0, &p);
    for _ in 0..3 {
        e.local.inflight.add(0);
    }
    assert_eq!(e.score(0, &p, 5_000.0), 4.0 * 1_000.0);
    e.siblings.inflight = 2;
    assert_eq!(e.score(0, &p, 5_000.0), 6.0 * 1_000.0);
}

#[test]
fn the_aggregators_counts_and_latency_never_enter_the_score() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 1_000, None, 0, &p);
    let own = e.score(0, &p, 5_000.0);
    e.global = Some(GlobalStats { weight: 3.0, inflight: 9.0, latency_us: 70_000.0, ejected: false, served_us: None });
    assert_eq!(e.score(0, &p, 5_000.0), own);
    assert_eq!(own, 1_000.0);
}

#[test]
fn stale_local_latency_yields_to_the_prior() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 1_000, None, 0, &p);
    e.global = Some(GlobalStats { weight: 1.0, inflight: 0.0, latency_us: 7_000.0, ejected: false, served_us: None });
    let later = p.stale_after_us + 1;
    assert_eq!(e.expected_latency_us(later, &p, 5_000.0), 5_000.0);
    assert_eq!(e.expected_latency_us(0, &p, 5_000.0), 1_000.0, "fresh local wins");
    assert_eq!(e.faded_latency_us(later - 2, &p, 5_000.0), 1_000.0, "below the prior: it stands");
    assert_eq!(e.faded_latency_us(later, &p, 5_000.0), 5_000.0);
    assert_eq!(e.expected_latency_us(later - 2, &p, 500.0), 1_000.0, "the score's does not fade");
    let almost_stale = e.faded_latency_us(later - 2, &p, 500.0);
    let w = (-EVIDENCE_FADES).exp();
    assert!((almost_stale - (500.0 + 500.0 * w)).abs() < 0.1, "above it: faded toward it: {almost_stale}");
}

#[test]
fn an_estimate_fades_toward_the_prior_with_the_age_of_its_evidence() {
    let p = params();
    let tau = (p.stale_after_us as f64 / EVIDENCE_FADES) as u64;
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 41_000, None, 0, &p);
    let prior = 1_000.0;
    let at = |age: u64| e.faded_latency_us(age, &p, prior);
    assert_eq!(at(0), 41_000.0);
    assert!((at(tau) - (prior + 40_000.0 / std::f64::consts::E)).abs() < 1e-6, "{}", at(tau));
    assert!(at(2 * tau) < at(tau) && at(tau) < at(tau / 2), "it falls monotonically");
    // An estimate below the prior stands until stale (evidence of speed does not fade).
    assert_eq!(e.faded_latency_us(tau, &p, 81_000.0), 41_000.0);
}

#[test]
fn a_sample_after_a_gap_corrects_the_faded_estimate_not_the_old_one() {
    let p = PickParams { latency_decay_us: 2_000_000.0, stale_after_us: 5_000_000, ..params() };
    let prior = 10_000.0;
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 40_000, None, 0, &p);
    let gap = 3_000_000;
    let faded = e.faded_latency_us(gap, &p, prior);
    e.fade_latency(gap, &p, prior);
    assert_eq!(e.local.latency.unwrap().value_us(), faded, "the fade alone changes nothing expected");
    e.record(OK, 10_000, None, gap, &p);
    let w = (-1.5f64).exp();
    let expected = faded * w + 10_000.0 * (1.0 - w);
    assert!((e.faded_latency_us(gap, &p, prior) - expected).abs() < 1e-6);
    assert!(expected < 11_500.0, "within 15% of the typical latency, not 40_000 x 0.22 + 10_000 x 0.78 = 16_600");
    let mut stale = Endpoint::new("10.0.0.1:80", 0);
    stale.record(OK, 40_000, None, 0, &p);
    stale.fade_latency(p.stale_after_us, &p, prior);
    assert_eq!(stale.local.latency.unwrap().value_us(), prior, "stale evidence: the prior");
}

#[test]
fn fresher_sibling_estimate_wins() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 1_000, None, 0, &p);
    e.siblings.latency = Some((3_000.0, 500));
    assert_eq!(e.expected_latency_us(600, &p, 0.0), 3_000.0);
    assert_eq!(e.fresh_latency_us(600, &p), Some(3_000.0));
    let tau = p.stale_after_us as f64 / EVIDENCE_FADES;
    let faded = 3_000.0 * (-100.0 / tau).exp();
    assert!((e.faded_latency_us(600, &p, 0.0) - faded).abs() < 1e-6, "the sibling's sample's age fades it");
}

#[test]
fn failures_add_their_cost_and_fade_when_idle() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 1_000, None, 0, &p);
    let healthy = e.score(0, &p, 0.0);
    let mut bad = e.clone();
    bad.record(ResponseClass::Overload, 10, None, 0, &p);
    let f = bad.health.failure_ratio(0, &p.health_times());
    assert!((f - crate::health::FAILURE_MIN_STEP).abs() < 1e-12);
    assert_eq!(bad.score(0, &p, 0.0), (1_000.0 + p.failure_latency_us * f) * (1.0 + p.error_penalty * f));
    assert!(bad.score(0, &p, 0.0) > 10.0 * healthy, "a fast failure is expensive");
    // Ten failure time constants later the cost is all but gone.
    let later = 10 * p.failure_decay_us as u64;
    assert!(bad.score(later, &p, 1_000.0) < 1.01 * 1_000.0);
}

#[test]
fn orca_cpu_is_kept_with_its_time() {
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    let load = OrcaLoad { cpu_utilization: Some(0.7), ..Default::default() };
    e.record(OK, 1_000, Some(load), 42, &params());
    assert_eq!(e.local.cpu, Some((0.7, 42)));
}

#[test]
fn answers_within_the_normal_latency_factor_end_a_recovery_ramp() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 10_000, None, 0, &p);
    e.record(FAIL, 0, None, 1, &p);
    assert_eq!(e.record(FAIL, 0, None, 2, &p), HealthChange::Suspended);
    assert_eq!(e.record(OK, 10_000, None, 300_000, &p), HealthChange::Recovered);
    // Twice the estimate is not normal: the count starts again.
    assert_eq!(e.record(OK, 20_000, None, 301_000, &p), HealthChange::None);
    assert_eq!(e.record(OK, 12_000, None, 302_000, &p), HealthChange::None);
    assert_eq!(e.record(OK, 9_000, None, 303_000, &p), HealthChange::None);
    assert_eq!(e.record(OK, 11_000, None, 304_000, &p), HealthChange::RampCut);
    assert_eq!(e.sampling_weight(false, 1.0, 304_000), 1.0);
}

#[test]
fn sampling_weight_is_the_fresh_view_times_health() {
    let p = params();
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    assert_eq!(e.sampling_weight(true, 1.0, 0), 1.0);
    e.global = Some(GlobalStats { weight: 2.0, inflight: 0.0, latency_us: 0.0, ejected: false, served_us: None });
    assert_eq!(e.sampling_weight(true, 1.0, 0), 2.0);
    assert_eq!(e.sampling_weight(false, 1.0, 0), 1.0);
    e.global.as_mut().unwrap().ejected = true;
    assert_eq!(e.sampling_weight(true, 1.0, 0), 2.0, "its last answer here was good: trusted over the view");
    e.global.as_mut().unwrap().weight = 0.01;
    assert_eq!(e.sampling_weight(true, 1.4, 0), 1.4, "drawn as an average live endpoint, not the floor");
    e.global.as_mut().unwrap().weight = 2.0;
    e.record(FAIL, 0, None, 1, &p);
    assert_eq!(e.sampling_weight(true, 1.0, 1), 0.0, "ejected, and it failed here last");
    e.global.as_mut().unwrap().weight = 0.0;
    e.global.as_mut().unwrap().ejected = false;
    assert_eq!(e.sampling_weight(true, 1.0, 1), 1e-3);
    // Suspended after a run of failures: not drawn at all.
    e.record(FAIL, 0, None, 2, &p);
    assert!(matches!(e.health.availability(), Availability::Suspended { .. }));
    assert_eq!(e.sampling_weight(false, 1.0, 2), 0.0);
}

#[test]
fn own_evidence_faster_than_the_view_draws_as_an_average_endpoint_for_stale_after() {
    let p = params();
    let prior = 10_000.0;
    let mut e = Endpoint::new("10.0.0.1:80", 0);
    e.record(OK, 40_000, None, 0, &p);
    e.global = Some(GlobalStats { weight: 0.3, inflight: 0.0, latency_us: 42_000.0, ejected: false, served_us: None });
    assert!(!e.refresh_outpaced_view(0, &p, prior, 1.2), "slow here as in the view");
    assert_eq!(e.sampling_weight(true, 1.2, 0), 0.3);
    // Fast again: one answer after a while takes its estimate below half the view's latency.
    e.fade_latency(900_000, &p, prior);
    e.record(OK, 10_000, None, 900_000, &p);
    assert!(e.local.latency.unwrap().value_us() * VIEW_OUTPACED_FACTOR < 42_000.0);
    assert!(!e.refresh_outpaced_view(900_000, &p, prior, 0.6), "weight 0.3 is half an average one's: a class");
    assert!(e.refresh_outpaced_view(900_000, &p, prior, 1.2));
    assert_eq!(e.sampling_weight(true, 1.2, 900_000), 1.2, "an average live endpoint's");
    assert_eq!(e.sampling_weight(false, 1.2, 900_000), 1.0, "no fresh view: 1 as always");
    // The view catches up with its latency before its weight: own evidence still rules...
    e.global.as_mut().unwrap().latency_us = 12_000.0;
    e.record(OK, 10_000, None, 1_500_000, &p);
    assert!(!e.refresh_outpaced_view(1_500_000, &p, prior, 1.2));
    assert_eq!(e.sampling_weight(true, 1.2, 1_500_000), 1.2);
    // ...for `stale_after` after the last tick it outpaced the view, or until it is slow here.
    e.record(OK, 10_000, None, 1_899_000, &p);
    assert!(e.refresh_outpaced_view(1_900_000, &p, prior, 1.2));
    assert_eq!(e.sampling_weight(true, 1.2, 1_900_000), 0.3);
    e.outpaced_view_us = Some(1_900_000);
    assert!(e.refresh_outpaced_view(1_950_000, &p, prior, 1.2) && e.outpaces_view);
    e.record(OK, 30_000, None, 1_960_000, &p);
    assert!(e.refresh_outpaced_view(1_960_000, &p, prior, 1.2), "30 ms is not normal against a 10 ms prior");
    assert_eq!(e.sampling_weight(true, 1.2, 1_960_000), 0.3);
}
