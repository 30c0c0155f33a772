//! Driving reports at the aggregator over keep-alive HTTP/1.1 connections, one step at a time:
//! what was accepted, how fast, and what it cost the server.

use crate::fleet::{Fleet, PRINCIPAL_HEADER};
use crate::process::cpu_seconds;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Step {
    pub target_rps: Option<u64>,
    pub secs: f64,
    pub sent: u64,
    pub accepted: u64,
    pub refused: u64,
    pub failed: u64,
    pub accepted_per_s: f64,
    pub server_cpu_cores: Option<f64>,
    pub accepted_per_core_s: Option<f64>,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// The refused reports by status.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub refused_by_status: BTreeMap<u16, u64>,
}

#[derive(Default)]
pub(crate) struct Tally {
    latencies_us: Vec<u32>,
    accepted: u64,
    refused: u64,
    refused_by_status: BTreeMap<u16, u64>,
    failed: u64,
}

pub(crate) async fn connect(addr: SocketAddr) -> Result<http1::SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One connection's share: `count` reports (or until `deadline`), paced at `period` if given.
pub(crate) async fn drive(
    addr: SocketAddr,
    fleet: Arc<Fleet>,
    period: Option<Duration>,
    count: Option<u64>,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut sender = match connect(addr).await {
        Ok(s) => s,
        Err(_) => {
            tally.failed += 1;
            return tally;
        }
    };
    let start = Instant::now();
    let mut k: u64 = 0;
    while Instant::now() < deadline && count.is_none_or(|c| k < c) {
        if let Some(p) = period {
            let due = start + p * k as u32;
            let now = Instant::now();
            if due > now + Duration::from_millis(1) {
                tokio::time::sleep(due - now).await;
            }
        }
        k += 1;
        let (reporter, body) = fleet.next_report();
        let mut request = hyper::Request::post("/v1/report")
            .header(hyper::header::HOST, "aggregator")
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(principal) = fleet.principal(reporter) {
            request = request.header(PRINCIPAL_HEADER, principal);
        }
        let request = request.body(Full::new(Bytes::from(body)));
        let Ok(request) = request else {
            tally.failed += 1;
            continue;
        };
        let sent = Instant::now();
        if sender.ready().await.is_err() {
            tally.failed += 1;
            match connect(addr).await {
                Ok(s) => sender = s,
                Err(_) => break,
            }
            continue;
        }
        match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let ok = status == 200;
                let complete = response.into_body().collect().await.is_ok();
                tally.latencies_us.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                match (ok, complete) {
                    (true, true) => tally.accepted += 1,
                    (false, true) => {
                        tally.refused += 1;
                        *tally.refused_by_status.entry(status).or_default() += 1;
                    }
                    _ => tally.failed += 1,
                }
            }
            Err(_) => {
                tally.failed += 1;
                match connect(addr).await {
                    Ok(s) => sender = s,
                    Err(_) => break,
                }
            }
        }
    }
    tally
}

pub(crate) async fn run_step(
    addr: SocketAddr,
    fleet: &Arc<Fleet>,
    connections: usize,
    rate: Option<u64>,
    count: Option<u64>,
    secs: u64,
    server: Option<(u32, f64)>,
) -> Step {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let period = rate.map(|r| Duration::from_secs_f64(connections as f64 / r.max(1) as f64));
    let per_conn = count.map(|c| c.div_ceil(connections as u64));
    let cpu_before = server.and_then(|(pid, t)| cpu_seconds(pid, t));
    let started = Instant::now();
    let tasks: Vec<_> =
        (0..connections).map(|_| tokio::spawn(drive(addr, fleet.clone(), period, per_conn, deadline))).collect();
    let mut all = Tally::default();
    for t in tasks {
        if let Ok(mut tally) = t.await {
            all.latencies_us.append(&mut tally.latencies_us);
            all.accepted += tally.accepted;
            all.refused += tally.refused;
            for (status, n) in tally.refused_by_status {
                *all.refused_by_status.entry(status).or_default() += n;
            }
            all.failed += tally.failed;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu_after = server.and_then(|(pid, t)| cpu_seconds(pid, t));
    all.latencies_us.sort_unstable();
    let q = |p: f64| -> f64 {
        if all.latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((all.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        all.latencies_us.get(i).copied().unwrap_or(0) as f64 / 1e3
    };
    let accepted_per_s = all.accepted as f64 / secs;
    let cores = cpu_before.zip(cpu_after).map(|(b, a)| (a - b) / secs);
    Step {
        target_rps: rate,
        secs,
        sent: all.latencies_us.len() as u64 + all.failed,
        accepted: all.accepted,
        refused: all.refused,
        failed: all.failed,
        accepted_per_s,
        server_cpu_cores: cores,
        accepted_per_core_s: cores.filter(|c| *c > 0.05).map(|c| accepted_per_s / c),
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: all.latencies_us.last().copied().unwrap_or(0) as f64 / 1e3,
        refused_by_status: all.refused_by_status,
    }
}

pub(crate) async fn wait_healthy(addr: SocketAddr) -> Result<(), String> {
    for _ in 0..100 {
        if let Ok(mut s) = connect(addr).await {
            let req = hyper::Request::get("/readyz").header(hyper::header::HOST, "x").body(Full::new(Bytes::new()));
            if let Ok(req) = req {
                if let Ok(r) = s.send_request(req).await {
                    if r.status() == hyper::StatusCode::OK {
                        return Ok(());
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("aggregator at {addr} did not become ready"))
}
