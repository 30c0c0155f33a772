//! Made-up endpoints (`--evidence-attacks`, issue 38 target 1): in one cluster with `REAL` endpoints
//! reported by `CALLERS` honest principals (ns/prod, once a second each), one principal (ns/dev,
//! mallory) reports `MADE_UP` endpoints that do not exist beside them, once a second from round
//! `ATTACK_FROM`, while the fleet's honest load goes on in other clusters. Measured: of the honest
//! callers' replies after the first lie, how many held the cluster with every real endpoint, the
//! `omitted` the replies said, and `tailweight_reply_endpoints_omitted_total` from /metrics.

use super::attacks::{endpoint, report};
use crate::drive::connect;
use crate::fleet::PRINCIPAL_HEADER;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tailweight_wire::protocol::REPORT_PATH;
use tailweight_wire::report::ClusterReport;

/// The endpoints the liar makes up: the most a cluster holds (2,048) less two.
pub(crate) const MADE_UP: usize = 2_046;
const REAL: usize = 3;
const CALLERS: usize = 4;
const ROUNDS: u64 = 12;
const ATTACK_FROM: u64 = 3;
const CLUSTER: &str = "outbound|8080||shop.prod.svc.cluster.local";
const OMITTED_METRIC: &str = "tailweight_reply_endpoints_omitted_total";

/// What the honest callers got back once the liar had reported.
#[derive(Debug, Default, Serialize)]
pub(crate) struct MadeUpResult {
    pub made_up_endpoints: usize,
    pub real_endpoints: usize,
    pub honest_callers: usize,
    /// Honest replies after the first lie, and of them those holding every real endpoint.
    pub honest_replies: u64,
    pub replies_with_every_real_endpoint: u64,
    /// The largest `omitted` one of those replies said for the cluster.
    pub max_omitted_in_a_reply: u64,
    /// The liar's reports and how many were accepted (200).
    pub liar_reports: u64,
    pub liar_accepted: u64,
    /// `tailweight_reply_endpoints_omitted_total` at the end.
    pub omitted_metric: Option<f64>,
}

fn real(e: usize) -> String {
    format!("10.77.0.{}:8080", e + 1)
}

fn made_up(e: usize) -> String {
    format!("10.99.{}.{}:8080", e / 250, e % 250 + 1)
}

fn caller(i: usize) -> String {
    format!("spiffe://cluster.local/ns/prod/sa/front{i}")
}

const LIAR: &str = "spiffe://cluster.local/ns/dev/sa/mallory";

/// A caller's report after `round` seconds: 50 requests a second to each real endpoint.
fn honest_report(i: usize, round: u64) -> Vec<u8> {
    let endpoints = (0..REAL).map(|e| endpoint(real(e), 50 * round, 0, 10_000, 1)).collect();
    report(format!("front{i}"), vec![ClusterReport { name: CLUSTER.into(), endpoints }])
}

/// The liar's report: every made-up endpoint fast and busy.
fn lie(round: u64) -> Vec<u8> {
    let endpoints = (0..MADE_UP).map(|e| endpoint(made_up(e), 50 * round, 0, 1_000, 1)).collect();
    report("mallory".into(), vec![ClusterReport { name: CLUSTER.into(), endpoints }])
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// POST a report as `principal`: the status and the reply (0 and empty: no answer).
async fn exchange(sender: &mut Sender, principal: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let Ok(request) = hyper::Request::post(REPORT_PATH)
        .header(hyper::header::HOST, "aggregator")
        .header(PRINCIPAL_HEADER, principal)
        .body(Full::new(Bytes::from(body)))
    else {
        return (0, Vec::new());
    };
    if sender.ready().await.is_err() {
        return (0, Vec::new());
    }
    match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
            (status, body)
        }
        Err(_) => (0, Vec::new()),
    }
}

/// The cluster in a reply: (every real endpoint present, its `omitted`).
fn real_kept(reply: &[u8]) -> (bool, u64) {
    let Ok(page) = serde_json::from_slice::<serde_json::Value>(reply) else { return (false, 0) };
    let clusters = page["clusters"].as_array().cloned().unwrap_or_default();
    let Some(cluster) = clusters.iter().find(|c| c["name"] == CLUSTER) else { return (false, 0) };
    let endpoints = cluster["endpoints"].as_array().cloned().unwrap_or_default();
    let kept = (0..REAL).all(|e| endpoints.iter().any(|x| x["address"] == real(e).as_str()));
    (kept, cluster["omitted"].as_u64().unwrap_or(0))
}

/// The rounds, one a second; the omission counter read from /metrics at the end.
pub(crate) async fn run(addr: SocketAddr) -> Result<MadeUpResult, String> {
    let mut sender = connect(addr).await?;
    let mut out = MadeUpResult {
        made_up_endpoints: MADE_UP,
        real_endpoints: REAL,
        honest_callers: CALLERS,
        ..MadeUpResult::default()
    };
    let start = Instant::now();
    for round in 1..=ROUNDS {
        if round >= ATTACK_FROM {
            out.liar_reports += 1;
            out.liar_accepted += u64::from(exchange(&mut sender, LIAR, lie(round)).await.0 == 200);
        }
        for i in 0..CALLERS {
            let (status, reply) = exchange(&mut sender, &caller(i), honest_report(i, round)).await;
            // A reply reflects the views of the last recompute: count those a second after the lie.
            if round > ATTACK_FROM {
                let (kept, omitted) = real_kept(&reply);
                out.honest_replies += 1;
                out.replies_with_every_real_endpoint += u64::from(status == 200 && kept);
                out.max_omitted_in_a_reply = out.max_omitted_in_a_reply.max(omitted);
            }
        }
        let next = start + Duration::from_secs(round);
        tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
    }
    let page = super::observe::get(addr, "/metrics").await.unwrap_or_default();
    out.omitted_metric = page
        .lines()
        .find(|l| l.starts_with(OMITTED_METRIC))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_keeps_the_cluster_only_with_every_real_endpoint() {
        let all = format!(
            r#"{{"clusters":[{{"name":"{CLUSTER}","omitted":7,"endpoints":[{{"address":"{}"}},{{"address":"{}"}},{{"address":"{}"}}]}}]}}"#,
            real(0),
            real(1),
            real(2)
        );
        assert_eq!(real_kept(all.as_bytes()), (true, 7));
        let short = format!(r#"{{"clusters":[{{"name":"{CLUSTER}","endpoints":[{{"address":"{}"}}]}}]}}"#, real(0));
        assert_eq!(real_kept(short.as_bytes()), (false, 0));
        assert_eq!(real_kept(br#"{"clusters":[]}"#), (false, 0));
    }

    #[test]
    fn the_lie_fits_a_report_body() {
        assert!(lie(1_000).len() < 512 << 10);
    }
}
