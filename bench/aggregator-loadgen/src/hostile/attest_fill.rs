//! Attestation fill (`--evidence-attacks`, issue 38 target 2): on a fresh aggregator, `attackers`
//! principals of the honest service's own namespace (ns/bench, the worst case of
//! `--attest-rule namespace`) attest made-up clusters of that namespace, `MAX_SOURCES` sources
//! each, back to back on `FILL_CONNECTIONS` connections each (as fast as the aggregator lets them:
//! each answer, 204 or 429, before the next), from `HEAD_START` before the honest load. Meanwhile
//! an honest service principal renews the attestations of the first `ATTESTED_CLUSTERS` clusters'
//! endpoints once a second (started before the attackers, so every later one is a renewal), and
//! the fleet's reporters report at `--honest-rate` with no warm-up: their first reports are new
//! reporters arriving while the book is being filled. Measured: the honest reports' and renewals'
//! acceptance, and the aggregator's peak RSS (VmHWM) against `--memory-limit-mib`. With 0
//! attackers, the same driver without the attack: the baseline of what the driver sends in time.
//! The honest reports' acceptance is split in two: `sent / due` (what the driver got out in time:
//! each connection waits for its answer, so a slow aggregator or a starved driver both lower it)
//! and `accepted / sent` (what the aggregator did with what it got).

use super::attacks::{send, AttackTally};
use super::fair::accepted_pct;
use crate::args::LoadgenArgs;
use crate::drive::{run_step, wait_healthy, Step};
use crate::fleet::Fleet;
use crate::process::{clock_ticks, rss_kib, start_server};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailweight_wire::attest::write::write_attestation;
use tailweight_wire::attest::{Attestation, SourceCount, MAX_SOURCES};
use tailweight_wire::protocol::{ATTEST_PATH, VERSION};

const FILL_CONNECTIONS: usize = 4;
/// How long the attackers fill before the honest reporters arrive.
const HEAD_START: Duration = Duration::from_secs(3);
/// Clusters whose endpoints the honest service attests.
const ATTESTED_CLUSTERS: usize = 10;
/// Bound on each attacking connection's attestations, besides the deadline.
const MAX_FILLS: u64 = 1_000_000;
const SERVICE: &str = "spiffe://cluster.local/ns/bench/sa/svc";

/// One fill: what the honest side got, what the attackers got, and the aggregator's peak RSS.
#[derive(Debug, Serialize)]
pub(crate) struct FillRun {
    pub attackers: usize,
    /// The honest driver's connections (each waits for its answer before the next report).
    pub connections: usize,
    pub honest: Step,
    pub honest_accepted_pct: f64,
    /// The honest reports sent of those due at the rate over the step.
    pub honest_sent_of_due_pct: f64,
    /// The honest reports accepted (200) of those sent.
    pub honest_accepted_of_sent_pct: f64,
    pub renewals: AttackTally,
    pub renewals_accepted_pct: f64,
    pub fills: AttackTally,
    pub rss_peak_mib: Option<f64>,
    pub memory_limit_mib: Option<f64>,
    pub book_bytes: Option<f64>,
    /// The aggregator's counters at the end (refusals and sheds by reason, the book).
    pub aggregator_metrics: std::collections::BTreeMap<String, f64>,
}

/// An attestation of `endpoint` in `cluster` after `round` seconds, from `sources` callers.
fn attestation_of(cluster: String, endpoint: String, round: u64, sources: usize, prefix: &str) -> Attestation {
    Attestation {
        version: VERSION,
        cluster,
        endpoint,
        incarnation: 1,
        interval_ms: 1000,
        sources: (0..sources)
            .map(|i| SourceCount {
                principal: format!("spiffe://cluster.local/ns/{prefix}/sa/caller-with-a-long-name-{i}"),
                requests: 50 * round,
                errors: 0,
            })
            .collect(),
    }
}

/// The body of `attestation_of`.
fn attestation(cluster: String, endpoint: String, round: u64, sources: usize, prefix: &str) -> Vec<u8> {
    write_attestation(&attestation_of(cluster, endpoint, round, sources, prefix))
}

/// `part` of `whole` in percent (100 when `whole` is 0).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        100.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The honest service's renewals: every endpoint of the first clusters, once a second.
async fn renew(addr: SocketAddr, fleet: Arc<Fleet>, deadline: Instant) -> AttackTally {
    let mut tally = AttackTally::default();
    let mut sender = None;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut round = 0u64;
    while Instant::now() < deadline {
        ticker.tick().await;
        round += 1;
        for c in 0..ATTESTED_CLUSTERS.min(fleet.clusters) {
            for e in 0..fleet.endpoints {
                let body = attestation(Fleet::cluster_name(c), Fleet::address(c, e), round, 20, "client");
                send(addr, &mut sender, hyper::Request::post(ATTEST_PATH), Some(SERVICE), body, &mut tally).await;
            }
        }
    }
    tally
}

/// One attacking connection: attestations of new made-up clusters back to back until `deadline`.
async fn fill(addr: SocketAddr, attacker: usize, connection: usize, deadline: Instant) -> AttackTally {
    let principal = format!("spiffe://cluster.local/ns/bench/sa/attacker{attacker}");
    let mut tally = AttackTally::default();
    let mut sender = None;
    let mut n = 0u64;
    // Its sources built once (only the cluster and endpoint change): the attackers share the
    // driver's core, so their cost is kept to serialising each body.
    let mut made_up = attestation_of(String::new(), String::new(), 1, MAX_SOURCES, "dev");
    while Instant::now() < deadline && tally.sent < MAX_FILLS {
        made_up.cluster = format!("outbound|8080||fake{attacker}x{connection}x{n}.bench.svc.cluster.local");
        made_up.endpoint = format!("10.250.{}.{}:8080", (n / 250) % 250, n % 250 + 1);
        let body = write_attestation(&made_up);
        send(addr, &mut sender, hyper::Request::post(ATTEST_PATH), Some(&principal), body, &mut tally).await;
        if sender.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        n += 1;
    }
    tally
}

/// The attackers on a thread and runtime of their own (another machine, in a real attack).
fn fill_elsewhere(addr: SocketAddr, attackers: usize, deadline: Instant) -> tokio::task::JoinHandle<AttackTally> {
    tokio::task::spawn_blocking(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return AttackTally::default();
        };
        runtime.block_on(async move {
            let mut set = tokio::task::JoinSet::new();
            for k in 0..attackers {
                for c in 0..FILL_CONNECTIONS {
                    set.spawn(fill(addr, k, c, deadline));
                }
            }
            let mut all = AttackTally::default();
            while let Some(Ok(tally)) = set.join_next().await {
                all.absorb(tally);
            }
            all
        })
    })
}

/// One fill by `attackers` principals on a fresh aggregator, for `secs` of honest reports.
pub(crate) async fn run(binary: &Path, args: &LoadgenArgs, attackers: usize, secs: u64) -> Result<FillRun, String> {
    let (server, addr) = start_server(&binary.to_path_buf(), args.server_cpu, &args.server_args)?;
    let pid = server.child.id();
    wait_healthy(addr).await?;
    let fleet =
        Arc::new(Fleet::new(args.reporters, args.endpoints, args.clusters.min(args.reporters), args.principals));
    let deadline = Instant::now() + HEAD_START + Duration::from_secs(secs + 1);
    let renewals = tokio::spawn(renew(addr, fleet.clone(), deadline));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let fills = fill_elsewhere(addr, attackers, deadline);
    tokio::time::sleep(HEAD_START).await;
    let rate = args.attack.honest_rate;
    eprintln!("  {attackers} attesting principal(s): {rate} honest reports/s for {secs} s");
    let honest = run_step(addr, &fleet, args.connections, Some(rate), None, secs, Some((pid, clock_ticks()))).await;
    let renewals = renewals.await.map_err(|e| format!("renewals: {e}"))?;
    let fills = fills.await.map_err(|e| format!("attackers: {e}"))?;
    let rss_peak_mib = rss_kib(pid).map(|(_, hwm)| hwm as f64 / 1024.0);
    let metrics = super::observe::aggregator_metrics(addr).await;
    drop(server);
    let memory_limit_mib = args
        .server_args
        .iter()
        .find_map(|a| a.strip_prefix("--memory-limit-mib="))
        .and_then(|v| v.parse().ok())
        .or(Some(192.0));
    let renewed = renewals.outcomes.get("204").copied().unwrap_or(0);
    let due = (rate as f64 * honest.secs).round() as u64;
    Ok(FillRun {
        attackers,
        connections: args.connections,
        honest_accepted_pct: accepted_pct(&honest, rate),
        honest_sent_of_due_pct: pct(honest.sent, due),
        honest_accepted_of_sent_pct: pct(honest.accepted, honest.sent),
        honest,
        renewals_accepted_pct: 100.0 * renewed as f64 / renewals.sent.max(1) as f64,
        renewals,
        fills,
        rss_peak_mib,
        memory_limit_mib,
        book_bytes: metrics.get("tailweight_book_bytes").copied(),
        aggregator_metrics: metrics,
    })
}
