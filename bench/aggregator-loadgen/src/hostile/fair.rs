//! Trickling and polling (`--trickle-poll`, part of `make bench-hostile`; issue 24 item 3): on a
//! fresh aggregator per run, honest reporters report at `--honest-rate`; after a baseline,
//! `--attackers` principals (`ns/dev/sa/attacker<k>`, none of them honest) at once, for
//! `--attack-secs`, while the honest reports go on:
//! - trickle report bodies: `--trickle-connections` connections each, every one declaring the
//!   largest body the aggregator takes (512 KiB, so that it also reserves the most memory) and
//!   sending it in `TICK` steps, half of them at `ABOVE` x `--min-body-rate` (never cut for being
//!   slow: each holds its slot until `--body-timeout-ms`), half at `BELOW` x it (cut with 408 once
//!   past the grace); a connection that was answered (503 without a slot, 408) or closed opens again
//!   after `RETRY_PAUSE`;
//! - poll `GET /v1/weights?limit=1024` (the largest page) on `--poll-connections` keep-alive
//!   connections each, every one asking again as soon as its answer is read.
//!
//! Measured per run: the honest reports' acceptance and latency in the baseline and during the
//! attack, what the attackers got back, and the aggregator's peak RSS (VmHWM).

use super::attacks::{send, AttackTally};
use super::observe::{aggregator_metrics, CpuUse, Machine};
use super::results::HonestSetup;
use crate::args::{AttackArgs, LoadgenArgs};
use crate::drive::{run_step, wait_healthy, Step};
use crate::fleet::{Fleet, PRINCIPAL_HEADER};
use crate::process::{clock_ticks, rss_kib, start_server};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailweight_wire::protocol::REPORT_PATH;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The body each trickled request declares: the aggregator's default `--max-body-bytes`.
const BODY_BYTES: usize = 512 << 10;
/// The trickle rates, as multiples of `--min-body-rate`.
const ABOVE: f64 = 1.05;
const BELOW: f64 = 0.5;
/// How often a trickling connection sends its next bytes.
const TICK: Duration = Duration::from_millis(50);
/// How long a trickling connection waits after an answer before it opens again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Bounds on each attacking connection's requests, besides the deadline.
const MAX_TRICKLES: u64 = 10_000;
const MAX_POLLS: u64 = 1_000_000;
/// The weights page the pollers ask for: the largest one.
const POLL_PATH: &str = "/v1/weights?limit=1024";

/// The markdown section's title (the table's name; what `publish_section` replaces).
pub(crate) const TITLE: &str = "\n## Trickling and polling";

/// One run: a fresh aggregator, a baseline, then each attack phase (`PHASES`) in turn.
#[derive(Debug, Serialize)]
pub(crate) struct FairRun {
    pub phases: Vec<FairPhase>,
    /// VmHWM at the end of the run.
    pub rss_peak_mib: Option<f64>,
    pub aggregator_metrics: BTreeMap<String, f64>,
}

/// The honest reports through one phase, and (but for the baseline) what the attackers got.
#[derive(Debug, Serialize)]
pub(crate) struct FairPhase {
    pub name: String,
    pub honest: Step,
    /// Accepted of the reports due at the rate (`accepted_pct`).
    pub honest_accepted_pct: f64,
    pub attackers: BTreeMap<String, AttackTally>,
    pub polls_per_s: f64,
    pub machine: Machine,
}

/// The phases of a run: what the attackers do in each (trickling connections, polling connections).
pub(crate) const BASELINE: &str = "baseline";
pub(crate) const BOTH: &str = "trickling and polling";
pub(crate) const POLLING: &str = "polling alone";

/// Every run, and how they were made.
#[derive(Debug, Serialize)]
pub(crate) struct FairResults {
    pub attackers: usize,
    pub trickle_connections_per_attacker: usize,
    pub poll_connections_per_attacker: usize,
    pub min_body_rate: usize,
    pub trickle_bytes_per_s: [f64; 2],
    #[serde(flatten)]
    pub honest: HonestSetup,
    pub runs: Vec<FairRun>,
}

/// Accepted, as a percentage of the reports due at `rate` over the step (or of those sent, if
/// more): a report the driver could not send in time, because the aggregator was slow to answer
/// the one before on its connection, counts as not accepted.
pub(crate) fn accepted_pct(step: &Step, rate: u64) -> f64 {
    let due = (rate as f64 * step.secs).max(step.sent as f64).max(1.0);
    100.0 * step.accepted as f64 / due
}

/// Every run (`--runs`), each on a fresh aggregator.
pub(crate) async fn run(binary: &Path, args: &LoadgenArgs) -> Result<FairResults, String> {
    let a = &args.attack;
    if a.attackers == 0 || a.min_body_rate == 0 || a.runs == 0 {
        return Err("attackers, min_body_rate and runs must be > 0".into());
    }
    let mut runs = Vec::new();
    for k in 0..a.runs {
        eprintln!("trickling and polling: run {} of {}", k + 1, a.runs);
        runs.push(one_run(binary, args).await?);
    }
    Ok(FairResults {
        attackers: a.attackers,
        trickle_connections_per_attacker: a.trickle_connections,
        poll_connections_per_attacker: a.poll_connections,
        min_body_rate: a.min_body_rate,
        trickle_bytes_per_s: [ABOVE, BELOW].map(|m| m * a.min_body_rate as f64),
        honest: HonestSetup::of(args),
        runs,
    })
}

/// A fresh aggregator: warm-up, baseline, then each attack beside the same honest reports: all
/// attackers trickling and polling, then polling alone (their polls then get slots).
async fn one_run(binary: &Path, args: &LoadgenArgs) -> Result<FairRun, String> {
    let a = &args.attack;
    let (server, addr) = start_server(&binary.to_path_buf(), args.server_cpu, &args.server_args)?;
    let pid = server.child.id();
    wait_healthy(addr).await?;
    let fleet =
        Arc::new(Fleet::new(args.reporters, args.endpoints, args.clusters.min(args.reporters), args.principals));
    eprintln!("  warm-up: {} reporters x {} endpoints", fleet.reporters, fleet.endpoints);
    let at = Some((pid, clock_ticks()));
    run_step(addr, &fleet, args.connections, None, Some(2 * fleet.reporters as u64), 120, at).await;
    let mut phases = Vec::new();
    let polling_alone = AttackArgs { trickle_connections: 0, ..a.clone() };
    for (name, attack) in [(BASELINE, None), (BOTH, Some(a.clone())), (POLLING, Some(polling_alone))] {
        let secs = if attack.is_some() { a.attack_secs } else { a.baseline_secs };
        eprintln!("  {name}: {} honest reports/s for {secs} s", a.honest_rate);
        phases.push(phase(addr, pid, &fleet, args, name, attack, secs).await?);
    }
    let rss_peak_mib = rss_kib(pid).map(|(_, hwm)| hwm as f64 / 1024.0);
    let aggregator_metrics = aggregator_metrics(addr).await;
    drop(server);
    Ok(FairRun { phases, rss_peak_mib, aggregator_metrics })
}

/// `secs` of honest reports at the rate, beside `attack` (if any).
async fn phase(
    addr: SocketAddr,
    pid: u32,
    fleet: &Arc<Fleet>,
    args: &LoadgenArgs,
    name: &str,
    attack: Option<AttackArgs>,
    secs: u64,
) -> Result<FairPhase, String> {
    let ticks = clock_ticks();
    let at = Some((pid, ticks));
    let mut machine = Machine::now();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let used_before = CpuUse::now(at, ticks);
    let started = Instant::now();
    let attackers = attack.map(|a| attack_elsewhere(addr, a, deadline));
    let rate = args.attack.honest_rate;
    let honest = run_step(addr, fleet, args.connections, Some(rate), None, secs, at).await;
    let tallies = match attackers {
        Some(handle) => handle.await.map_err(|e| format!("attackers: {e}"))??,
        None => BTreeMap::new(),
    };
    let elapsed = started.elapsed().as_secs_f64();
    machine.used(used_before, CpuUse::now(at, ticks), ticks, elapsed);
    machine.loadavg_after = super::observe::loadavg();
    let polls_ok = tallies.get(POLLS).and_then(|t| t.outcomes.get("200")).copied().unwrap_or(0);
    Ok(FairPhase {
        name: name.to_string(),
        honest_accepted_pct: accepted_pct(&honest, rate),
        honest,
        attackers: tallies,
        polls_per_s: polls_ok as f64 / elapsed,
        machine,
    })
}

const ABOVE_NAME: &str = "bodies trickled just above the minimum rate";
const BELOW_NAME: &str = "bodies trickled below the minimum rate";
const POLLS: &str = "weights polls";

/// The attackers on a thread and runtime of their own (another machine, in a real attack), so that
/// their work does not queue with the honest reports' in the driver; what each kind got.
fn attack_elsewhere(
    addr: SocketAddr,
    a: AttackArgs,
    deadline: Instant,
) -> tokio::task::JoinHandle<Result<BTreeMap<String, AttackTally>, String>> {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let mut attackers = spawn_attackers(addr, &a, deadline);
            let mut tallies: BTreeMap<String, AttackTally> = BTreeMap::new();
            while let Some(Ok((name, tally))) = attackers.join_next().await {
                tallies.entry(name.to_string()).or_default().absorb(tally);
            }
            Ok(tallies)
        })
    })
}

/// Every attacking connection, each until `deadline`; each gives its kind and what it got.
fn spawn_attackers(
    addr: SocketAddr,
    a: &AttackArgs,
    deadline: Instant,
) -> tokio::task::JoinSet<(&'static str, AttackTally)> {
    let mut set = tokio::task::JoinSet::new();
    for k in 0..a.attackers {
        let principal = format!("spiffe://cluster.local/ns/dev/sa/attacker{k}");
        for c in 0..a.trickle_connections {
            let (name, times) = if c % 2 == 0 { (ABOVE_NAME, ABOVE) } else { (BELOW_NAME, BELOW) };
            let (p, rate) = (principal.clone(), times * a.min_body_rate as f64);
            set.spawn(async move { (name, trickle(addr, p, rate, deadline).await) });
        }
        for _ in 0..a.poll_connections {
            let p = principal.clone();
            set.spawn(async move { (POLLS, poll(addr, p, deadline).await) });
        }
    }
    set
}

/// Weights polls on one keep-alive connection, back to back, until `deadline`.
async fn poll(addr: SocketAddr, principal: String, deadline: Instant) -> AttackTally {
    let mut tally = AttackTally::default();
    let mut sender = None;
    while Instant::now() < deadline && tally.sent < MAX_POLLS {
        let get = hyper::Request::get(POLL_PATH);
        send(addr, &mut sender, get, Some(&principal), Vec::new(), &mut tally).await;
        if sender.is_none() {
            // No connection (refused or closed): do not spin.
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    tally
}

/// Trickled reports on one connection after another, until `deadline`: each outcome counted.
async fn trickle(addr: SocketAddr, principal: String, bytes_per_s: f64, deadline: Instant) -> AttackTally {
    let mut tally = AttackTally::default();
    while Instant::now() < deadline && tally.sent < MAX_TRICKLES {
        tally.sent += 1;
        tally.count(trickle_once(addr, &principal, bytes_per_s, deadline).await);
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    tally
}

/// The bytes a trickle at `bytes_per_s` has sent `elapsed` after its headers (at most the body).
pub(crate) fn trickled_by(elapsed: Duration, bytes_per_s: f64) -> usize {
    ((elapsed.as_secs_f64() * bytes_per_s) as usize).min(BODY_BYTES)
}

/// One request: headers declaring `BODY_BYTES`, then its body at `bytes_per_s`, every `TICK`,
/// until an answer comes (its status), the server closes (`closed`), or the run ends (`ended`).
async fn trickle_once(addr: SocketAddr, principal: &str, bytes_per_s: f64, deadline: Instant) -> String {
    let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else { return "error".into() };
    let head = format!(
        "POST {REPORT_PATH} HTTP/1.1\r\nhost: aggregator\r\n{PRINCIPAL_HEADER}: {principal}\r\n\
         content-type: application/json\r\ncontent-length: {BODY_BYTES}\r\n\r\n"
    );
    if tcp.write_all(head.as_bytes()).await.is_err() {
        return "closed".into();
    }
    let started = Instant::now();
    let (mut sent, mut answer) = (0usize, Vec::new());
    let mut next_tick = tokio::time::Instant::now() + TICK;
    while Instant::now() < deadline {
        // Read until the next tick (`read_buf` is cancel-safe: nothing read is lost).
        match tokio::time::timeout_at(next_tick, tcp.read_buf(&mut answer)).await {
            Ok(Ok(n)) if n > 0 && answer.len() < 12 => continue,
            Ok(_) => return answer.get(9..12).map_or("closed".into(), |s| String::from_utf8_lossy(s).into_owned()),
            Err(_) => next_tick += TICK,
        }
        let due = trickled_by(started.elapsed(), bytes_per_s);
        if due > sent {
            // JSON whitespace after an opening brace: a report that never ends in time.
            let mut chunk = vec![b' '; due - sent];
            if sent == 0 {
                chunk[0] = b'{';
            }
            if tcp.write_all(&chunk).await.is_err() {
                return "closed".into();
            }
            sent = due;
        }
    }
    "ended".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_sends_at_its_rate_and_never_past_the_body() {
        assert_eq!(trickled_by(Duration::from_millis(500), 1_000.0), 500);
        assert_eq!(trickled_by(Duration::ZERO, 1_000.0), 0);
        assert_eq!(trickled_by(Duration::from_secs(10_000), 1_000.0), BODY_BYTES);
    }
}
