//! Reports and the aggregator's replies, deterministically: what a report lists after a rollout,
//! and what a worker does with a reply that is late, oversized, foreign, refused or lost.

mod support;

use support::*;
use tailweight_sidecar::host::LogLevel;
use tailweight_sidecar::test_host::{SentCall, TestAnswer, TestProxy, TestWorker};
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::reply::{ClusterView, EndpointView, Reply};

const OLD: [&str; 3] = ["10.0.1.1:8080", "10.0.1.2:8080", "10.0.1.3:8080"];
const NEW: [&str; 3] = ["10.0.2.1:8080", "10.0.2.2:8080", "10.0.2.3:8080"];
const SHORT_TTL: &str = r#""endpoint_ttl_ms": 2000, "stale_after_ms": 1000"#;

fn reporting_worker(proxy: &TestProxy, extra: &str) -> TestWorker {
    let sep = if extra.is_empty() { "" } else { ", " };
    TestWorker::configured(proxy, 0, &client_config(&format!("{AGGREGATOR}{sep}{extra}")))
}

/// A reply for `CLUSTER` whose view weighs `heavy` four times the others of `addresses`.
fn reply(addresses: &[&str], heavy: &str, reporters: u32) -> Vec<u8> {
    let endpoints = addresses
        .iter()
        .map(|a| EndpointView {
            address: a.to_string(),
            weight: if *a == heavy { 4.0 } else { 1.0 },
            latency_us: 5_000,
            ..EndpointView::default()
        })
        .collect();
    write_reply(&Reply {
        version: tailweight_wire::protocol::VERSION,
        ttl_ms: 5_000,
        clusters: vec![ClusterView { name: CLUSTER.into(), reporters: Some(reporters), endpoints }],
    })
}

/// Serve `n` requests 2 ms apart, answering every report call with `answer` as it is made.
fn serve_answering(
    proxy: &TestProxy,
    worker: &mut TestWorker,
    backends: &mut Backends,
    n: usize,
    answer: &TestAnswer,
) -> Vec<SentCall> {
    let mut calls = Vec::new();
    for _ in 0..n / 50 {
        backends.run(proxy, worker, 50, 2 * MS);
        for call in proxy.take_calls() {
            worker.answer(proxy, call.token, answer);
            calls.push(call);
        }
    }
    calls
}

#[test]
fn after_a_rollout_a_report_lists_every_live_endpoint_and_none_of_the_gone() {
    let proxy = TestProxy::new(START_US, 11);
    let mut worker = reporting_worker(&proxy, SHORT_TTL);
    let mut backends = Backends::new(&OLD);
    let empty = TestAnswer::status(200, br#"{"version": 1, "ttl_ms": 5000, "clusters": []}"#);
    let before = reports(&serve_answering(&proxy, &mut worker, &mut backends, 1_000, &empty));
    let listed = |r: &tailweight_wire::report::Report| {
        let mut a: Vec<String> = r.clusters[0].endpoints.iter().map(|e| e.address.clone()).collect();
        a.sort();
        a
    };
    assert_eq!(listed(before.last().expect("reports went out")), OLD);
    // The rollout: the old pods are gone from the cluster (a pick of one is refused), new ones serve.
    backends = Backends::new(&NEW);
    let after = reports(&serve_answering(&proxy, &mut worker, &mut backends, 2_000, &empty));
    assert_eq!(listed(after.last().unwrap()), NEW, "the ttl (2 s) after the rollout");
    assert!(proxy.metric("tailweight.picks_refused") > 0, "picks of gone pods were refused");
    assert!(after.iter().all(|r| r.clusters.len() == 1 && r.clusters[0].name == CLUSTER));
}

#[test]
fn a_view_steers_and_a_late_answer_never_replaces_a_newer_view() {
    let proxy = TestProxy::new(START_US, 12);
    let mut worker = reporting_worker(&proxy, r#""explore_ratio": 0"#);
    let mut backends = Backends::new(&OLD);
    backends.run(&proxy, &mut worker, 300, 2 * MS);
    let calls = proxy.take_calls();
    let first = calls.iter().find(|c| c.header(":path") == Some("/v1/report")).expect("a report").clone();
    // A second report goes out before the first is answered.
    proxy.advance_us(1_000 * MS);
    backends.run(&proxy, &mut worker, 300, 2 * MS);
    let second = proxy.take_calls().into_iter().find(|c| c.header(":path") == Some("/v1/report")).expect("another");
    worker.answer(&proxy, second.token, &TestAnswer::status(200, &reply(&OLD, OLD[0], 3)));
    // The first report's answer comes late, weighing another endpoint: it is read, not stored.
    worker.answer(&proxy, first.token, &TestAnswer::status(200, &reply(&OLD, OLD[2], 3)));
    assert_eq!(proxy.metric("tailweight.reports_ok"), 2);
    worker.tick(&proxy);
    assert_eq!(proxy.metric("tailweight.views_applied"), 1);
    let counts = backends.run(&proxy, &mut worker, 600, 2 * MS);
    let heavy = count_of(&counts, OLD[0]);
    assert!(heavy > count_of(&counts, OLD[2]) * 2, "the newer view's heavy endpoint leads: {counts:?}");
}

#[test]
fn an_oversized_foreign_refused_or_lost_answer_is_counted_and_changes_nothing() {
    let proxy = TestProxy::new(START_US, 13);
    let mut worker = reporting_worker(&proxy, "");
    let mut backends = Backends::new(&OLD);
    let mut foreign = reply(&OLD, OLD[0], 3);
    let at = foreign.windows(CLUSTER.len()).position(|w| w == CLUSTER.as_bytes()).unwrap();
    foreign[at..at + 8].copy_from_slice(b"inbound|");
    let oversized = TestAnswer::status(200, &vec![b' '; (4 << 20) + 1]);
    let refused = TestAnswer::status(429, b"reporter over its quota\nretry later");
    let answers = [oversized, TestAnswer::status(200, &foreign), refused, TestAnswer::failed()];
    for answer in &answers {
        backends.run(&proxy, &mut worker, 50, 2 * MS);
        proxy.advance_us(1_000 * MS);
        backends.run(&proxy, &mut worker, 10, 2 * MS);
        let call = proxy.take_calls().into_iter().find(|c| c.header(":path") == Some("/v1/report")).expect("a report");
        worker.answer(&proxy, call.token, answer);
    }
    assert_eq!(proxy.metric("tailweight.reports_failed"), 4);
    assert_eq!(proxy.metric("tailweight.reports_ok"), 0);
    assert!(proxy.shared_keys().iter().all(|k| !k.starts_with("tailweight.view.")), "no view stored");
    // One warning for the first failure; the next 99 are counted only.
    let warnings: Vec<String> =
        proxy.logs().into_iter().filter(|(l, _)| *l == LogLevel::Warn).map(|(_, m)| m).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("over the limit"), "{}", warnings[0]);
    // An answer to a token that is not a report's is not ours.
    worker.answer(&proxy, 9_999, &TestAnswer::status(200, &reply(&OLD, OLD[0], 3)));
    assert_eq!(proxy.metric("tailweight.reports_ok"), 0);
}

#[test]
fn a_report_names_its_cluster_to_the_shard_and_carries_the_reporter_id() {
    let proxy = TestProxy::new(START_US, 14);
    proxy.set_env("POD_NAME", "client-7");
    proxy.set_env("POD_NAMESPACE", "shop");
    let mut worker = reporting_worker(&proxy, "");
    let mut backends = Backends::new(&OLD);
    backends.run(&proxy, &mut worker, 300, 2 * MS);
    let calls = proxy.take_calls();
    let call = calls.iter().find(|c| c.header(":path") == Some("/v1/report")).expect("a report");
    assert_eq!(call.cluster, "aggregator");
    assert_eq!(call.header("x-tailweight-shard"), Some(CLUSTER));
    let report = &reports(&calls)[0];
    assert_eq!(report.reporter, "client-7.shop");
    // A report counts the requests finished by the tick that sent it.
    let counted: u64 = report.clusters[0].endpoints.iter().map(|e| e.requests).sum();
    assert!(counted > 0 && counted <= 300, "{counted}");
}
