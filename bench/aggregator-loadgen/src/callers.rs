//! `--callers-matrix`: principals that never call a service against its real callers, over HTTP
//! against the started aggregator (`--identity header:x-tailweight-principal`, the default
//! `--attest-rule namespace`). One cluster per case, all driven at once, one report a second per
//! principal for `ROUNDS` seconds: 1, 2 or 20 callers (ns/prod, 50 requests a second to each of
//! three endpoints, none failing) against 1, 2 or 8 attackers (ns/dev, claiming 90% of endpoint
//! A's requests fail at 1 s each), with the service's endpoints attesting what they served
//! (principal ns/prod/sa/shop) or not. Each case's weights are compared with a cluster of the same
//! callers and no attacker: the largest relative change of an endpoint's share (an endpoint
//! ejected in one and not the other moved 100%), and the endpoints ejected. Appends its table to
//! `--md` (and prints it).

use crate::drive::connect;
use crate::fleet::PRINCIPAL_HEADER;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tailweight_wire::attest::write::write_attestation;
use tailweight_wire::attest::{Attestation, SourceCount};
use tailweight_wire::protocol::{ATTEST_PATH, REPORT_PATH, VERSION};
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

const ROUNDS: u64 = 20;
const CALLERS: [usize; 3] = [1, 2, 20];
const ATTACKERS: [usize; 3] = [1, 2, 8];
const RATE: u64 = 50;

/// One cluster of the matrix.
struct Case {
    cluster: String,
    endpoints: [String; 3],
    callers: usize,
    attackers: usize,
    attested: bool,
}

fn spiffe(ns: &str, sa: &str) -> String {
    format!("spiffe://cluster.local/ns/{ns}/sa/{sa}")
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for attested in [false, true] {
        for callers in CALLERS {
            for attackers in [0].into_iter().chain(ATTACKERS) {
                let n = out.len();
                out.push(Case {
                    cluster: format!("outbound|8080||shop{n}.prod.svc.cluster.local"),
                    endpoints: [1, 2, 3].map(|e| format!("10.77.{n}.{e}:8080")),
                    callers,
                    attackers,
                    attested,
                });
            }
        }
    }
    out
}

/// What `principal`'s reporter says after `round` seconds: `errors` of every `RATE` requests to
/// endpoint A fail, taking `latency_us` each.
fn report(case: &Case, reporter: &str, round: u64, errors: u64, latency_us: u64) -> Vec<u8> {
    let endpoints = case
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let (errors, latency_us) = if i == 0 { (errors, latency_us) } else { (0, 10_000) };
            EndpointReport {
                address: address.clone(),
                requests: RATE * round,
                errors: errors * round,
                latency_sum_us: (RATE - errors) * round * latency_us,
                inflight: 1,
                latency_ewma_us: latency_us,
                latency_age_ms: 0,
                cpu: None,
                cpu_age_ms: None,
                seen_age_ms: Some(0),
                counted_ms: None,
            }
        })
        .collect();
    write_report(&Report {
        version: VERSION,
        reporter: reporter.into(),
        incarnation: 1,
        interval_ms: 1000,
        clusters: vec![ClusterReport { name: case.cluster.clone(), endpoints }],
    })
}

fn attestation(case: &Case, endpoint: &str, round: u64) -> Vec<u8> {
    write_attestation(&Attestation {
        version: VERSION,
        cluster: case.cluster.clone(),
        endpoint: endpoint.into(),
        incarnation: 1,
        interval_ms: 1000,
        sources: (0..case.callers)
            .map(|i| SourceCount { principal: spiffe("prod", &format!("front{i}")), requests: RATE * round, errors: 0 })
            .collect(),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// POST `body` to `path` as `principal`; the status (0: no answer).
async fn post(sender: &mut Sender, path: &str, principal: &str, body: Vec<u8>) -> u16 {
    let Ok(request) = hyper::Request::post(path)
        .header(hyper::header::HOST, "aggregator")
        .header(PRINCIPAL_HEADER, principal)
        .body(Full::new(Bytes::from(body)))
    else {
        return 0;
    };
    if sender.ready().await.is_err() {
        return 0;
    }
    match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let _ = response.into_body().collect().await;
            status
        }
        Err(_) => 0,
    }
}

/// Each endpoint's (weight, ejected) in `cluster`, in the case's order.
async fn decisions(sender: &mut Sender, case: &Case) -> Result<Vec<(f64, bool)>, String> {
    let path = format!("/v1/weights?cluster={}", case.cluster.replace('|', "%7C"));
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "aggregator")
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let page: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let endpoints = page["clusters"][0]["endpoints"].as_array().cloned().unwrap_or_default();
    case.endpoints
        .iter()
        .map(|address| {
            let e = endpoints.iter().find(|e| e["address"] == address.as_str()).ok_or(format!("{address}: missing"))?;
            Ok((e["weight"].as_f64().unwrap_or(0.0), e["ejected"].as_bool().unwrap_or(false)))
        })
        .collect()
}

/// The largest relative change of an endpoint's share between `fair` and `lied` (1: an ejection
/// differs).
fn moved(fair: &[(f64, bool)], lied: &[(f64, bool)]) -> f64 {
    let share = |d: &[(f64, bool)], i: usize| d[i].0 / d.iter().map(|x| x.0).sum::<f64>();
    (0..fair.len())
        .map(|i| if fair[i].1 != lied[i].1 { 1.0 } else { (share(lied, i) / share(fair, i) - 1.0).abs() })
        .fold(0.0, f64::max)
}

/// Run the matrix and append its table to `md` (if given).
pub(crate) async fn run(addr: SocketAddr, md: Option<&std::path::Path>) -> Result<(), String> {
    let cases = cases();
    let mut sender = connect(addr).await?;
    let start = Instant::now();
    let mut refused = 0u64;
    for round in 1..=ROUNDS {
        for case in &cases {
            for i in 0..case.callers {
                let body = report(case, &format!("front{i}"), round, 0, 10_000);
                refused +=
                    u64::from(post(&mut sender, REPORT_PATH, &spiffe("prod", &format!("front{i}")), body).await != 200);
            }
            for k in 0..case.attackers {
                let body = report(case, &format!("att{k}"), round, RATE * 9 / 10, 1_000_000);
                refused += u64::from(
                    post(&mut sender, REPORT_PATH, &spiffe("dev", &format!("attacker{k}")), body).await != 200,
                );
            }
            if case.attested {
                for e in &case.endpoints {
                    let body = attestation(case, e, round);
                    refused += u64::from(post(&mut sender, ATTEST_PATH, &spiffe("prod", "shop"), body).await != 204);
                }
            }
        }
        let next = start + Duration::from_secs(round);
        tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut table = format!(
        "\n## Principals that do not call the service\n\nOne cluster per row, three endpoints; for {ROUNDS} s each caller (ns/prod) reports {RATE} requests a second to each endpoint, none failing, and each attacker (ns/dev, never calling) reports 90% of endpoint A's requests failing at 1 s; attested: the endpoints attest what they served (`POST /v1/attest` as ns/prod/sa/shop). Moved: the largest relative change of an endpoint's share against the same callers without attackers (an ejection that differs: 100%). One run; requests refused: {refused}.\n\n| callers | attackers | attested | share moved | ejected |\n|---:|---:|---|---:|---:|\n"
    );
    for case in cases.iter().filter(|c| c.attackers > 0) {
        let fair = cases.iter().find(|f| f.attackers == 0 && f.callers == case.callers && f.attested == case.attested);
        let fair = decisions(&mut sender, fair.ok_or("no fair case")?).await?;
        let lied = decisions(&mut sender, case).await?;
        let ejected = lied.iter().filter(|d| d.1).count();
        table += &format!(
            "| {} | {} | {} | {:.2}% | {ejected} |\n",
            case.callers,
            case.attackers,
            if case.attested { "yes" } else { "no" },
            100.0 * moved(&fair, &lied)
        );
    }
    print!("{table}");
    if let Some(path) = md {
        let before = std::fs::read_to_string(path).unwrap_or_default();
        std::fs::write(path, before + &table).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
