//! A failing endpoint as one worker sees it, deterministically: suspended after two failures in a
//! row, probed with one user's request at each due time (the wait doubling), readmitted by a good
//! probe, then ramped back.

mod support;

use support::*;
use tailweight_sidecar::test_host::{TestProxy, TestWorker};

const A: &str = "10.0.0.1:8080";
const B: &str = "10.0.0.2:8080";

/// A worker that keeps a failing favourite its favourite until it is suspended (no score penalty for
/// failures, no exploration), with both endpoints learned and explored enough that it all but stops
/// exploring (the chance is half its recent discovery rate, 1 at the start).
fn worker_knowing_both(proxy: &TestProxy, extra: &str) -> (TestWorker, Backends) {
    let sep = if extra.is_empty() { "" } else { ", " };
    let config =
        client_config(&format!(r#""error_penalty": 0, "failure_latency_ms": 0, "explore_ratio": 0{sep}{extra}"#));
    let mut worker = TestWorker::configured(proxy, 0, &config);
    let mut backends = Backends::new(&[A, B]);
    backends.run(proxy, &mut worker, 2_000, MS);
    (worker, backends)
}

/// A fails until it is suspended, then answers again until a probe readmits it.
fn suspend_then_readmit(proxy: &TestProxy, worker: &mut TestWorker, backends: &mut Backends) {
    for (failing, metric) in [(true, "tailweight.suspensions"), (false, "tailweight.recoveries")] {
        backends.fail(A, failing);
        while proxy.metric(metric) == 0 {
            backends.request(proxy, worker);
            proxy.advance_us(MS);
        }
    }
}

#[test]
fn two_failures_in_a_row_suspend_and_only_probes_reach_the_endpoint_until_one_passes() {
    let proxy = TestProxy::new(START_US, 1);
    let (mut worker, mut backends) = worker_knowing_both(&proxy, r#""recovery_evidence_answers": 0"#);
    assert_eq!(proxy.metric("tailweight.suspensions"), 0);
    backends.fail(A, true);
    // Until A's second failure in a row it takes its picks; then it is suspended.
    let mut failures = 0;
    while proxy.metric("tailweight.suspensions") == 0 {
        if backends.request(&proxy, &mut worker) == A {
            failures += 1;
        }
        assert!(failures <= 2, "suspended at its second failure in a row");
        proxy.advance_us(MS);
    }
    assert_eq!(failures, 2);
    // Suspended: 1 s of requests (5 ms each, one at a time). The worker steers to A only its probes,
    // 250 ms after the suspension, then at doubling waits (500 ms, 1 s): two in this second, both
    // failing. (Explorations leave requests to Envoy's round robin, which may pick A too.)
    backends.steered.clear();
    let explorations = proxy.metric("tailweight.explorations");
    backends.run(&proxy, &mut worker, 200, 0);
    assert_eq!(proxy.metric("tailweight.explorations"), explorations, "none in this second");
    assert_eq!(backends.steered_to(A), 2, "only the probes at 250 and 750 ms");
    assert_eq!(proxy.metric("tailweight.suspensions"), 1, "a failed probe keeps the suspension");
    assert_eq!(proxy.metric("tailweight.recoveries"), 0);
    // A answers again: the next probe (1 s after the last) passes and ends the suspension.
    let failures = proxy.metric("tailweight.failures");
    backends.fail(A, false);
    backends.steered.clear();
    backends.run(&proxy, &mut worker, 400, 0);
    assert_eq!(proxy.metric("tailweight.recoveries"), 1);
    assert!(backends.steered_to(A) > 1, "readmitted");
    assert_eq!(proxy.metric("tailweight.failures"), failures, "no failure since");
    assert!(failures >= 4, "two to suspend, two failed probes, and what exploration sent A: {failures}");
}

#[test]
fn a_readmitted_endpoint_ramps_back_over_the_recovery_ramp() {
    let proxy = TestProxy::new(START_US, 2);
    let (mut worker, mut backends) =
        worker_knowing_both(&proxy, r#""recovery_evidence_answers": 0, "recovery_ramp_ms": 2000"#);
    suspend_then_readmit(&proxy, &mut worker, &mut backends);
    // Over its 2 s ramp A's share grows from a floor toward its full half (with two endpoints the
    // two-choice comparison, not the draw, decides most picks: the ramp shows in the draws where
    // A is drawn twice, so the rise is modest).
    let shares: Vec<f64> = (0..4)
        .map(|_| {
            let counts = backends.run(&proxy, &mut worker, 100, 0);
            count_of(&counts, A) as f64 / 100.0
        })
        .collect();
    let counts = backends.run(&proxy, &mut worker, 400, 4 * MS);
    let settled = count_of(&counts, A) as f64 / 400.0;
    assert!((0.4..=0.6).contains(&settled), "after the ramp, about half: {settled}");
    assert!(shares[0] < settled - 0.1, "the first 0.5 s of the ramp: {shares:?} against {settled}");
    assert!(shares.windows(2).all(|w| w[1] >= w[0] - 0.05), "the share grows: {shares:?}");
}

#[test]
fn good_answers_at_normal_latency_end_a_first_ramp_early() {
    let proxy = TestProxy::new(START_US, 3);
    let (mut worker, mut backends) = worker_knowing_both(&proxy, r#""recovery_ramp_ms": 10000"#);
    suspend_then_readmit(&proxy, &mut worker, &mut backends);
    // A 10 s ramp, but three good answers in a row end it: within 2 s A has its half again.
    backends.run(&proxy, &mut worker, 500, 2 * MS);
    let counts = backends.run(&proxy, &mut worker, 400, 2 * MS);
    let share = count_of(&counts, A) as f64 / 400.0;
    assert!((0.3..=0.7).contains(&share), "ramp ended early: {share}");
}
