//! Out-of-band health checks of a suspended endpoint, deterministically: sent at its due times,
//! held to the fleet rate when a fresh view says how many callers share the work, answered in any
//! order.

mod support;

use support::*;
use tailweight_sidecar::test_host::{TestAnswer, TestProxy, TestWorker};
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::reply::{ClusterView, EndpointView, Reply};

const A: &str = "10.0.3.1:8080";
const B: &str = "10.0.3.2:8080";
const CHECKS: &str =
    r#""health_check_path": "/healthz", "error_penalty": 0, "failure_latency_ms": 0, "explore_ratio": 0"#;

/// A worker with checks on, A suspended (failing). It has explored enough to all but stop (the
/// chance is half its recent discovery rate, 1 at the start): an exploration is left to Envoy's
/// round robin, and a good answer from A that way would end its suspension too.
fn suspended(proxy: &TestProxy, extra: &str) -> (TestWorker, Backends) {
    let config = client_config(&format!("{CHECKS}, {extra}"));
    let mut worker = TestWorker::configured(proxy, 0, &config);
    let mut backends = Backends::new(&[A, B]);
    backends.run(proxy, &mut worker, 2_000, MS);
    backends.fail(A, true);
    while proxy.metric("tailweight.suspensions") == 0 {
        backends.request(proxy, &mut worker);
        proxy.advance_us(MS);
    }
    (worker, backends)
}

/// `seconds` of requests 5 ms apart; every check made is answered with `status` at once.
/// Returns the checks sent.
fn run_checking(
    proxy: &TestProxy,
    worker: &mut TestWorker,
    backends: &mut Backends,
    seconds: u64,
    status: u16,
) -> usize {
    let mut checks = 0;
    for _ in 0..seconds * 4 {
        backends.run(proxy, worker, 50, 5 * MS);
        for call in proxy.take_calls() {
            if call.header(":path") == Some("/healthz") {
                assert_eq!(call.header("x-gateway-destination-endpoint"), Some(A), "a check names its endpoint");
                assert_eq!(call.cluster, CLUSTER);
                checks += 1;
                worker.answer(proxy, call.token, &TestAnswer::status(status, b""));
            }
        }
    }
    checks
}

#[test]
fn a_suspended_endpoint_gets_checks_not_users_requests_and_a_pass_readmits_it() {
    let proxy = TestProxy::new(START_US, 21);
    let (mut worker, mut backends) = suspended(&proxy, r#""recovery_evidence_answers": 0"#);
    backends.steered.clear();
    let checks = run_checking(&proxy, &mut worker, &mut backends, 3, 503);
    // Waits of 250 ms doubling to 1 s: about 4 checks in 3 s, every one failing.
    assert!((3..=5).contains(&checks), "{checks} checks");
    assert_eq!(proxy.metric("tailweight.health_checks_failed"), checks as i64);
    assert_eq!(backends.steered_to(A), 0, "no user request was steered to it");
    backends.fail(A, false);
    run_checking(&proxy, &mut worker, &mut backends, 2, 200);
    assert_eq!(proxy.metric("tailweight.recoveries"), 1);
}

/// A view in which a thousand callers report the cluster, and A last served some caller's users
/// `a_served_age_ms` ago (B just now).
fn fleet_view(a_served_age_ms: u64) -> Vec<u8> {
    write_reply(&Reply {
        version: tailweight_wire::protocol::VERSION,
        ttl_ms: 60_000,
        clusters: vec![ClusterView {
            name: CLUSTER.into(),
            reporters: Some(1_000),
            endpoints: [A, B]
                .iter()
                .map(|a| EndpointView {
                    address: a.to_string(),
                    weight: 1.0,
                    served_age_ms: Some(if *a == A { a_served_age_ms } else { 0 }),
                    ..EndpointView::default()
                })
                .collect(),
        }],
    })
}

/// `rounds` of 50 requests 5 ms apart, each report answered with `view`, each check with `check`.
/// Returns the checks sent.
fn run_with_view(
    proxy: &TestProxy,
    worker: &mut TestWorker,
    backends: &mut Backends,
    rounds: usize,
    view: &[u8],
    check: u16,
) -> usize {
    let mut checks = 0;
    for _ in 0..rounds {
        backends.run(proxy, worker, 50, 5 * MS);
        for call in proxy.take_calls() {
            match call.header(":path") {
                Some("/v1/report") => worker.answer(proxy, call.token, &TestAnswer::status(200, view)),
                Some("/healthz") => {
                    checks += 1;
                    worker.answer(proxy, call.token, &TestAnswer::status(check, b""));
                }
                other => panic!("unexpected call {other:?}"),
            }
        }
    }
    checks
}

#[test]
fn with_a_view_of_a_thousand_callers_the_checks_are_left_to_the_others() {
    let proxy = TestProxy::new(START_US, 22);
    let (mut worker, mut backends) = suspended(&proxy, &format!("{AGGREGATOR}, \"health_check_fleet_rate\": 20"));
    // Nobody's users were served by A lately.
    let checks = run_with_view(&proxy, &mut worker, &mut backends, 40, &fleet_view(600_000), 503);
    // 20 s of due checks, each sent with the chance 20 x 0.25 / 1000 = 0.005 (alone, every due
    // check goes out: the test above).
    let left = proxy.metric("tailweight.health_checks_left_to_others");
    assert!(left >= 10, "{left} left to others");
    assert!(checks <= 1, "{checks} checks sent");
    assert_eq!(proxy.metric("tailweight.health_checks_sent"), checks as i64);
}

#[test]
fn another_callers_evidence_readmits_a_suspended_endpoint_without_a_check() {
    let proxy = TestProxy::new(START_US, 23);
    let (mut worker, mut backends) = suspended(&proxy, &format!("{AGGREGATOR}, \"health_check_fleet_rate\": 20"));
    run_with_view(&proxy, &mut worker, &mut backends, 10, &fleet_view(600_000), 503);
    assert_eq!(proxy.metric("tailweight.readmissions_on_evidence"), 0, "nobody was answered well");
    // A answers again, and the view says another caller's users were just served well by it.
    backends.fail(A, false);
    let (checks, explorations) =
        (proxy.metric("tailweight.health_checks_sent"), proxy.metric("tailweight.explorations"));
    run_with_view(&proxy, &mut worker, &mut backends, 4, &fleet_view(0), 200);
    assert_eq!(proxy.metric("tailweight.explorations"), explorations, "none came between");
    assert_eq!(proxy.metric("tailweight.readmissions_on_evidence"), 1, "readmitted on the others' evidence");
    assert_eq!(proxy.metric("tailweight.recoveries"), 1);
    assert!(proxy.metric("tailweight.health_checks_sent") <= checks + 1, "without a check of its own");
    backends.steered.clear();
    run_with_view(&proxy, &mut worker, &mut backends, 12, &fleet_view(0), 200);
    let share = backends.steered_to(A) as f64 / backends.steered.len() as f64;
    assert!(share > 0.15, "its share after the readmission: {share}");
}
