//! The workers of one proxy in the shared state: each claims a slot, publishes its snapshot and
//! beats; an idle worker leaves; a reconfiguration's new workers take over the slots of the gone
//! ones instead of growing the state.

mod support;

use support::*;
use tailweight_sidecar::test_host::{TestProxy, TestWorker, OVERRIDE_HEADER};
use tailweight_sidecar::SlotHold;

const A: &str = "10.0.0.1:8080";
const B: &str = "10.0.0.2:8080";
/// A short endpoint ttl (1 s), so a gone worker's slot is free a second after its last beat.
const SHORT_TTL: &str = r#""endpoint_ttl_ms": 1000, "stale_after_ms": 500, "sync_interval_ms": 100"#;

/// Two workers of one configuration serving and ticking for `ms` milliseconds, alternating.
fn serve_both(proxy: &TestProxy, workers: &mut [TestWorker; 2], backends: &mut Backends, ms: u64) {
    for i in 0..ms / 10 {
        let w = &mut workers[(i % 2) as usize];
        backends.request(proxy, w);
        if i % 10 < 2 {
            w.tick(proxy);
        }
        proxy.advance_us(5 * MS);
    }
}

fn slots_claimed(proxy: &TestProxy) -> u64 {
    String::from_utf8(proxy.shared_value("tailweight.vm_seq").unwrap()).unwrap().parse().unwrap()
}

#[test]
fn twenty_reconfigurations_add_no_slot_once_the_old_workers_are_gone() {
    let proxy = TestProxy::new(START_US, 4);
    let mut backends = Backends::new(&[A, B]);
    let config = client_config(SHORT_TTL);
    let mut most = 0;
    for generation in 0..21 {
        // Envoy makes new workers for each configuration and stops the old ones.
        let mut workers = [TestWorker::configured(&proxy, 0, &config), TestWorker::configured(&proxy, 1, &config)];
        serve_both(&proxy, &mut workers, &mut backends, 2_000);
        for w in &workers {
            assert!(matches!(w.plugin_slot(), Some(SlotHold::Held(_))), "generation {generation} holds a slot");
        }
        most = most.max(slots_claimed(&proxy));
    }
    // Each generation's workers take over the slots of the one before last (gone: silent for more
    // than the ttl); without the takeover 21 generations of two would have claimed 42.
    assert!(most <= 4, "slots claimed at most {most}");
    assert_eq!(proxy.metric("tailweight.vm_slots"), slots_claimed(&proxy) as i64, "the gauge says so");
}

#[test]
fn a_worker_without_requests_leaves_its_slot_and_claims_one_again_when_busy() {
    let proxy = TestProxy::new(START_US, 5);
    let mut backends = Backends::new(&[A, B]);
    let mut worker = TestWorker::configured(&proxy, 0, &client_config(SHORT_TTL));
    // Its first tick publishes its (empty) snapshot; from its second on it is idle and leaves.
    worker.tick(&proxy);
    assert_eq!(worker.plugin_slot(), Some(SlotHold::Held(0)));
    proxy.advance_us(200 * MS);
    worker.tick(&proxy);
    assert_eq!(worker.plugin_slot(), Some(SlotHold::Unclaimed), "a worker that never served leaves");
    backends.run(&proxy, &mut worker, 50, MS);
    worker.tick(&proxy);
    assert_eq!(worker.plugin_slot(), Some(SlotHold::Held(0)));
    // Quiet for longer than the ttl: its endpoints are forgotten, its snapshot empties; idle, it
    // beats at 0 (gone at once) and gives the slot up.
    for _ in 0..30 {
        proxy.advance_us(100 * MS);
        worker.tick(&proxy);
    }
    assert_eq!(worker.plugin_slot(), Some(SlotHold::Unclaimed));
    let beat = proxy.shared_value("tailweight.beat.0").unwrap();
    assert_eq!(u64::from_le_bytes(beat[8..16].try_into().unwrap()), 0, "its last beat is at 0");
    backends.run(&proxy, &mut worker, 5, MS);
    worker.tick(&proxy);
    assert_eq!(worker.plugin_slot(), Some(SlotHold::Held(0)), "its own old slot, taken over");
    assert_eq!(slots_claimed(&proxy), 1);
}

#[test]
fn a_worker_whose_shared_state_refuses_writes_runs_alone() {
    let proxy = TestProxy::new(START_US, 6);
    proxy.refuse_shared_writes.set(true);
    let mut backends = Backends::new(&[A, B]);
    let mut worker = TestWorker::configured(&proxy, 0, &client_config(SHORT_TTL));
    let counts = backends.run(&proxy, &mut worker, 200, MS);
    assert_eq!(worker.plugin_slot(), Some(SlotHold::NoRoom));
    assert!(proxy.metric("tailweight.picks") > 150, "it still steers: {counts:?}");
}

#[test]
fn siblings_see_each_others_requests_in_flight() {
    let proxy = TestProxy::new(START_US, 7);
    let mut backends = Backends::new(&[A, B]);
    let config = client_config(r#""per_endpoint_metrics": true"#);
    let mut workers = [TestWorker::configured(&proxy, 0, &config), TestWorker::configured(&proxy, 1, &config)];
    serve_both(&proxy, &mut workers, &mut backends, 400);
    // Worker 0 opens three requests to whatever it picks and leaves them open.
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut exchange = tailweight_sidecar::test_host::TestExchange::to_cluster(CLUSTER);
        let stream = workers[0].start(&proxy, &mut exchange);
        open.push((stream, exchange));
    }
    workers[0].tick(&proxy);
    proxy.set_metrics("tailweight.endpoint.", -1);
    workers[1].tick(&proxy);
    let inflight: i64 = proxy
        .metrics_named("tailweight.endpoint.")
        .iter()
        .filter(|(n, _)| n.ends_with(".inflight"))
        .map(|(_, v)| *v)
        .sum();
    let steered = open.iter().filter(|(_, e)| e.request_header(OVERRIDE_HEADER).is_some()).count();
    assert!(steered >= 2, "{steered} of 3 steered (an exploration is not counted in flight)");
    assert_eq!(inflight, steered as i64, "worker 1's gauges count worker 0's open requests");
}
