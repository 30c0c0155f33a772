//! Every endpoint over real HTTP on 127.0.0.1, including each class of bad input.

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tailweight_aggregator::{AppState, ServiceConfig};
use tailweight_weights::ViewInflight;
use tailweight_wire::reply::read::read_reply;
use tokio::sync::oneshot;

struct TestAggregator {
    url: String,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TestAggregator {
    async fn start(tweak: impl FnOnce(&mut ServiceConfig)) -> TestAggregator {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let mut config = ServiceConfig::for_tests(addr);
        config.recompute_interval_ms = 50;
        config.max_body_bytes = 64 * 1024;
        // Each scrape sees the counters of the moment (a page per scrape).
        config.metrics_page_max_age_ms = 0;
        tweak(&mut config);
        let state = tailweight_aggregator::state_from(&config).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(tailweight_aggregator::serve(config, state.clone(), listener, async {
            let _ = stopped.await;
        }));
        TestAggregator { url: format!("http://{addr}"), state, stop: Some(stop), task }
    }

    async fn post(&self, body: impl Into<reqwest::Body>) -> (u16, String) {
        self.post_with(&[], body).await
    }

    async fn post_with(&self, headers: &[(&str, &str)], body: impl Into<reqwest::Body>) -> (u16, String) {
        let mut request = reqwest::Client::new().post(format!("{}/v1/report", self.url)).body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let r = request.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// A raw connection that sent `request` (and keeps the socket open).
    async fn raw(&self, request: &[u8]) -> tokio::net::TcpStream {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(self.addr()).await.unwrap();
        tcp.write_all(request).await.unwrap();
        tcp
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("{}{path}", self.url)).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Wait for the recompute loop to run at least once more.
    async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

fn report(reporter: &str, requests: u64, endpoints: &[&str]) -> Value {
    json!({
        "version": 1,
        "reporter": reporter,
        "incarnation": 7,
        "interval_ms": 1000,
        "clusters": [{
            "name": "outbound|8080||svc.ns.svc.cluster.local",
            "endpoints": endpoints.iter().map(|a| json!({
                "address": a, "requests": requests, "errors": 0, "latency_sum_us": requests * 5_000,
                "inflight": 2, "latency_ewma_us": 5_000, "latency_age_ms": 10
            })).collect::<Vec<_>>()
        }]
    })
}

fn metric(page: &str, name_and_labels: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name_and_labels).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name_and_labels} not in metrics"))
}

#[tokio::test]
async fn a_report_gets_the_view_of_its_clusters() {
    // The view's in-flight as the reporters' last counts (`--view-inflight last`): their sum, and
    // that less the asker's own.
    let s = TestAggregator::start(|c| c.view_inflight = ViewInflight::Last).await;
    let (status, body) = s.post(report("pod-a.ns", 100, &["10.0.0.1:80", "10.0.0.2:80"]).to_string()).await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((reply["version"].as_u64(), reply["ttl_ms"].as_u64()), (Some(1), Some(3000)));
    s.settle().await;
    s.post(report("pod-b.ns", 100, &["10.0.0.1:80", "10.0.0.2:80"]).to_string()).await;
    s.settle().await;
    let (_, body) = s.post(report("pod-a.ns", 200, &["10.0.0.1:80", "10.0.0.2:80"]).to_string()).await;
    // What the filter reads (and validates).
    let reply = read_reply(body.as_bytes(), &Default::default()).unwrap();
    let endpoints = &reply.clusters[0].endpoints;
    assert_eq!(endpoints.len(), 2);
    for e in endpoints {
        assert_eq!((e.inflight, e.peer_inflight), (4.0, 2.0), "{e:?}");
        assert!((e.weight - 1.0).abs() < 1e-9 && !e.ejected);
        assert_eq!(e.latency_us, 5_000);
    }
    s.stop().await;
}

#[tokio::test]
async fn weights_can_be_inspected_all_or_by_cluster() {
    let s = TestAggregator::start(|_| {}).await;
    s.post(report("pod-a", 10, &["10.0.0.1:80"]).to_string()).await;
    s.settle().await;
    let (status, body) = s.get("/v1/weights").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["counts"]["reporters"], 1);
    assert_eq!(v["clusters"][0]["endpoints"][0]["address"], "10.0.0.1:80");
    assert!(v["clusters"][0]["generation"].as_u64().unwrap() >= 1);
    let (status, body) = s.get("/v1/weights?cluster=outbound%7C8080%7C%7Csvc.ns.svc.cluster.local").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.get("/v1/weights?cluster=nope").await;
    assert_eq!(status, 404);
    assert_eq!(body.lines().count(), 1, "{body}");
    s.stop().await;
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let s = TestAggregator::start(|_| {}).await;
    assert_eq!(s.get("/healthz").await, (200, "ok\n".into()));
    s.settle().await;
    assert_eq!(s.get("/readyz").await.0, 200);
    s.post(report("pod-a", 10, &["10.0.0.1:80"]).to_string()).await;
    s.post("{").await;
    s.settle().await;
    let (status, page) = s.get("/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&page, "tailweight_reports_accepted_total"), 1.0);
    assert_eq!(metric(&page, "tailweight_reports_rejected_total{reason=\"malformed\"}"), 1.0);
    assert_eq!(metric(&page, "tailweight_reports_rejected_total{reason=\"too_large\"}"), 0.0);
    assert_eq!(metric(&page, "tailweight_reporters_live"), 1.0);
    assert_eq!(metric(&page, "tailweight_endpoints_tracked"), 1.0);
    assert!(metric(&page, "tailweight_weight_compute_seconds_count") >= 1.0);
    assert_eq!(metric(&page, "tailweight_report_handling_seconds_count"), 2.0);
    assert_eq!(metric(&page, "tailweight_cpu_source_staleness_seconds"), -1.0);
    assert_eq!(metric(&page, "tailweight_cpu_source_errors_total{kind=\"request\"}"), 0.0);
    s.state.start_draining();
    assert_eq!(s.get("/readyz").await.0, 503);
    s.stop().await;
}

#[tokio::test]
async fn metrics_list_each_tracked_endpoint_by_cluster_and_the_books_budget() {
    let s = TestAggregator::start(|_| {}).await;
    s.post(report("pod-a", 10, &["10.0.0.1:80", "10.0.0.2:80"]).to_string()).await;
    s.settle().await;
    let page = s.get("/metrics").await.1;
    let labels = "{upstream_cluster=\"outbound|8080||svc.ns.svc.cluster.local\",upstream_endpoint=\"10.0.0.2:80\"}";
    assert!((metric(&page, &format!("tailweight_endpoint_weight{labels}")) - 1.0).abs() < 1e-9, "{page}");
    assert_eq!(metric(&page, &format!("tailweight_endpoint_ejected{labels}")), 0.0);
    assert!(metric(&page, &format!("tailweight_endpoint_qps{labels}")) >= 0.0);
    let budget = metric(&page, "tailweight_book_budget_bytes");
    assert!(budget > metric(&page, "tailweight_book_bytes") && budget > 0.0, "{page}");
    s.stop().await;
}

/// Each bad report (and, after pod-a and before the cap, one good one): its body, its status, a
/// fragment of its one-line reason, its metric reason.
fn bad_inputs() -> Vec<(String, u16, &'static str, &'static str)> {
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = report("pod-a", 20, &["10.0.0.1:80", "10.0.0.2:80"]);
        f(&mut v);
        v.to_string()
    };
    let e = "/clusters/0/endpoints/0";
    vec![
        ("{\"version\":1,".into(), 400, "malformed report", "malformed"),
        ("".into(), 400, "malformed report", "malformed"),
        ("\u{0}\u{1}garbage".into(), 400, "malformed report", "malformed"),
        (with(&|v| v["interval_ms"] = json!("1000")), 400, "invalid type", "malformed"),
        (
            with(&|v| *v.pointer_mut(&format!("{e}/requests")).unwrap() = json!(-5)),
            400,
            "malformed report",
            "malformed",
        ),
        (
            with(&|v| *v.pointer_mut(&format!("{e}/requests")).unwrap() = json!(1.5)),
            400,
            "malformed report",
            "malformed",
        ),
        (with(&|v| v["clusters"] = json!({"a": 1})), 400, "malformed report", "malformed"),
        (
            with(&|v| v.pointer_mut(e).unwrap().as_object_mut().unwrap().remove("address").map(|_| ()).unwrap()),
            400,
            "missing field `address`",
            "malformed",
        ),
        (
            with(&|_| {}).replacen("\"inflight\":2", "\"inflight\":2,\"cpu\":NaN", 1),
            400,
            "malformed report",
            "malformed",
        ),
        (
            with(&|_| {}).replacen("\"inflight\":2", "\"inflight\":2,\"cpu\":1e999", 1),
            400,
            "malformed report",
            "malformed",
        ),
        (with(&|v| v.pointer_mut(e).unwrap()["cpu"] = json!(-0.5)), 400, "cpu: -0.5 is outside", "invalid"),
        (with(&|v| v.pointer_mut(e).unwrap()["cpu"] = json!(1e300)), 400, "is outside 0..=1000", "invalid"),
        (
            with(&|v| v.pointer_mut(e).unwrap()["inflight"] = json!(4_000_000)),
            400,
            "inflight: 4000000 is above",
            "invalid",
        ),
        (with(&|v| v.pointer_mut(e).unwrap()["latency_ewma_us"] = json!(u64::MAX)), 400, "above one hour", "invalid"),
        (with(&|v| v.pointer_mut(e).unwrap()["errors"] = json!(1_000)), 400, "exceed requests", "invalid"),
        (with(&|v| v.pointer_mut(e).unwrap()["address"] = json!("pod-a")), 400, "is not ip:port", "invalid"),
        (with(&|v| v["reporter"] = json!("")), 400, "reporter: must not be empty", "invalid"),
        (with(&|v| v["interval_ms"] = json!(0)), 400, "interval_ms: 0 is outside", "invalid"),
        (with(&|v| v["version"] = json!(2)), 400, "version: 2 is not supported", "unsupported_version"),
        (
            json!({"version": 3, "something": "else"}).to_string(),
            400,
            "version: 3 is not supported",
            "unsupported_version",
        ),
        ("x".repeat(70 * 1024), 413, "larger than the limit of 65536 bytes", "too_large"),
        (report("pod-new-1", 1, &["10.0.0.1:80"]).to_string(), 200, "", ""),
        (report("pod-new-2", 1, &["10.0.0.1:80"]).to_string(), 429, "too_many_reporters", "too_many_reporters"),
    ]
}

#[tokio::test]
async fn every_class_of_bad_input_gets_a_4xx_with_one_line_and_changes_nothing() {
    let s = TestAggregator::start(|c| c.max_reporters = Some(2)).await;
    s.post(report("pod-a", 10, &["10.0.0.1:80"]).to_string()).await;
    s.settle().await;
    let before = s.get("/v1/weights").await.1;
    let before: Value = serde_json::from_str(&before).unwrap();
    for (body, status, needle, reason) in bad_inputs() {
        let page = s.get("/metrics").await.1;
        let counted = |page: &str| {
            if reason.is_empty() {
                0.0
            } else {
                metric(page, &format!("tailweight_reports_rejected_total{{reason=\"{reason}\"}}"))
            }
        };
        let before_count = counted(&page);
        let (got, text) = s.post(body.clone()).await;
        assert_eq!(got, status, "{body:.200} -> {text}");
        if status != 200 {
            assert!(text.contains(needle), "expected {needle:?} in {text:?}");
            assert_eq!(text.trim_end().lines().count(), 1, "one line: {text:?}");
            assert_eq!(counted(&s.get("/metrics").await.1), before_count + 1.0, "{reason} not counted");
        }
    }
    // Nothing of the refused reports reached the book: pod-a still has one endpoint, its counters
    // (no second window) unchanged; the only change is the accepted pod-new-1.
    let after: Value = serde_json::from_str(&s.get("/v1/weights").await.1).unwrap();
    assert_eq!(after["counts"]["endpoints"], before["counts"]["endpoints"]);
    assert_eq!(after["counts"]["reporters"], 2);
    assert_eq!(after["clusters"][0]["endpoints"][0]["qps"], 0.0);
    s.stop().await;
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_refused_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestAggregator::start(|c| c.max_body_bytes = 1024).await;
    let mut tcp = tokio::net::TcpStream::connect(s.url.trim_start_matches("http://")).await.unwrap();
    let mut request =
        b"POST /v1/report HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..10 {
        request.extend_from_slice(b"200\r\n");
        request.extend_from_slice(&[b' '; 512]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The server may answer and close before reading everything: a failed write is fine.
    let _ = tcp.write_all(&request).await;
    let mut response = Vec::new();
    let _ = tcp.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.ends_with("body: larger than the limit of 1024 bytes\n"), "{response}");
    s.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods_get_one_line() {
    let s = TestAggregator::start(|_| {}).await;
    let (status, body) = s.get("/nope").await;
    assert_eq!((status, body.lines().count()), (404, 1));
    let (status, body) = s.get("/v1/report").await;
    assert_eq!((status, body.lines().count()), (405, 1));
    s.stop().await;
}

#[tokio::test]
async fn shutdown_finishes_and_the_listener_closes() {
    let s = TestAggregator::start(|_| {}).await;
    let url = s.url.clone();
    s.stop().await;
    assert!(reqwest::get(format!("{url}/healthz")).await.is_err());
}

/// What the server sends on `tcp` until it closes it (bounded: a test that waited forever would
/// hang; the server's own timeouts are far shorter).
async fn until_closed(mut tcp: tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut response)).await;
    assert!(read.is_ok(), "the server kept the connection open: {}", String::from_utf8_lossy(&response));
    String::from_utf8_lossy(&response).into_owned()
}

/// The x-forwarded-client-cert an Istio sidecar appends for a caller of service account `sa`.
fn xfcc(sa: &str) -> String {
    format!(
        "By=spiffe://cluster.local/ns/tailweight/sa/tailweight-aggregator;Hash=00ff;Subject=\"\";\
         URI=spiffe://cluster.local/ns/shop/sa/{sa}"
    )
}

#[tokio::test]
async fn with_xfcc_identity_a_reports_principal_is_the_meshs_and_ids_it_invents_are_one_voice() {
    let s = TestAggregator::start(|c| c.identity = Some("xfcc".parse().unwrap())).await;
    let (status, body) = s.post(report("pod-a", 10, &["10.0.0.1:80"]).to_string()).await;
    assert_eq!(
        (status, body.as_str()),
        (403, "x-forwarded-client-cert: missing (the caller's identity comes from it)\n")
    );
    let mallory = xfcc("mallory");
    for id in ["fake-1", "fake-2", "fake-3"] {
        let (status, body) =
            s.post_with(&[("x-forwarded-client-cert", &mallory)], report(id, 10, &["10.0.0.1:80"]).to_string()).await;
        assert_eq!(status, 200, "{body}");
    }
    let alice = xfcc("alice");
    s.post_with(&[("x-forwarded-client-cert", &alice)], report("pod-a", 10, &["10.0.0.1:80"]).to_string()).await;
    let counts = &serde_json::from_str::<Value>(&s.get("/v1/weights").await.1).unwrap()["counts"];
    assert_eq!((counts["principals"].as_u64(), counts["reporters"].as_u64()), (Some(2), Some(4)));
    let page = s.get("/metrics").await.1;
    assert_eq!(metric(&page, "tailweight_reports_rejected_total{reason=\"no_identity\"}"), 1.0);
    s.stop().await;
}

#[tokio::test]
async fn with_a_header_identity_each_principal_holds_its_share_of_the_limits() {
    let s = TestAggregator::start(|c| {
        c.identity = Some("header:x-principal".parse().unwrap());
        c.max_endpoints_per_cluster = 4;
        c.principal_share = 0.25;
    })
    .await;
    let mallory = [("x-principal", "mallory")];
    let fake: Vec<String> = (1..=8).map(|i| format!("10.9.9.{i}:80")).collect();
    let fake: Vec<&str> = fake.iter().map(String::as_str).collect();
    // Four made-up endpoints by one reporter id, four more by another: one principal, four at most.
    assert_eq!(s.post_with(&mallory, report("m1", 1, &fake[..4]).to_string()).await.0, 200);
    let (status, body) = s.post_with(&mallory, report("m2", 1, &fake[4..]).to_string()).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.starts_with("principal_endpoints: "), "{body}");
    // The cluster is not full for others.
    let honest = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    assert_eq!(s.post_with(&[("x-principal", "alice")], report("a", 1, &honest).to_string()).await.0, 200);
    s.stop().await;
}

#[tokio::test]
async fn a_reply_truncates_a_view_past_the_endpoint_cap_and_counts_the_rest() {
    let s = TestAggregator::start(|c| c.max_reply_endpoints = 3).await;
    let four = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    s.post(report("pod-a", 10, &four).to_string()).await;
    s.post(report("pod-b", 10, &four[..2]).to_string()).await;
    s.settle().await;
    // Four endpoints do not fit in a reply of three: the view is truncated to three (the asker's
    // own first, in its report's order), says so, and the metric counts the one left out.
    let omitted = |page: &str| metric(page, "tailweight_reply_endpoints_omitted_total");
    let before = omitted(&s.get("/metrics").await.1);
    let (status, body) = s.post(report("pod-a", 20, &four).to_string()).await;
    assert_eq!(status, 200, "{body}");
    let cluster = serde_json::from_str::<Value>(&body).unwrap()["clusters"][0].clone();
    assert_eq!(cluster["omitted"], json!(1), "{body}");
    let kept: Vec<&str> =
        cluster["endpoints"].as_array().unwrap().iter().map(|e| e["address"].as_str().unwrap()).collect();
    assert_eq!(kept.len(), 3, "{body}");
    assert!(kept.contains(&four[0]) && kept.contains(&four[1]), "{body}");
    assert_eq!(omitted(&s.get("/metrics").await.1), before + 1.0);
    s.stop().await;
}

#[tokio::test]
async fn weights_come_in_pages_of_clusters() {
    let s = TestAggregator::start(|_| {}).await;
    for i in 0..5 {
        let mut r = report(&format!("pod-{i}"), 10, &["10.0.0.1:80"]);
        r["clusters"][0]["name"] = json!(format!("c{i}"));
        s.post(r.to_string()).await;
    }
    s.settle().await;
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let (status, body) = s.get(&format!("/v1/weights?limit=2&after={after}")).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let names: Vec<String> =
            v["clusters"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().into()).collect();
        assert!(names.len() <= 2);
        seen.extend(names);
        match v["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, ["c0", "c1", "c2", "c3", "c4"]);
    assert_eq!(s.get("/v1/weights?limit=0").await.0, 400);
    assert_eq!(s.get("/v1/weights?bogus=1").await.0, 400);
    s.stop().await;
}

#[tokio::test]
async fn beyond_the_concurrent_requests_a_request_is_shed_with_retry_after() {
    let s = TestAggregator::start(|c| c.max_concurrent_requests = 1).await;
    // One report whose body never finishes holds the only slot.
    let held = s.raw(b"POST /v1/report HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = reqwest::Client::new().post(format!("{}/v1/report", s.url)).body("{}").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.text().await.unwrap(), "overloaded: 1 requests in progress; retry after 1 s\n");
    // Weight queries and metrics take a slot too; health is never shed.
    assert_eq!(s.get("/v1/weights").await.0, 503);
    assert_eq!(s.get("/metrics").await.0, 503);
    assert_eq!(s.get("/healthz").await.0, 200);
    drop(held);
    s.stop().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_the_connection_closes() {
    let s = TestAggregator::start(|c| c.body_timeout_ms = 200).await;
    let tcp = s.raw(b"POST /v1/report HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"version\"").await;
    let response = until_closed(tcp).await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.ends_with("request: not complete within 200 ms\n"), "{response}");
    s.stop().await;
}

#[tokio::test]
async fn headers_that_do_not_arrive_in_time_close_the_connection() {
    let s = TestAggregator::start(|c| c.header_timeout_ms = 200).await;
    // A slowloris: a request line and no end of headers.
    let tcp = s.raw(b"POST /v1/report HTTP/1.1\r\nhost: x\r\n").await;
    until_closed(tcp).await;
    // An idle keep-alive connection is closed the same way.
    until_closed(s.raw(b"").await).await;
    s.stop().await;
}

#[tokio::test]
async fn beyond_the_connection_limit_a_connection_gets_503_and_is_closed() {
    let s = TestAggregator::start(|c| c.max_connections = 2).await;
    let (_a, _b) = (s.raw(b"").await, s.raw(b"").await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = until_closed(s.raw(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await).await;
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("retry-after: 1\r\n"), "{response}");
    assert!(response.ends_with("connections: the limit is reached; retry after 1 s\n"), "{response}");
    let page = s.state.metrics.render();
    assert_eq!(metric(&page, "tailweight_connections_refused_total"), 1.0);
    s.stop().await;
}

#[tokio::test]
async fn one_principal_cannot_hold_every_request_slot() {
    let s = TestAggregator::start(|c| {
        c.identity = Some("header:x-principal".parse().unwrap());
        c.max_requests_per_principal = 1;
    })
    .await;
    let held =
        s.raw(b"POST /v1/report HTTP/1.1\r\nhost: x\r\nx-principal: mallory\r\ncontent-length: 100\r\n\r\n{").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let body = report("pod-a", 10, &["10.0.0.1:80"]).to_string();
    let (status, line) = s.post_with(&[("x-principal", "mallory")], body.clone()).await;
    assert_eq!(
        (status, line.as_str()),
        (503, "principal: \"mallory\" holds its share of the request slots; retry after 1 s\n")
    );
    assert_eq!(s.post_with(&[("x-principal", "alice")], body).await.0, 200);
    drop(held);
    s.stop().await;
}

#[tokio::test]
async fn large_bodies_are_parsed_as_well() {
    let s = TestAggregator::start(|c| c.max_body_bytes = 1 << 20).await;
    let addresses: Vec<String> = (0..1_000).map(|i| format!("10.1.{}.{}:8080", i / 250, i % 250)).collect();
    let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let body = report("pod-a", 10, &addresses).to_string();
    assert!(body.len() > 64 * 1024, "{}", body.len());
    let (status, reply) = s.post(body.clone()).await;
    assert_eq!(status, 200, "{reply}");
    let (status, line) = s.post(body.replacen("\"version\":1", "\"version\":1,", 1)).await;
    assert_eq!(status, 400);
    assert!(line.starts_with("malformed report: "), "{line}");
    s.stop().await;
}

/// A held request: headers and the first byte of a body that never finishes.
fn held_report(principal: &str) -> Vec<u8> {
    format!("POST /v1/report HTTP/1.1\r\nhost: x\r\nx-principal: {principal}\r\ncontent-length: 100\r\n\r\n{{")
        .into_bytes()
}

#[tokio::test]
async fn four_principals_cannot_hold_every_slot_and_weights_queries_take_one() {
    let s = TestAggregator::start(|c| {
        c.identity = Some("header:x-principal".parse().unwrap());
        c.max_concurrent_requests = 8;
        c.max_requests_per_principal = 4;
        c.min_body_rate = 0;
    })
    .await;
    // Each of four principals tries to hold four: the first gets 4 (half of 8), the others 1 each;
    // one slot stays free.
    let mut held = Vec::new();
    for p in ["m0", "m1", "m2", "m3"] {
        for _ in 0..4 {
            held.push(s.raw(&held_report(p)).await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let page = s.state.metrics.render();
    assert_eq!(metric(&page, "tailweight_requests_shed_total{reason=\"principal_busy\"}"), 9.0, "{page}");
    let body = report("pod-a", 10, &["10.0.0.1:80"]).to_string();
    assert_eq!(s.post_with(&[("x-principal", "alice")], body.clone()).await.0, 200);
    let weights = reqwest::Client::new().get(format!("{}/v1/weights", s.url)).header("x-principal", "bob");
    assert_eq!(weights.send().await.unwrap().status().as_u16(), 200);
    // A principal holding slots gets none of the last ones for a weights query either.
    let weights = reqwest::Client::new().get(format!("{}/v1/weights", s.url)).header("x-principal", "m0");
    assert_eq!(weights.send().await.unwrap().status().as_u16(), 503);
    drop(held);
    s.stop().await;
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_with_408_and_its_slot_is_freed() {
    let s = TestAggregator::start(|c| {
        c.identity = Some("header:x-principal".parse().unwrap());
        c.max_requests_per_principal = 1;
        c.min_body_rate = 1_000;
    })
    .await;
    // One byte, then nothing: past the grace second it is below any rate.
    let tcp = s.raw(&held_report("mallory")).await;
    let response = until_closed(tcp).await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("body: slower than 1000 bytes/s"), "{response}");
    let body = report("pod-a", 10, &["10.0.0.1:80"]).to_string();
    assert_eq!(s.post_with(&[("x-principal", "mallory")], body).await.0, 200);
    let page = s.state.metrics.render();
    assert_eq!(metric(&page, "tailweight_requests_shed_total{reason=\"slow_body\"}"), 1.0);
    s.stop().await;
}

#[tokio::test]
async fn the_read_only_listener_serves_weights_and_never_takes_a_report() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let read_only = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let inspect = format!("http://{}", read_only.local_addr().unwrap());
    let mut config = ServiceConfig::for_tests(listener.local_addr().unwrap());
    config.identity = Some("xfcc".parse().unwrap());
    let state = tailweight_aggregator::state_from(&config).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task =
        tokio::spawn(tailweight_aggregator::serve_with_read_only(config, state, listener, Some(read_only), async {
            let _ = stopped.await;
        }));
    let body = report("pod-a", 10, &["10.0.0.1:80"]).to_string();
    let forged = reqwest::Client::new()
        .post(format!("{inspect}/v1/report"))
        .header("x-forwarded-client-cert", xfcc("frontend"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    assert!(forged.text().await.unwrap().starts_with("listener: read-only"));
    for path in ["/v1/weights", "/metrics", "/healthz"] {
        assert_eq!(reqwest::get(format!("{inspect}{path}")).await.unwrap().status().as_u16(), 200, "{path}");
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_requester_polling_weights_back_to_back_gets_429_past_its_page_rate_and_others_still_get_pages() {
    let s = TestAggregator::start(|c| {
        c.identity = Some("header:x-principal".parse().unwrap());
        c.max_body_bytes = 512 * 1024;
        // Room in the request budget (slots x the largest report) for three of the largest pages at
        // once (16 MiB each), so that only the rate refuses.
        c.max_concurrent_requests = 64;
        c.memory_limit_mib = 1024;
    })
    .await;
    // 8 reporters x 16 clusters x 128 endpoints: two of the largest pages (8,192 endpoints each),
    // which is a requester's burst of page work (page_rate.rs).
    for r in 0..8 {
        let mut body = report(&format!("pod-{r}"), 10, &[]);
        body["clusters"] = (0..16)
            .map(|c| {
                let endpoints: Vec<String> = (0..128).map(|e| format!("10.{r}.{c}.{e}:80")).collect();
                let endpoints: Vec<&str> = endpoints.iter().map(String::as_str).collect();
                let mut cluster = report("x", 10, &endpoints)["clusters"][0].clone();
                cluster["name"] = json!(format!("c{r}-{c}"));
                cluster
            })
            .collect();
        let principal = format!("sa-{r}");
        assert_eq!(s.post_with(&[("x-principal", principal.as_str())], body.to_string()).await.0, 200);
    }
    s.settle().await;
    let client = reqwest::Client::new();
    let poll =
        |who: &'static str| client.get(format!("{}/v1/weights?limit=1024", s.url)).header("x-principal", who).send();
    // Four at once (a principal's share of the slots): each takes its units as it is copied, one
    // after the other, within far less than the second the rate needs to refill one page.
    let (a, b, c, d) = tokio::join!(poll("poller"), poll("poller"), poll("poller"), poll("poller"));
    let answers = [a, b, c, d].map(|r| r.unwrap());
    let mut statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429, 429]);
    let refused = answers.iter().find(|r| r.status() == 429).unwrap();
    assert_eq!(refused.headers()["retry-after"], "1");
    // Another requester has its own page rate.
    assert_eq!(poll("inspector").await.unwrap().status().as_u16(), 200);
    let page = s.state.metrics.render();
    assert!(metric(&page, "tailweight_requests_shed_total{reason=\"page_rate\"}") >= 1.0, "{page}");
    s.stop().await;
}
