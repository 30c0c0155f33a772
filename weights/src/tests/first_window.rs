//! With `rate_new_counters`, a reporter's first report of an endpoint whose counters are new
//! (`counted_ms` within two intervals) counts its requests at once (`observation::new_counters_us`);
//! older or unsaid counters, and every first report without it, start a window at the report.

use super::*;

fn rating_new_counters() -> World {
    World::new(WeightParams { rate_new_counters: true, ..WeightParams::default() })
}

/// `w`'s next second: each of `reporters` (name, requests of A this second, how long its counters
/// have counted) reports, then a recompute.
fn step_counted(w: &mut World, reporters: &[(&str, u64, Option<u64>)]) {
    w.now += SEC;
    for (reporter, requests, counted_ms) in reporters {
        let mut report = w.report(reporter, &[(A, ok(*requests, 10_000))]);
        report.clusters[0].endpoints[0].counted_ms = *counted_ms;
        w.book.ingest_as(&report, principal_and_name(reporter).0, w.now).unwrap();
    }
    w.book.recompute(w.now);
}

#[test]
fn a_first_report_of_new_counters_gives_the_rate_at_once() {
    let mut w = rating_new_counters();
    step_counted(&mut w, &[("r0", 50, Some(900)), ("r1", 80, Some(1_600))]);
    assert_eq!(w.decision(A).qps, 50.0 + 50.0, "50 over one interval, 80 over 1.6 s");
    step_counted(&mut w, &[("r0", 50, Some(1_900)), ("r1", 50, Some(2_600))]);
    assert_eq!(w.decision(A).qps, 100.0, "then windows as always");
}

#[test]
fn a_first_report_of_old_or_unsaid_counters_starts_a_window_at_the_report() {
    for counted in [None, Some(2_500), Some(86_400_000)] {
        let mut w = rating_new_counters();
        step_counted(&mut w, &[("r0", 50, counted)]);
        assert_eq!(w.decision(A).qps, 0.0, "{counted:?}");
        step_counted(&mut w, &[("r0", 50, counted.map(|c| c + 1_000))]);
        assert_eq!(w.decision(A).qps, 50.0, "{counted:?}");
    }
}

#[test]
fn a_restarted_reporters_new_counters_replace_its_old_window_at_once() {
    let mut w = rating_new_counters();
    for s in 1..=5 {
        step_counted(&mut w, &[("r0#1", 50, Some(s * 1_000))]);
    }
    assert_eq!(w.decision(A).qps, 50.0);
    // Restarted: its new counters are rated at once, and its old self's window, of the same
    // traffic, stops counting (not 100).
    step_counted(&mut w, &[("r0#2", 60, Some(1_000))]);
    assert_eq!(w.decision(A).qps, 60.0);
    step_counted(&mut w, &[("r0#2", 60, Some(2_000))]);
    assert_eq!(w.decision(A).qps, 60.0);
}

#[test]
fn by_default_new_counters_start_a_window_at_the_report_too() {
    let mut w = World::new(WeightParams::default());
    step_counted(&mut w, &[("r0", 50, Some(900))]);
    assert_eq!(w.decision(A).qps, 0.0);
    step_counted(&mut w, &[("r0", 50, Some(1_900))]);
    assert_eq!(w.decision(A).qps, 50.0);
}
