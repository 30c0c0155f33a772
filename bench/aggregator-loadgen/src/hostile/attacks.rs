//! The attacks (see the module docs of `hostile`), each bounded in rate and stopped at its
//! deadline, and what each got back.

use crate::args::AttackArgs;
use crate::drive::connect;
use crate::fleet::{Fleet, PRINCIPAL_HEADER};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tailweight_wire::protocol::{MAX_INFLIGHT, VERSION};
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one attack sent and what came back, by status (or `closed` / `error`).
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct AttackTally {
    pub sent: u64,
    pub outcomes: BTreeMap<String, u64>,
}

impl AttackTally {
    pub(crate) fn count(&mut self, outcome: impl Into<String>) {
        *self.outcomes.entry(outcome.into()).or_default() += 1;
    }

    /// Add what `other` sent and got.
    pub(crate) fn absorb(&mut self, other: AttackTally) {
        self.sent += other.sent;
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
    }
}

/// A tiny deterministic generator (xorshift) for garbage: the run is the same every time.
pub(crate) struct Xorshift(pub u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// POST `body` with `principal` (if any) to the report path on a keep-alive connection
/// (reconnecting if it broke), and count the answer.
pub(crate) async fn post(
    addr: SocketAddr,
    sender: &mut Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    principal: Option<&str>,
    body: Vec<u8>,
    tally: &mut AttackTally,
) {
    send(addr, sender, hyper::Request::post("/v1/report"), principal, body, tally).await
}

/// Send `request` with `principal` (if any) and `body` on a keep-alive connection (reconnecting
/// if it broke), and count the answer: its status, `closed` or `error` (no connection).
pub(crate) async fn send(
    addr: SocketAddr,
    sender: &mut Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
    request: hyper::http::request::Builder,
    principal: Option<&str>,
    body: Vec<u8>,
    tally: &mut AttackTally,
) {
    tally.sent += 1;
    if sender.as_mut().is_none_or(|s| s.is_closed()) {
        *sender = connect(addr).await.ok();
    }
    let Some(s) = sender.as_mut() else {
        tally.count("error");
        return;
    };
    let mut request = request.header(hyper::header::HOST, "aggregator");
    if let Some(p) = principal {
        request = request.header(PRINCIPAL_HEADER, p);
    }
    let Ok(request) = request.body(Full::new(Bytes::from(body))) else { return };
    if s.ready().await.is_err() {
        *sender = None;
        tally.count("closed");
        return;
    }
    match s.send_request(request).await {
        Ok(response) => {
            let status = response.status().as_u16().to_string();
            let _ = response.into_body().collect().await;
            tally.count(status);
        }
        Err(_) => {
            *sender = None;
            tally.count("closed");
        }
    }
}

/// Run `make_body(n)` every `period` until `deadline`, as `principal`.
pub(crate) async fn paced(
    addr: SocketAddr,
    principal: Option<&str>,
    period: Duration,
    deadline: Instant,
    mut make_body: impl FnMut(u64) -> Vec<u8>,
) -> AttackTally {
    let mut tally = AttackTally::default();
    let mut sender = None;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut n = 0u64;
    while Instant::now() < deadline {
        ticker.tick().await;
        post(addr, &mut sender, principal, make_body(n), &mut tally).await;
        n += 1;
    }
    tally
}

pub(crate) fn report(reporter: String, clusters: Vec<ClusterReport>) -> Vec<u8> {
    let r = Report { version: VERSION, reporter, incarnation: 1, interval_ms: 10_000, clusters };
    write_report(&r)
}

pub(crate) fn endpoint(address: String, requests: u64, errors: u64, latency_us: u64, inflight: u32) -> EndpointReport {
    EndpointReport {
        address,
        requests,
        errors,
        latency_sum_us: requests.saturating_sub(errors).saturating_mul(latency_us),
        inflight,
        latency_ewma_us: latency_us,
        latency_age_ms: 10,
        cpu: None,
        cpu_age_ms: None,
        seen_age_ms: Some(10),
        counted_ms: None,
    }
}

/// One liar id's report about cluster `c` in its `round`: the lies of the module docs, with
/// cumulative counters that grow so that every report is a window.
pub(crate) fn lie(principal: &str, id: usize, c: usize, round: u64, fake_endpoints: usize) -> Vec<u8> {
    let huge = 1_000_000 * round;
    let mut endpoints = vec![
        endpoint(Fleet::address(c, 0), huge, huge, 5_000, 0),
        endpoint(Fleet::address(c, 1), huge, 0, 1_000, 0),
        endpoint(Fleet::address(c, 2), 100 * round, 0, 1_000, MAX_INFLIGHT),
        endpoint(Fleet::address(c, 3), huge, 0, 1, 0),
    ];
    endpoints
        .extend((0..fake_endpoints).map(|i| endpoint(format!("10.250.{}.{}:8080", id % 250, i % 250), huge, 0, 1, 0)));
    report(format!("{principal}-liar-{id}"), vec![ClusterReport { name: Fleet::cluster_name(c), endpoints }])
}

/// A liar: `ids` reporter ids of `principal`, each reporting every attacked cluster every 5 s.
pub(crate) async fn liars(
    addr: SocketAddr,
    principal: &'static str,
    ids: usize,
    attacked: usize,
    deadline: Instant,
) -> AttackTally {
    let reports_per_round = (ids * attacked).max(1) as u64;
    let period = Duration::from_secs_f64(5.0 / reports_per_round as f64);
    paced(addr, Some(principal), period, deadline, |n| {
        let (round, at) = (n / reports_per_round + 1, (n % reports_per_round) as usize);
        lie(principal, at % ids, at / ids, round, 10)
    })
    .await
}

/// The largest reports the limits allow (16 clusters of 128 endpoints with the longest
/// addresses, about 400 KB), of fake clusters.
pub(crate) fn maximal(n: u64) -> Vec<u8> {
    let clusters = (0..16)
        .map(|c| ClusterReport {
            name: format!("outbound|8080||oscar-{n}-{c}.fake.svc.cluster.local"),
            endpoints: (0..128)
                .map(|e| {
                    let address = format!("[2001:db8:ffff:ffff:ffff:{:04x}:{c:04x}:{e:04x}]:65535", n % 65_536);
                    endpoint(address, 1_000, 10, 5_000, 1)
                })
                .collect(),
        })
        .collect();
    report(format!("oscar-max-{n}"), clusters)
}

/// A one-line report from a reporter name never seen before.
pub(crate) fn churn(n: u64) -> Vec<u8> {
    let e = endpoint(format!("10.251.{}.{}:8080", n / 250 % 250, n % 250), 1, 0, 1_000, 0);
    report(format!("oscar-churn-{n}"), vec![ClusterReport { name: format!("churn-{}", n % 64), endpoints: vec![e] }])
}

/// Random bytes, sometimes starting like a report.
pub(crate) fn garbage(rng: &mut Xorshift) -> Vec<u8> {
    let len = (rng.next() % 4_096) as usize;
    let mut body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    if rng.next() % 2 == 0 {
        let head = b"{\"version\":1,\"reporter\":\"eve\",\"clusters\":[{\"name\":";
        body.splice(0..0, head.iter().copied());
    }
    body
}

/// Bodies cut short: headers promising 20,000 bytes, 2,000 sent, then the connection closed
/// (every other one) or left hanging until the server answers or closes it.
pub(crate) async fn truncated(addr: SocketAddr, deadline: Instant) -> AttackTally {
    let mut tally = AttackTally::default();
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    let mut hanging = tokio::task::JoinSet::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        ticker.tick().await;
        n += 1;
        tally.sent += 1;
        let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
            tally.count("error");
            continue;
        };
        let head = format!(
            "POST /v1/report HTTP/1.1\r\nhost: x\r\n{PRINCIPAL_HEADER}: eve\r\ncontent-length: 20000\r\n\r\n{{\"version\":1,"
        );
        let mut request = head.into_bytes();
        request.resize(request.len() + 2_000, b' ');
        if tcp.write_all(&request).await.is_err() {
            tally.count("closed");
            continue;
        }
        if n % 2 == 0 || hanging.len() >= 16 {
            tally.count("cut");
            continue;
        }
        hanging.spawn(async move {
            let mut answer = Vec::new();
            let until = tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut answer)).await;
            match (until, answer.get(9..12)) {
                (Ok(_), Some(status)) => String::from_utf8_lossy(status).into_owned(),
                (Ok(_), None) => "closed".to_string(),
                (Err(_), _) => "hung".to_string(),
            }
        });
        while let Some(done) = hanging.try_join_next() {
            tally.count(done.unwrap_or_else(|_| "error".into()));
        }
    }
    while let Some(done) = hanging.join_next().await {
        tally.count(done.unwrap_or_else(|_| "error".into()));
    }
    tally
}

/// Slowloris: `connections` connections that send a request line and then a header byte a
/// second; one that the server closes is opened again.
pub(crate) async fn slowloris(addr: SocketAddr, connections: usize, deadline: Instant) -> AttackTally {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..connections {
        set.spawn(async move {
            let mut tally = AttackTally::default();
            while Instant::now() < deadline {
                tally.sent += 1;
                let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
                    tally.count("error");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                };
                let mut open = tcp.write_all(b"POST /v1/report HTTP/1.1\r\nhost: x\r\nx-slow: ").await.is_ok();
                let opened = Instant::now();
                while open && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    open = tcp.write_all(b"x").await.is_ok();
                    let mut probe = [0u8; 64];
                    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(1), tcp.read(&mut probe)).await {
                        open = n > 0 && open;
                    }
                }
                if Instant::now() < deadline {
                    tally.count(format!("closed after {} s", opened.elapsed().as_secs().min(60) / 5 * 5));
                }
            }
            tally
        });
    }
    let mut all = AttackTally::default();
    while let Some(Ok(t)) = set.join_next().await {
        all.absorb(t);
    }
    all
}

/// Every attack at once, each until `deadline`; each gives its name and what it got.
pub(crate) fn spawn_all(
    addr: SocketAddr,
    a: &AttackArgs,
    deadline: Instant,
) -> tokio::task::JoinSet<(&'static str, AttackTally)> {
    let mut attacks = tokio::task::JoinSet::new();
    let (ids, attacked) = (a.liar_ids, a.attacked_clusters);
    attacks.spawn(async move { ("lies (mallory)", liars(addr, "mallory", ids, attacked, deadline).await) });
    attacks.spawn(async move { ("lies (trudy)", liars(addr, "trudy", ids, attacked, deadline).await) });
    attacks.spawn(async move {
        ("maximal reports", paced(addr, Some("oscar"), Duration::from_millis(500), deadline, maximal).await)
    });
    attacks.spawn(async move {
        ("identity churn", paced(addr, Some("oscar"), Duration::from_millis(5), deadline, churn).await)
    });
    attacks.spawn(async move {
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        (
            "garbage bodies",
            paced(addr, Some("eve"), Duration::from_millis(5), deadline, move |_| garbage(&mut rng)).await,
        )
    });
    attacks.spawn(async move { ("truncated bodies", truncated(addr, deadline).await) });
    attacks.spawn(async move {
        let body = |n: u64| lie("anonymous", n as usize % 4, n as usize % 50, n / 200 + 1, 0);
        ("no identity", paced(addr, None, Duration::from_millis(20), deadline, body).await)
    });
    let loris = a.slowloris;
    attacks.spawn(async move { ("slowloris", slowloris(addr, loris, deadline).await) });
    attacks
}
