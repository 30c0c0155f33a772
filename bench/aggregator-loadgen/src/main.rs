//! Load driver for the aggregator benchmark: many simulated sidecars POST real v1 reports (cumulative
//! counters that grow) at rising rates over keep-alive HTTP/1.1 connections, and it measures accepted
//! reports/s, handling latency (send to full response), the server's CPU use, and its RSS.
//!
//! With `--aggregator PATH` it starts the aggregator itself (pinned with `taskset -c SERVER_CPU`,
//! `--worker-threads 1`, its own process group, stopped by PID at the end, even on failure).
//! Pin this driver to another core yourself (`taskset -c 0 tailweight-loadgen ...`).

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailweight_wire::protocol::VERSION;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

mod hostile;

#[derive(Debug, Parser)]
#[command(name = "tailweight-loadgen", about = "Benchmark driver for tailweight-aggregator")]
struct LoadgenArgs {
    /// Start this aggregator binary (else use --target).
    #[arg(long)]
    aggregator: Option<PathBuf>,
    /// Core to pin the started aggregator to.
    #[arg(long, default_value_t = 1)]
    server_cpu: usize,
    /// An already running aggregator (host:port), with --server-pid for CPU and RSS.
    #[arg(long)]
    target: Option<SocketAddr>,
    #[arg(long)]
    server_pid: Option<u32>,
    #[arg(long, default_value_t = 10_000)]
    reporters: usize,
    #[arg(long, default_value_t = 20)]
    endpoints: usize,
    /// Clusters the reporters spread over (each reporter reports one cluster of `endpoints`).
    #[arg(long, default_value_t = 500)]
    clusters: usize,
    /// Target report rates, one step each; a final unpaced step measures the maximum.
    #[arg(long, value_delimiter = ',', default_value = "2000,5000,10000,20000,30000")]
    rates: Vec<u64>,
    #[arg(long, default_value_t = 5)]
    step_secs: u64,
    #[arg(long, default_value_t = 32)]
    connections: usize,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    md: Option<PathBuf>,
    /// Also time the handling logic alone (parse, merge, reply, serialise) for this many reports.
    #[arg(long, default_value_t = 200_000)]
    inprocess_reports: u64,
    /// Honest principals (0: none; else each report carries `x-tailweight-principal: sa-<k>`, for
    /// an aggregator started with `--identity header:x-tailweight-principal`); a cluster's
    /// reporters spread over them.
    #[arg(long, default_value_t = 0)]
    principals: usize,
    /// An argument for the started aggregator (repeatable), e.g. `--server-arg=--memory-limit-mib=192`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// The hostile run instead of the rate steps: a baseline of honest reports, then the same with
    /// every attack at once (see hostile.rs).
    #[arg(long)]
    hostile: bool,
    #[command(flatten)]
    attack: hostile::AttackArgs,
}

/// The service's work per report without HTTP: what one core spends on the logic itself.
#[derive(Debug, Clone, Serialize)]
struct InProcess {
    reports: u64,
    us_per_report: f64,
    reports_per_s: f64,
    recompute_ms: f64,
    /// Share of the handling time per phase, percent.
    share_pct: Phases,
}

#[derive(Debug, Clone, Serialize)]
struct Phases {
    parse: f64,
    ingest: f64,
    reply: f64,
}

fn time_inprocess(fleet: &Fleet, reports: u64) -> InProcess {
    use tailweight_weights::{WeightBook, WeightParams};
    use tailweight_wire::protocol::Limits;
    use tailweight_wire::report::read::parse_report;
    let mut book = WeightBook::new(WeightParams::default());
    let limits = Limits::default();
    // Wall time per phase (sums; the shares are what matter, the total is measured in CPU time).
    let phases = std::cell::RefCell::new([0f64; 3]);
    let handle = |book: &mut WeightBook, now: u64| {
        let body = fleet.body();
        let t0 = Instant::now();
        if let Ok(report) = parse_report(&body, &limits) {
            let t1 = Instant::now();
            // As the service does with --identity report: the reporter is its own principal.
            if book.ingest_as(&report, &report.reporter, now).is_ok() {
                let t2 = Instant::now();
                let mut out = Vec::with_capacity(body.len());
                let names = report.clusters.iter().map(|c| c.name.as_str());
                book.reply_plan(&report.reporter, &report.reporter, names, now, usize::MAX).render(&mut out);
                std::hint::black_box(out);
                let t3 = Instant::now();
                let mut p = phases.borrow_mut();
                for (i, (a, b)) in [(t0, t1), (t1, t2), (t2, t3)].into_iter().enumerate() {
                    p[i] += (b - a).as_secs_f64();
                }
                return;
            }
        }
        // A body the service would refuse would make the timing meaningless.
        panic!("in-process timing: a generated report was refused");
    };
    // Register everyone first (twice: counters need a window), as the HTTP warm-up does.
    for i in 0..2 * fleet.reporters as u64 {
        handle(&mut book, 1_000_000 + i);
    }
    let r0 = Instant::now();
    for k in 0..5 {
        book.recompute(5_000_000 + k * 1_000);
    }
    let recompute_ms = r0.elapsed().as_secs_f64() * 1e3 / 5.0;
    // CPU time of this (single-threaded) process, not wall time: the machine is shared, and being
    // preempted is not work. Falls back to wall time where /proc is unavailable.
    let ticks = clock_ticks();
    let me = std::process::id();
    let cpu_now = || cpu_seconds(me, ticks);
    let timed = |f: &mut dyn FnMut()| -> f64 {
        let (c0, t0) = (cpu_now(), Instant::now());
        f();
        match (c0, cpu_now()) {
            (Some(a), Some(b)) => b - a,
            _ => t0.elapsed().as_secs_f64(),
        }
    };
    let total = timed(&mut || {
        for i in 0..reports {
            handle(&mut book, 6_000_000 + i);
        }
    });
    // Making the bodies is the sidecars' work, not the service's: time it alone and take it out.
    let making = timed(&mut || {
        for _ in 0..reports {
            std::hint::black_box(fleet.body());
        }
    });
    let secs = (total - making).max(1e-9);
    let p = *phases.borrow();
    let sum: f64 = p.iter().sum::<f64>().max(1e-12);
    let share = |i: usize| (p[i] / sum * 1000.0).round() / 10.0;
    InProcess {
        reports,
        us_per_report: secs * 1e6 / reports.max(1) as f64,
        reports_per_s: reports as f64 / secs,
        recompute_ms,
        share_pct: Phases { parse: share(0), ingest: share(1), reply: share(2) },
    }
}

/// The aggregator process we started; stopped by PID (its own process group) when dropped.
struct AggregatorProcess {
    child: Child,
}

impl Drop for AggregatorProcess {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{pid}")]).status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        let _ = self.child.wait();
    }
}

fn start_server(binary: &PathBuf, cpu: usize, extra: &[String]) -> Result<(AggregatorProcess, SocketAddr), String> {
    use std::os::unix::process::CommandExt;
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(binary)
        .args(["--listen", &addr.to_string(), "--worker-threads", "1", "--log", "warn"])
        .args(extra)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok((AggregatorProcess { child }, addr))
}

/// VmRSS and VmHWM of a process, in KiB.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds used by a process (all threads) so far.
fn cpu_seconds(pid: u32, ticks_per_s: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_s)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Simulated sidecars: each report advances one reporter's cumulative counters. Each reporter's
/// body is rendered once (by the filter's writer, from a real `Report`) with its counters in fixed-width slots
/// padded by spaces (JSON whitespace); a report then costs a copy and a few integer writes, so
/// the driver is not the bottleneck.
#[derive(Debug)]
struct Fleet {
    reporters: usize,
    endpoints: usize,
    clusters: usize,
    /// Honest principals (0: reports carry none).
    principals: usize,
    next: AtomicU64,
    templates: Vec<Template>,
}

#[derive(Debug)]
struct Template {
    bytes: Vec<u8>,
    /// (offset, width, endpoint index, which counter: 0 requests, 1 errors, 2 latency sum)
    slots: Vec<(usize, usize, usize, u8)>,
}

/// Marker values written where the counters go; replaced by padded slots.
const MARK: [u64; 3] = [9_000_000_001, 9_000_000_002, 9_000_000_000_003];

impl Fleet {
    fn new(reporters: usize, endpoints: usize, clusters: usize, principals: usize) -> Fleet {
        let mut fleet =
            Fleet { reporters, endpoints, clusters, principals, next: AtomicU64::new(0), templates: Vec::new() };
        fleet.templates = (0..reporters).map(|r| fleet.template(r)).collect();
        fleet
    }

    fn report(&self, reporter: usize, counters: impl Fn(usize) -> [u64; 3]) -> Report {
        let cluster = reporter % self.clusters;
        let endpoints = (0..self.endpoints)
            .map(|e| {
                let [requests, errors, latency_sum_us] = counters(e);
                let latency = 1_000 + 100 * e as u64;
                EndpointReport {
                    address: Fleet::address(cluster, e),
                    requests,
                    errors,
                    latency_sum_us,
                    inflight: (e % 5) as u32,
                    latency_ewma_us: latency,
                    latency_age_ms: 20,
                    cpu: None,
                    cpu_age_ms: None,
                    seen_age_ms: Some(20),
                }
            })
            .collect();
        Report {
            version: VERSION,
            reporter: format!("client-{reporter}.bench"),
            incarnation: 1,
            // Slow enough that no reporter expires between its reports at the lowest rate.
            interval_ms: 10_000,
            clusters: vec![ClusterReport { name: Fleet::cluster_name(cluster), endpoints }],
        }
    }

    fn template(&self, reporter: usize) -> Template {
        let json = String::from_utf8(write_report(&self.report(reporter, |_| MARK))).unwrap_or_default();
        let (mut bytes, mut slots) = (Vec::with_capacity(json.len() + 64), Vec::new());
        let mut rest = json.as_str();
        let mut seen = [0usize; 3];
        loop {
            let next = MARK.iter().enumerate().filter_map(|(k, m)| rest.find(&m.to_string()).map(|at| (at, k))).min();
            let Some((at, k)) = next else { break };
            bytes.extend_from_slice(&rest.as_bytes()[..at]);
            let width = MARK[k].to_string().len() + 4;
            slots.push((bytes.len(), width, seen[k], k as u8));
            seen[k] += 1;
            bytes.extend(std::iter::repeat_n(b' ', width));
            rest = &rest[at + MARK[k].to_string().len()..];
        }
        bytes.extend_from_slice(rest.as_bytes());
        Template { bytes, slots }
    }

    /// Endpoint e is (1 + e/10) times slower than endpoint 0; 1% errors.
    fn counters(round: u64, e: usize) -> [u64; 3] {
        let requests = round * 100;
        let errors = round;
        [requests, errors, (requests - errors) * (1_000 + 100 * e as u64)]
    }

    /// The principal reporter `r` reports as: the reporters of one cluster are spread over them.
    fn principal(&self, reporter: usize) -> Option<String> {
        (self.principals > 0).then(|| format!("sa-{}", (reporter / self.clusters) % self.principals))
    }

    fn address(cluster: usize, e: usize) -> String {
        format!("10.{}.{}.{}:8080", cluster / 250, cluster % 250, e + 1)
    }

    fn cluster_name(cluster: usize) -> String {
        format!("outbound|8080||svc-{cluster}.bench.svc.cluster.local")
    }

    fn body(&self) -> Vec<u8> {
        self.next_report().1
    }

    /// The next report: its reporter and body.
    fn next_report(&self) -> (usize, Vec<u8>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let reporter = (n % self.reporters as u64) as usize;
        let round = n / self.reporters as u64 + 1;
        let Some(t) = self.templates.get(reporter) else { return (reporter, Vec::new()) };
        let mut body = t.bytes.clone();
        for &(at, width, e, k) in &t.slots {
            let value = Fleet::counters(round, e)[usize::from(k)];
            if !write_padded(&mut body[at..at + width], value) {
                // Too wide for its slot (a very long run): render the whole report instead.
                let whole = self.report(reporter, |e| Fleet::counters(round, e));
                return (reporter, write_report(&whole));
            }
        }
        (reporter, body)
    }
}

/// Write `value` right-aligned into `slot` (already spaces); false if it does not fit.
fn write_padded(slot: &mut [u8], mut value: u64) -> bool {
    let mut i = slot.len();
    loop {
        if i == 0 {
            return false;
        }
        i -= 1;
        slot[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return true;
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
struct Step {
    target_rps: Option<u64>,
    secs: f64,
    sent: u64,
    accepted: u64,
    refused: u64,
    failed: u64,
    accepted_per_s: f64,
    server_cpu_cores: Option<f64>,
    accepted_per_core_s: Option<f64>,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    accepted: u64,
    refused: u64,
    failed: u64,
}

async fn connect(addr: SocketAddr) -> Result<http1::SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One connection's share: `count` reports (or until `deadline`), paced at `period` if given.
async fn drive(
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
            request = request.header(hostile::PRINCIPAL_HEADER, principal);
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
                let ok = response.status() == hyper::StatusCode::OK;
                let complete = response.into_body().collect().await.is_ok();
                tally.latencies_us.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                match (ok, complete) {
                    (true, true) => tally.accepted += 1,
                    (false, true) => tally.refused += 1,
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

async fn run_step(
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
    }
}

#[derive(Serialize)]
struct Results {
    reporters: usize,
    endpoints_per_reporter: usize,
    clusters: usize,
    connections: usize,
    server_worker_threads: u32,
    warmup: Step,
    rss_after_warmup_mib: Option<f64>,
    steps: Vec<Step>,
    rss_end_mib: Option<f64>,
    rss_peak_mib: Option<f64>,
    best_accepted_per_s_under_5ms_p99: Option<f64>,
    max_accepted_per_core_s: Option<f64>,
    inprocess: Option<InProcess>,
}

async fn wait_healthy(addr: SocketAddr) -> Result<(), String> {
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

fn markdown(r: &Results) -> String {
    let mut s = String::new();
    s.push_str("# Aggregator benchmark\n\n");
    s.push_str(&format!(
        "{} simulated reporters x {} endpoints ({} clusters), {} keep-alive connections; aggregator pinned to one core \
         with `--worker-threads 1`, load driver on the other core. Latency = send to full response, at the driver.\n\n",
        r.reporters, r.endpoints_per_reporter, r.clusters, r.connections
    ));
    s.push_str("| target reports/s | accepted/s | server cores | accepted/s per core | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | refused | failed |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for st in &r.steps {
        s.push_str(&format!(
            "| {} | {:.0} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {} | {} |\n",
            st.target_rps.map_or("max (unpaced)".into(), |t| t.to_string()),
            st.accepted_per_s,
            opt(st.server_cpu_cores, 2),
            opt(st.accepted_per_core_s, 0),
            st.p50_ms,
            st.p90_ms,
            st.p99_ms,
            st.p999_ms,
            st.max_ms,
            st.refused,
            st.failed
        ));
    }
    s.push_str(&format!(
        "\nRSS after registering all {} reporters x {} endpoints: {} MiB; at the end: {} MiB; peak: {} MiB (target < 256).\n",
        r.reporters,
        r.endpoints_per_reporter,
        opt(r.rss_after_warmup_mib, 1),
        opt(r.rss_end_mib, 1),
        opt(r.rss_peak_mib, 1)
    ));
    s.push_str(&format!(
        "Highest accepted reports/s with p99 < 5 ms: {}; highest accepted reports/s per server core: {} (targets >= 20,000 and p99 < 5 ms).\n",
        opt(r.best_accepted_per_s_under_5ms_p99, 0),
        opt(r.max_accepted_per_core_s, 0)
    ));
    if let Some(p) = &r.inprocess {
        s.push_str(&format!(
            "Handling logic alone (parse, merge, reply, serialise; no HTTP), one thread: {:.1} us per report = {:.0} reports/s; \
             one full recompute of the {} x {} book: {:.1} ms.\n",
            p.us_per_report, p.reports_per_s, r.reporters, r.endpoints_per_reporter, p.recompute_ms
        ));
        let sh = &p.share_pct;
        s.push_str(&format!(
            "Shares of that time: parse + validate {}%, merge (ingest) {}%, reply (prepared JSON) {}%.\n",
            sh.parse, sh.ingest, sh.reply
        ));
    }
    s
}

fn main() -> std::process::ExitCode {
    let args = LoadgenArgs::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tailweight-loadgen: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tailweight-loadgen: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: LoadgenArgs) -> Result<(), String> {
    if args.reporters == 0 || args.endpoints == 0 || args.clusters == 0 || args.connections == 0 {
        return Err("reporters, endpoints, clusters and connections must be > 0".into());
    }
    let mut _server = None;
    let (addr, pid) = match (&args.aggregator, args.target) {
        (Some(binary), _) => {
            let (server, addr) = start_server(binary, args.server_cpu, &args.server_args)?;
            let pid = server.child.id();
            _server = Some(server);
            (addr, Some(pid))
        }
        (None, Some(addr)) => (addr, args.server_pid),
        (None, None) => return Err("give --aggregator PATH or --target HOST:PORT".into()),
    };
    wait_healthy(addr).await?;
    let ticks = clock_ticks();
    let server = pid.map(|p| (p, ticks));
    let fleet =
        Arc::new(Fleet::new(args.reporters, args.endpoints, args.clusters.min(args.reporters), args.principals));
    if args.hostile {
        return hostile::run(addr, pid, fleet, &args).await;
    }
    // Every reporter reports once (then twice, so each has a window of differences).
    eprintln!("warm-up: {} reporters x {} endpoints", args.reporters, args.endpoints);
    let warmup = run_step(addr, &fleet, args.connections, None, Some(2 * args.reporters as u64), 120, server).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let rss_after_warmup_mib = pid.and_then(rss_kib).map(|(rss, _)| rss as f64 / 1024.0);
    let mut steps = Vec::new();
    for rate in args.rates.iter().copied().map(Some).chain([None]) {
        eprintln!("step: {}", rate.map_or("max".into(), |r| format!("{r}/s")));
        let step = run_step(addr, &fleet, args.connections, rate, None, args.step_secs, server).await;
        eprintln!("  {step:?}");
        steps.push(step);
    }
    let (rss_end_mib, rss_peak_mib) = match pid.and_then(rss_kib) {
        Some((rss, hwm)) => (Some(rss as f64 / 1024.0), Some(hwm as f64 / 1024.0)),
        None => (None, None),
    };
    let best = steps
        .iter()
        .filter(|s| s.p99_ms < 5.0 && s.failed == 0)
        .map(|s| s.accepted_per_s)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let per_core = steps
        .iter()
        .filter_map(|s| s.accepted_per_core_s)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let results = Results {
        reporters: args.reporters,
        endpoints_per_reporter: args.endpoints,
        clusters: fleet.clusters,
        connections: args.connections,
        server_worker_threads: 1,
        warmup,
        rss_after_warmup_mib,
        steps,
        rss_end_mib,
        rss_peak_mib,
        best_accepted_per_s_under_5ms_p99: best,
        max_accepted_per_core_s: per_core,
        inprocess: (args.inprocess_reports > 0).then(|| {
            eprintln!("in-process timing: {} reports", args.inprocess_reports);
            fleet.next.store(0, Ordering::Relaxed);
            time_inprocess(&fleet, args.inprocess_reports)
        }),
    };
    publish(&args, &results, markdown(&results))
}

/// Print the results' markdown and write it and their JSON where `--md` and `--json` say.
fn publish(args: &LoadgenArgs, results: &impl Serialize, md: String) -> Result<(), String> {
    print!("{md}");
    if let Some(path) = &args.json {
        let body = serde_json::to_vec_pretty(results).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.md {
        std::fs::write(path, md).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
