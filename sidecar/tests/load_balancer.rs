//! A cluster whose own load balancer picks from the workers' balancers (the native shell's
//! load-balancing policy): its requests are not steered, and what they teach is there to pick from.

mod support;

use support::{client_config, count_of, Backends, CLUSTER, MS, START_US};
use tailweight_sidecar::test_host::{TestProxy, TestWorker};

#[test]
fn requests_are_learned_from_and_not_steered() {
    let proxy = TestProxy::new(START_US, 5);
    proxy.load_balancer_picks.set(true);
    let mut worker = TestWorker::configured(&proxy, 0, &client_config(""));
    let mut backends = Backends::new(&["10.1.0.1:8080", "10.1.0.2:8080"]);
    backends.latency_us.push(("10.1.0.2:8080".into(), 40 * MS));
    let served = backends.run(&proxy, &mut worker, 40, MS);
    assert_eq!(backends.steered.len(), 0, "no request steered");
    assert_eq!(count_of(&served, "10.1.0.1:8080"), 20, "the fallback's round robin served every request");
    let balancer = worker.plugin.balancer().expect("a client worker");
    let now = proxy.now_us();
    let fast = balancer.learned_endpoint(CLUSTER, "10.1.0.1:8080", now).expect("learned");
    let slow = balancer.learned_endpoint(CLUSTER, "10.1.0.2:8080", now).expect("learned");
    assert!(slow.cost_us > 4.0 * fast.cost_us, "{slow:?} against {fast:?}");
}

#[test]
fn without_it_the_same_requests_are_steered() {
    let proxy = TestProxy::new(START_US, 5);
    let mut worker = TestWorker::configured(&proxy, 0, &client_config(""));
    let mut backends = Backends::new(&["10.1.0.1:8080", "10.1.0.2:8080"]);
    backends.run(&proxy, &mut worker, 40, MS);
    assert!(!backends.steered.is_empty());
}
