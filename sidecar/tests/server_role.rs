//! The server role, deterministically: each response stamped with the endpoint's requests in flight
//! (its workers' counts combined), and what it served each source principal attested.

mod support;

use support::*;
use tailweight_sidecar::host::Attribute;
use tailweight_sidecar::test_host::{Served, TestAnswer, TestExchange, TestProxy, TestWorker};
use tailweight_wire::attest::read::parse_attestation;

const SERVER: &str = r#"{"role": "server"}"#;

fn inbound(principal: &str) -> TestExchange {
    let mut exchange = TestExchange::to_cluster("inbound|8080||");
    exchange.set_text(Attribute::PeerPrincipal, principal);
    exchange.set_text(Attribute::LocalAddress, "10.0.9.9:8080");
    exchange.set_number(Attribute::ListenerDirection, 1);
    exchange
}

#[test]
fn each_response_carries_the_requests_in_flight_of_every_worker() {
    let proxy = TestProxy::new(START_US, 31);
    let mut workers = [TestWorker::configured(&proxy, 0, SERVER), TestWorker::configured(&proxy, 1, SERVER)];
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut exchange = inbound("spiffe://cluster.local/ns/shop/sa/web");
        let stream = workers[1].start(&proxy, &mut exchange);
        open.push((stream, exchange));
    }
    for w in &mut workers {
        w.tick(&proxy);
    }
    workers[0].tick(&proxy);
    let mut exchange = inbound("spiffe://cluster.local/ns/shop/sa/web");
    exchange.response.push(("x-tailweight-load".into(), "1;rif=0".into()));
    let stream = workers[0].start(&proxy, &mut exchange);
    workers[0].finish(&proxy, stream, &mut exchange, Served { by: None, status: 200, latency_us: 0 });
    // Right after its own request left: worker 1's three (the application's own stamp replaced).
    assert_eq!(exchange.response_header("x-tailweight-load"), Some("1;rif=3"));
    assert_eq!(proxy.metric("tailweight.stamps_replaced"), 1);
    assert_eq!(proxy.metric("tailweight.stamps_written"), 1);
    assert!(proxy.logs().is_empty(), "an inbound listener is the server role's: {:?}", proxy.logs());
}

#[test]
fn what_the_endpoint_served_each_principal_is_attested_per_cluster() {
    let proxy = TestProxy::new(START_US, 32);
    let config = format!(r#"{{"role": "server", "attest_clusters": ["{CLUSTER}"], {AGGREGATOR}}}"#);
    let mut worker = TestWorker::configured(&proxy, 0, &config);
    for (principal, status) in [("spiffe://a", 200), ("spiffe://a", 503), ("spiffe://b", 200)] {
        let mut exchange = inbound(principal);
        let stream = worker.start(&proxy, &mut exchange);
        worker.finish(&proxy, stream, &mut exchange, Served { by: None, status, latency_us: 0 });
    }
    worker.tick(&proxy);
    let calls = proxy.take_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].header(":path"), Some("/v1/attest"));
    assert_eq!(calls[0].header("x-tailweight-shard"), Some(CLUSTER));
    let attestation = parse_attestation(&calls[0].body).expect("the aggregator reads it");
    assert_eq!(attestation.endpoint, "10.0.9.9:8080");
    let a = attestation.sources.iter().find(|s| s.principal == "spiffe://a").unwrap();
    assert_eq!((a.requests, a.errors), (2, 1));
    worker.answer(&proxy, calls[0].token, &TestAnswer::status(500, b""));
    assert_eq!(proxy.metric("tailweight.attestations_failed"), 1);
    // Not due again within the report interval.
    proxy.advance_us(500 * MS);
    worker.tick(&proxy);
    assert!(proxy.take_calls().is_empty());
}

#[test]
fn each_port_attests_under_its_own_address_only_what_it_served_and_callers_expire() {
    let proxy = TestProxy::new(START_US, 35);
    let config = format!(r#"{{"role": "server", "attest_clusters": ["{CLUSTER}"], {AGGREGATOR}}}"#);
    let mut worker = TestWorker::configured(&proxy, 0, &config);
    let serve = |worker: &mut TestWorker, principal: &str, local: &str| {
        let mut exchange = inbound(principal);
        exchange.set_text(Attribute::LocalAddress, local);
        let stream = worker.start(&proxy, &mut exchange);
        worker.finish(&proxy, stream, &mut exchange, Served { by: None, status: 200, latency_us: 0 });
    };
    serve(&mut worker, "spiffe://a", "10.0.9.9:8080");
    serve(&mut worker, "spiffe://b", "10.0.9.9:9090");
    serve(&mut worker, "spiffe://b", "10.0.9.9:9090");
    // A request the host reports no usable local address for is attested under no address.
    serve(&mut worker, "spiffe://c", "somewhere");
    worker.tick(&proxy);
    let sent = |proxy: &TestProxy| {
        let mut all: Vec<_> = proxy
            .take_calls()
            .iter()
            .map(|c| parse_attestation(&c.body).expect("the aggregator reads it"))
            .map(|a| (a.endpoint, a.sources.into_iter().map(|s| (s.principal, s.requests)).collect::<Vec<_>>()))
            .collect();
        all.sort();
        all
    };
    assert_eq!(
        sent(&proxy),
        [
            ("10.0.9.9:8080".to_string(), vec![("spiffe://a".to_string(), 1)]),
            ("10.0.9.9:9090".to_string(), vec![("spiffe://b".to_string(), 2)]),
        ]
    );
    // Caller a keeps calling on 8080; b was last seen 5 report intervals (1 s each) ago: forgotten,
    // and with it port 9090.
    for _ in 0..5 {
        proxy.advance_us(1_000 * MS);
        serve(&mut worker, "spiffe://a", "10.0.9.9:8080");
        worker.tick(&proxy);
    }
    let last = sent(&proxy).into_iter().filter(|(endpoint, _)| endpoint.ends_with(":9090")).count();
    assert_eq!(last, 4, "9090 attested until its caller expired");
    proxy.advance_us(1_000 * MS);
    worker.tick(&proxy);
    assert_eq!(sent(&proxy), [("10.0.9.9:8080".to_string(), vec![("spiffe://a".to_string(), 6)])]);
    assert_eq!(proxy.metric("tailweight.attest_overflow"), 0);
}

#[test]
fn a_bad_configuration_passes_traffic_untouched_and_says_why() {
    let proxy = TestProxy::new(START_US, 33);
    let mut worker = TestWorker::configured(&proxy, 0, r#"{"retry_choices": 9}"#);
    assert_eq!(proxy.metric("tailweight.config_errors"), 1);
    let (level, message) = &proxy.logs()[0];
    assert_eq!(*level, tailweight_sidecar::host::LogLevel::Error);
    assert!(message.contains("retry_choices"), "{message}");
    let mut exchange =
        TestExchange::to_cluster(CLUSTER).with_request_header("x-gateway-destination-endpoint", "1.2.3.4:80");
    let stream = worker.start(&proxy, &mut exchange);
    worker.finish(&proxy, stream, &mut exchange, Served { by: Some("10.0.0.1:80"), status: 200, latency_us: 0 });
    assert_eq!(exchange.request_header("x-gateway-destination-endpoint"), Some("1.2.3.4:80"), "untouched");
    worker.tick(&proxy);
    assert!(proxy.take_calls().is_empty());
}

#[test]
fn a_server_role_on_an_outbound_listener_is_warned_about_once() {
    let proxy = TestProxy::new(START_US, 34);
    let mut worker = TestWorker::configured(&proxy, 0, SERVER);
    for _ in 0..3 {
        let mut exchange = inbound("spiffe://a");
        exchange.set_number(Attribute::ListenerDirection, 2);
        let stream = worker.start(&proxy, &mut exchange);
        worker.finish(&proxy, stream, &mut exchange, Served { by: None, status: 200, latency_us: 0 });
    }
    let logs = proxy.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(logs[0].1.contains("outbound listener"), "{}", logs[0].1);
}
