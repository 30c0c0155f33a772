//! The hostile run (`--hostile`, `make bench-hostile`): honest reporters report at a steady rate;
//! after a baseline, every attack runs at once while they go on, and the run reports what the
//! honest reporters got (accepted share, latency), what the aggregator held (RSS against the pod's
//! limit) and how far the attackers moved the weights of the clusters they lied about.
//!
//! The aggregator runs with `--identity header:x-tailweight-principal` (the mesh's identity, as a
//! header the driver sets): honest reporters are spread over `--principals` service accounts, the
//! attackers are four principals, `mallory`, `trudy`, `oscar` and `eve`, with as many reporter ids
//! as they like.
//! Attacks, all bounded in rate and stopped at the deadline:
//! - lies: each liar id reports the attacked clusters with every endpoint failing, all traffic on
//!   one endpoint, a million requests in flight on another, an impossibly fast third, the rest
//!   withheld, and fake endpoints beside them (mallory and trudy both);
//! - maximal reports: the largest bodies the limits allow, of fake clusters (oscar);
//! - identity churn: a new reporter name for every one-line report (oscar);
//! - garbage and truncated bodies (eve): random bytes; bodies cut short, then closed or left
//!   hanging;
//! - no identity: reports without the principal header;
//! - slowloris: connections that send their headers a byte a second.

use crate::{connect, cpu_seconds, rss_kib, run_step, Fleet, LoadgenArgs, Step};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailweight_wire::protocol::{MAX_INFLIGHT, VERSION};
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The header the aggregator takes the principal from in this run.
pub const PRINCIPAL_HEADER: &str = "x-tailweight-principal";

/// The attacks' settings.
#[derive(Debug, Clone, clap::Args)]
pub struct AttackArgs {
    /// Seconds of honest reports before the attack (the weights' baseline).
    #[arg(long, default_value_t = 25)]
    baseline_secs: u64,
    /// Seconds of the attack (the honest reports go on).
    #[arg(long, default_value_t = 40)]
    attack_secs: u64,
    /// Clusters the liars report on: the first ones of the fleet (the next as many are the
    /// control, which nobody lies about).
    #[arg(long, default_value_t = 50)]
    attacked_clusters: usize,
    /// Reporter ids each lying principal uses.
    #[arg(long, default_value_t = 8)]
    liar_ids: usize,
    /// Slowloris connections kept open.
    #[arg(long, default_value_t = 128)]
    slowloris: usize,
    /// Honest reports per second.
    #[arg(long, default_value_t = 10_000)]
    honest_rate: u64,
}

/// What one attack sent and what came back, by status (or `closed` / `error`).
#[derive(Debug, Default, Clone, Serialize)]
struct AttackTally {
    sent: u64,
    outcomes: BTreeMap<String, u64>,
}

impl AttackTally {
    fn count(&mut self, outcome: impl Into<String>) {
        *self.outcomes.entry(outcome.into()).or_default() += 1;
    }
}

/// How far the attackers moved one set of clusters' weights (see `moved`).
#[derive(Debug, Default, Clone, Serialize)]
struct Moved {
    clusters: usize,
    endpoints: usize,
    /// The largest relative change of an endpoint's share of its cluster's honest endpoints'
    /// weight, attack over baseline (an ejection that differs counts as 1).
    max_share_change: f64,
    mean_share_change: f64,
    ejections_flipped: usize,
}

#[derive(Debug, Serialize)]
struct HostileResults {
    reporters: usize,
    endpoints_per_reporter: usize,
    clusters: usize,
    honest_principals: usize,
    honest_rate: u64,
    connections: usize,
    server_args: Vec<String>,
    warmup: Step,
    baseline: Step,
    attack: Step,
    honest_accepted_pct: f64,
    honest_p99_ms: f64,
    attacks: BTreeMap<String, AttackTally>,
    /// The attacked clusters, and the control clusters nobody lied about (natural drift).
    weights_moved: Moved,
    weights_moved_control: Moved,
    rss_peak_mib: Option<f64>,
    rss_end_mib: Option<f64>,
    pod_limit_mib: f64,
    /// The aggregator's own counts at the end (`/metrics`).
    aggregator_metrics: BTreeMap<String, f64>,
    machine: Machine,
}

/// How busy the machine was: its load before, and the CPU others used while the attack ran.
#[derive(Debug, Default, Serialize)]
struct Machine {
    cpus: usize,
    loadavg_before: String,
    loadavg_after: String,
    /// CPU the whole machine used during the attack, in cores, and of it the aggregator's and the
    /// driver's.
    busy_cores: Option<f64>,
    aggregator_cores: Option<f64>,
    driver_cores: Option<f64>,
}

/// Total busy jiffies of all CPUs (/proc/stat) and the clock ticks per second.
fn machine_busy() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<f64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let total: f64 = cpu.iter().take(8).sum();
    Some(total - cpu.get(3)? - cpu.get(4).copied().unwrap_or(0.0))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A tiny deterministic generator (xorshift) for garbage: the run is the same every time.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// POST `body` with `principal` (if any) on a keep-alive connection (reconnecting if it broke),
/// and count the answer.
async fn post(
    addr: SocketAddr,
    sender: &mut Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
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
    let mut request = hyper::Request::post("/v1/report").header(hyper::header::HOST, "aggregator");
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
async fn paced(
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

fn report(reporter: String, clusters: Vec<ClusterReport>) -> Vec<u8> {
    let r = Report { version: VERSION, reporter, incarnation: 1, interval_ms: 10_000, clusters };
    write_report(&r)
}

fn endpoint(address: String, requests: u64, errors: u64, latency_us: u64, inflight: u32) -> EndpointReport {
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
    }
}

/// One liar id's report about cluster `c` in its `round`: the lies of the module docs, with
/// cumulative counters that grow so that every report is a window.
fn lie(principal: &str, id: usize, c: usize, round: u64, fake_endpoints: usize) -> Vec<u8> {
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
async fn liars(
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
fn maximal(n: u64) -> Vec<u8> {
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
fn churn(n: u64) -> Vec<u8> {
    let e = endpoint(format!("10.251.{}.{}:8080", n / 250 % 250, n % 250), 1, 0, 1_000, 0);
    report(format!("oscar-churn-{n}"), vec![ClusterReport { name: format!("churn-{}", n % 64), endpoints: vec![e] }])
}

/// Random bytes, sometimes starting like a report.
fn garbage(rng: &mut Xorshift) -> Vec<u8> {
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
async fn truncated(addr: SocketAddr, deadline: Instant) -> AttackTally {
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
async fn slowloris(addr: SocketAddr, connections: usize, deadline: Instant) -> AttackTally {
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
        all.sent += t.sent;
        for (k, v) in t.outcomes {
            *all.outcomes.entry(k).or_default() += v;
        }
    }
    all
}

/// GET `path`, the body as text (None on any failure).
async fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = connect(addr).await.ok()?;
    let request = hyper::Request::get(path).header(hyper::header::HOST, "x").body(Full::new(Bytes::new())).ok()?;
    let response = s.send_request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// Every cluster's endpoints: address -> (weight, ejected), through the pages of /v1/weights.
async fn weights(addr: SocketAddr) -> HashMap<String, HashMap<String, (f64, bool)>> {
    let mut out = HashMap::new();
    let mut after = String::new();
    for _ in 0..1_000 {
        let path = format!("/v1/weights?limit=1024&after={}", percent_encode(&after));
        let Some(page) = get(addr, &path).await else { break };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&page) else { break };
        for c in v["clusters"].as_array().into_iter().flatten() {
            let endpoints = c["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    Some((e["address"].as_str()?.to_string(), (e["weight"].as_f64()?, e["ejected"].as_bool()?)))
                })
                .collect();
            out.insert(c["name"].as_str().unwrap_or_default().to_string(), endpoints);
        }
        match v["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    out
}

/// Query-string encoding of a cluster name (`|` and the rest outside the unreserved set).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

type Snapshot = HashMap<String, HashMap<String, (f64, bool)>>;

/// How far the weights of `clusters` moved from `before` to `after`: per cluster, each honest
/// endpoint's share of the honest endpoints' weight (`w_e / sum w`), after over before, minus 1
/// (an ejection that differs: 1).
fn moved(fleet: &Fleet, clusters: std::ops::Range<usize>, before: &Snapshot, after: &Snapshot) -> Moved {
    let mut m = Moved::default();
    let mut sum = 0.0;
    for c in clusters {
        let name = Fleet::cluster_name(c);
        let (Some(b), Some(a)) = (before.get(&name), after.get(&name)) else { continue };
        let honest: Vec<String> = (0..fleet.endpoints).map(|e| Fleet::address(c, e)).collect();
        let total =
            |s: &HashMap<String, (f64, bool)>| honest.iter().filter_map(|e| s.get(e)).map(|(w, _)| w).sum::<f64>();
        let (tb, ta) = (total(b), total(a));
        m.clusters += 1;
        for e in &honest {
            let (Some((wb, eb)), Some((wa, ea))) = (b.get(e), a.get(e)) else { continue };
            let change = if eb != ea {
                m.ejections_flipped += 1;
                1.0
            } else if tb > 0.0 && ta > 0.0 && *wb > 0.0 {
                ((wa / ta) / (wb / tb) - 1.0).abs()
            } else {
                0.0
            };
            m.endpoints += 1;
            m.max_share_change = m.max_share_change.max(change);
            sum += change;
        }
    }
    m.mean_share_change = if m.endpoints > 0 { sum / m.endpoints as f64 } else { 0.0 };
    m
}

/// The aggregator's counters and gauges of interest, from /metrics.
async fn aggregator_metrics(addr: SocketAddr) -> BTreeMap<String, f64> {
    let page = get(addr, "/metrics").await.unwrap_or_default();
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            [
                "tailweight_reports_",
                "tailweight_requests_shed",
                "tailweight_connections",
                "tailweight_book_bytes",
                "tailweight_principals",
                "tailweight_reporters_live",
                "tailweight_observations",
                "tailweight_endpoints",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter(|l| !l.contains("_bucket") && !l.contains("_sum") && !l.contains("_count"))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

pub async fn run(addr: SocketAddr, pid: Option<u32>, fleet: Arc<Fleet>, args: &LoadgenArgs) -> Result<(), String> {
    let a = &args.attack;
    if 2 * a.attacked_clusters > fleet.clusters {
        return Err(format!(
            "attacked_clusters: {} leaves no control clusters among {}",
            a.attacked_clusters, fleet.clusters
        ));
    }
    let ticks = crate::clock_ticks();
    let server = pid.map(|p| (p, ticks));
    let mut machine = Machine {
        cpus: std::fs::read_to_string("/proc/cpuinfo")
            .map_or(0, |c| c.lines().filter(|l| l.starts_with("processor")).count()),
        loadavg_before: loadavg(),
        ..Machine::default()
    };
    eprintln!("warm-up: {} reporters x {} endpoints", fleet.reporters, fleet.endpoints);
    let warmup = run_step(addr, &fleet, args.connections, None, Some(2 * fleet.reporters as u64), 120, server).await;
    eprintln!("baseline: {} honest reports/s for {} s", a.honest_rate, a.baseline_secs);
    let baseline = run_step(addr, &fleet, args.connections, Some(a.honest_rate), None, a.baseline_secs, server).await;
    let before = weights(addr).await;
    eprintln!("attack: {} s", a.attack_secs);
    let deadline = Instant::now() + Duration::from_secs(a.attack_secs);
    let (busy0, agg0, me0) =
        (machine_busy(), server.and_then(|(p, t)| cpu_seconds(p, t)), cpu_seconds(std::process::id(), ticks));
    let started = Instant::now();
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
    // RSS while it runs (the peak is the kernel's high-water mark, read at the end).
    let sampler = tokio::spawn(async move {
        let mut peak = 0u64;
        while Instant::now() < deadline {
            peak = peak.max(pid.and_then(rss_kib).map_or(0, |(rss, _)| rss));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        peak
    });
    let attack = run_step(addr, &fleet, args.connections, Some(a.honest_rate), None, a.attack_secs, server).await;
    let mut tallies = BTreeMap::new();
    while let Some(Ok((name, tally))) = attacks.join_next().await {
        tallies.insert(name.to_string(), tally);
    }
    let secs = started.elapsed().as_secs_f64();
    let (busy1, agg1, me1) =
        (machine_busy(), server.and_then(|(p, t)| cpu_seconds(p, t)), cpu_seconds(std::process::id(), ticks));
    machine.busy_cores = busy0.zip(busy1).map(|(b0, b1)| (b1 - b0) / ticks / secs);
    machine.aggregator_cores = agg0.zip(agg1).map(|(x, y)| (y - x) / secs);
    machine.driver_cores = me0.zip(me1).map(|(x, y)| (y - x) / secs);
    let _ = sampler.await;
    // The view settles within a couple of recomputes after the last lie.
    let after = weights(addr).await;
    machine.loadavg_after = loadavg();
    let (rss_end_mib, rss_peak_mib) = match pid.and_then(rss_kib) {
        Some((rss, hwm)) => (Some(rss as f64 / 1024.0), Some(hwm as f64 / 1024.0)),
        None => (None, None),
    };
    let honest_sent = attack.accepted + attack.refused + attack.failed;
    let results = HostileResults {
        reporters: fleet.reporters,
        endpoints_per_reporter: fleet.endpoints,
        clusters: fleet.clusters,
        honest_principals: fleet.principals,
        honest_rate: a.honest_rate,
        connections: args.connections,
        server_args: args.server_args.clone(),
        honest_accepted_pct: 100.0 * attack.accepted as f64 / honest_sent.max(1) as f64,
        honest_p99_ms: attack.p99_ms,
        warmup,
        baseline,
        attack,
        attacks: tallies,
        weights_moved: moved(&fleet, 0..attacked, &before, &after),
        weights_moved_control: moved(&fleet, attacked..2 * attacked, &before, &after),
        rss_peak_mib,
        rss_end_mib,
        pod_limit_mib: 256.0,
        aggregator_metrics: aggregator_metrics(addr).await,
        machine,
    };
    crate::publish(args, &results, markdown(&results))
}

fn markdown(r: &HostileResults) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut s = String::from("# Aggregator under attack\n\n");
    s.push_str(&format!(
        "{} honest reporters x {} endpoints ({} clusters, {} principals) report {} times a second over {} \
         keep-alive connections; after a {:.0} s baseline, every attack runs for {:.0} s while they go on. The \
         aggregator: one worker thread pinned to one core, `{}`.\n\n",
        r.reporters,
        r.endpoints_per_reporter,
        r.clusters,
        r.honest_principals,
        r.honest_rate,
        r.connections,
        r.baseline.secs,
        r.attack.secs,
        r.server_args.join(" ")
    ));
    s.push_str("| | result | target |\n|---|---:|---:|\n");
    s.push_str(&format!(
        "| honest reports accepted during the attack | {:.3}% ({} of {}) | 100% |\n",
        r.honest_accepted_pct,
        r.attack.accepted,
        r.attack.accepted + r.attack.refused + r.attack.failed
    ));
    s.push_str(&format!(
        "| their p99 latency | {:.2} ms (baseline {:.2} ms) | < 5 ms |\n",
        r.honest_p99_ms, r.baseline.p99_ms
    ));
    s.push_str(&format!(
        "| aggregator RSS, peak | {} MiB | < {:.0} MiB (the pod's limit) |\n",
        opt(r.rss_peak_mib, 1),
        r.pod_limit_mib
    ));
    let moved = |m: &Moved| {
        format!(
            "{:.2}% (mean {:.3}%), {} ejections flipped",
            100.0 * m.max_share_change,
            100.0 * m.mean_share_change,
            m.ejections_flipped
        )
    };
    s.push_str(&format!(
        "| weights moved by the attackers (largest change of an endpoint's share, {} attacked clusters) | {} | <= 5% |\n",
        r.weights_moved.clusters,
        moved(&r.weights_moved)
    ));
    s.push_str(&format!(
        "| the same in {} control clusters nobody lied about (drift) | {} | |\n\n",
        r.weights_moved_control.clusters,
        moved(&r.weights_moved_control)
    ));
    s.push_str("| attack | sent | outcomes |\n|---|---:|---|\n");
    for (name, t) in &r.attacks {
        let outcomes: Vec<String> = t.outcomes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        s.push_str(&format!("| {name} | {} | {} |\n", t.sent, outcomes.join(", ")));
    }
    s.push_str(&format!(
        "\nHonest reports: baseline {:.0}/s accepted, p50 {:.2} ms, p99 {:.2} ms; attack {:.0}/s accepted, p50 {:.2} ms, \
         p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms; refused {}, failed {}.\n",
        r.baseline.accepted_per_s,
        r.baseline.p50_ms,
        r.baseline.p99_ms,
        r.attack.accepted_per_s,
        r.attack.p50_ms,
        r.attack.p99_ms,
        r.attack.p999_ms,
        r.attack.max_ms,
        r.attack.refused,
        r.attack.failed
    ));
    let m = &r.machine;
    s.push_str(&format!(
        "Machine: {} CPUs, load average {} before and {} after; during the attack the machine was busy {} cores, \
         of which the aggregator {} and this driver {} (the rest: other work on the shared machine).\n",
        m.cpus,
        m.loadavg_before,
        m.loadavg_after,
        opt(m.busy_cores, 2),
        opt(m.aggregator_cores, 2),
        opt(m.driver_cores, 2)
    ));
    s.push_str("\nAggregator counters at the end (non-zero):\n\n```\n");
    for (k, v) in &r.aggregator_metrics {
        s.push_str(&format!("{k} {v}\n"));
    }
    s.push_str("```\n");
    s
}
