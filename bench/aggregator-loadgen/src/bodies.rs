//! The worst bodies (`--worst-bodies`, part of `make bench-hostile`): for each body, a fresh
//! aggregator at each `--memory-limits-mib`, `--body-rounds` rounds of eight concurrent POSTs of it
//! from two principals (four each: the per-principal cap), then its peak RSS (the kernel's
//! high-water mark, VmHWM) against the budget. Every body is at most the default 512 KiB limit.

use crate::drive::{connect, wait_healthy};
use crate::fleet::PRINCIPAL_HEADER;
use crate::process::{rss_kib, start_server};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The largest body the aggregator takes by default.
const BODY_BYTES: usize = 512 * 1024;
/// Concurrent requests per round, over two principals.
const CONCURRENT: usize = 8;

#[derive(Debug, Serialize)]
pub(crate) struct BodyRow {
    pub body: String,
    pub bytes: usize,
    pub memory_limit_mib: u64,
    pub rounds: usize,
    pub idle_rss_mib: f64,
    pub peak_rss_mib: f64,
    pub outcomes: BTreeMap<String, u64>,
}

/// The markdown section's title.
pub(crate) const TITLE: &str = "\n## Worst bodies";

const HEAD: &str = r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"#;

/// Repeat `item` (joined by `sep`) after `prefix` while the body stays within `BODY_BYTES` once
/// `suffix` is added.
fn filled(prefix: &str, item: impl Fn(usize) -> String, sep: &str, suffix: &str) -> Vec<u8> {
    let mut body = prefix.to_string();
    for i in 0.. {
        let next = item(i);
        if body.len() + sep.len() + next.len() + suffix.len() > BODY_BYTES {
            break;
        }
        if i > 0 {
            body.push_str(sep);
        }
        body.push_str(&next);
    }
    body.push_str(suffix);
    body.into_bytes()
}

fn endpoint(i: usize) -> String {
    format!(
        r#"{{"address":"10.{}.{}.{}:80","requests":0,"errors":0,"latency_sum_us":0,"inflight":0,"latency_ewma_us":0,"latency_age_ms":0}}"#,
        i >> 16,
        (i >> 8) & 255,
        i & 255
    )
}

/// A cluster of `n` distinct endpoints, as JSON (`{"name":..,"endpoints":[..]}`).
fn cluster_json(c: usize, n: usize) -> String {
    let endpoints: Vec<String> = (0..n).map(|k| endpoint(c * n + k)).collect();
    format!(r#"{{"name":"outbound|80||c{c}","endpoints":[{}]}}"#, endpoints.join(","))
}

fn cluster_of(c: usize, n: usize) -> Vec<u8> {
    format!(r#"{HEAD}"clusters":[{}]}}"#, cluster_json(c, n)).into_bytes()
}

/// Sixteen clusters (the cap) with as many endpoints each as fit in the body: the most a valid
/// report parses into.
fn sixteen_clusters() -> Vec<u8> {
    let per = (BODY_BYTES - HEAD.len() - 40) / 16 / endpoint(0xFF_FFFF).len().saturating_add(1) - 1;
    let clusters: Vec<String> = (0..16).map(|c| cluster_json(c, per)).collect();
    format!(r#"{HEAD}"clusters":[{}]}}"#, clusters.join(",")).into_bytes()
}

/// The bodies: the known attack first, then what else could make a parser hold memory.
pub(crate) fn worst_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let clusters = |suffix: &str| format!(r#"{HEAD}"clusters":[{suffix}"#);
    let deep = {
        let n = (BODY_BYTES - HEAD.len() - 40) / 2;
        format!(r#"{HEAD}"x":{}{}"clusters":[]}}"#, "[".repeat(n), "]".repeat(n)).into_bytes()
    };
    let long_string = {
        let n = BODY_BYTES - HEAD.len() - 40;
        format!(r#"{{"version":1,"reporter":"{}","incarnation":1,"interval_ms":1000,"clusters":[]}}"#, "a".repeat(n))
            .into_bytes()
    };
    let escapes = {
        let n = (BODY_BYTES - 120) / 6;
        format!(r#"{HEAD}"clusters":[{{"name":"{}","endpoints":[]}}]}}"#, "\\u00e9".repeat(n)).into_bytes()
    };
    vec![
        ("empty clusters", filled(&clusters(""), |_| r#"{"name":"","endpoints":[]}"#.into(), ",", "]}")),
        ("endpoints, one cluster (2,048: the cap)", cluster_of(0, 2_048)),
        ("endpoints, 16 clusters (the most that fit)", sixteen_clusters()),
        ("deep nesting", deep),
        ("long string", long_string),
        ("escapes", escapes),
        ("many keys", filled(HEAD, |i| format!(r#""k{i}":0"#), ",", r#","clusters":[]}"#)),
        ("many numbers", filled(&format!(r#"{HEAD}"x":["#), |_| "0".into(), ",", r#"],"clusters":[]}"#)),
        ("huge exponents", filled(&format!(r#"{HEAD}"x":["#), |_| "1e99999999".into(), ",", r#"],"clusters":[]}"#)),
        ("duplicated keys", filled("{", |_| r#""reporter":"r""#.into(), ",", "}")),
    ]
}

/// One body at one limit: a fresh aggregator, `rounds` rounds of eight concurrent POSTs.
async fn measure(
    binary: &Path,
    cpu: usize,
    limit_mib: u64,
    rounds: usize,
    name: &str,
    body: &[u8],
) -> Result<BodyRow, String> {
    let args = ["--identity=header:x-tailweight-principal".to_string(), format!("--memory-limit-mib={limit_mib}")];
    let (server, addr) = start_server(&binary.to_path_buf(), cpu, &args)?;
    let pid = server.child.id();
    wait_healthy(addr).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = rss_kib(pid).map_or(0, |(rss, _)| rss);
    let body = Bytes::copy_from_slice(body);
    let mut outcomes = BTreeMap::new();
    for _ in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for k in 0..CONCURRENT {
            tasks.spawn(post(addr, format!("attacker{}", k % 2), body.clone()));
        }
        while let Some(Ok(outcome)) = tasks.join_next().await {
            *outcomes.entry(outcome).or_default() += 1;
        }
    }
    let peak = rss_kib(pid).map_or(0, |(_, hwm)| hwm);
    drop(server);
    Ok(BodyRow {
        body: name.to_string(),
        bytes: body.len(),
        memory_limit_mib: limit_mib,
        rounds,
        idle_rss_mib: idle as f64 / 1024.0,
        peak_rss_mib: peak as f64 / 1024.0,
        outcomes,
    })
}

async fn post(addr: SocketAddr, principal: String, body: Bytes) -> String {
    let Ok(mut sender) = connect(addr).await else { return "error".into() };
    let Ok(request) = hyper::Request::post("/v1/report")
        .header(hyper::header::HOST, "aggregator")
        .header(PRINCIPAL_HEADER, principal)
        .body(Full::new(body))
    else {
        return "error".into();
    };
    match tokio::time::timeout(Duration::from_secs(30), sender.send_request(request)).await {
        Ok(Ok(response)) => {
            let status = response.status().as_u16().to_string();
            let _ = response.into_body().collect().await;
            status
        }
        Ok(Err(_)) => "closed".into(),
        Err(_) => "timeout".into(),
    }
}

/// Every body at every limit, and the markdown section for them.
pub(crate) async fn run(
    binary: &Path,
    cpu: usize,
    limits: &[u64],
    rounds: usize,
) -> Result<(Vec<BodyRow>, String), String> {
    let mut rows = Vec::new();
    for (name, body) in worst_bodies() {
        for &limit in limits {
            eprintln!("worst bodies: {name} at {limit} MiB");
            rows.push(measure(binary, cpu, limit, rounds, name, &body).await?);
        }
    }
    let mut md = format!("{TITLE}: peak RSS against the budget\n\n");
    md.push_str(&format!(
        "For each body a fresh aggregator (one worker thread, pinned, `--identity=header:x-tailweight-principal`), \
         {rounds} rounds of {CONCURRENT} concurrent POSTs of it from two principals; peak = VmHWM at the end; \
         one run per row.\n\n"
    ));
    md.push_str("| body | bytes | --memory-limit-mib | idle RSS MiB | peak RSS MiB | peak <= limit | answers |\n");
    md.push_str("|---|---:|---:|---:|---:|---|---|\n");
    for r in &rows {
        let answers: Vec<String> = r.outcomes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {} | {} |\n",
            r.body,
            r.bytes,
            r.memory_limit_mib,
            r.idle_rss_mib,
            r.peak_rss_mib,
            if r.peak_rss_mib <= r.memory_limit_mib as f64 { "yes" } else { "NO" },
            answers.join(", ")
        ));
    }
    Ok((rows, md))
}
