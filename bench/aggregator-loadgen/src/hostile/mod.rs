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
//!
//! Trickling and polling by eight principals has a run of its own (`--trickle-poll`, `fair.rs`), and
//! so do made-up endpoints, attestation fill and scraping (`--evidence-attacks`, `evidence.rs`).

pub(crate) use evidence::publish as publish_evidence;

mod attacks;
mod attest_fill;
mod evidence;
mod fair;
mod fill_table;
mod fresh;
mod made_up;
mod markdown;
mod observe;
mod results;
mod scrape;

use crate::args::LoadgenArgs;
use crate::drive::run_step;
use crate::fleet::Fleet;
use crate::process::{clock_ticks, rss_kib};
use crate::results::publish;
use markdown::{fair_markdown, markdown};
use observe::{aggregator_metrics, loadavg, moved, weights, CpuUse, Machine};
use results::{HonestSetup, HostileResults};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub async fn run(addr: SocketAddr, pid: Option<u32>, fleet: Arc<Fleet>, args: &LoadgenArgs) -> Result<(), String> {
    let a = &args.attack;
    if 2 * a.attacked_clusters > fleet.clusters {
        return Err(format!(
            "attacked_clusters: {} leaves no control clusters among {}",
            a.attacked_clusters, fleet.clusters
        ));
    }
    let ticks = clock_ticks();
    let server = pid.map(|p| (p, ticks));
    let mut machine = Machine::now();
    eprintln!("warm-up: {} reporters x {} endpoints", fleet.reporters, fleet.endpoints);
    let warmup = run_step(addr, &fleet, args.connections, None, Some(2 * fleet.reporters as u64), 120, server).await;
    eprintln!("baseline: {} honest reports/s for {} s", a.honest_rate, a.baseline_secs);
    let baseline = run_step(addr, &fleet, args.connections, Some(a.honest_rate), None, a.baseline_secs, server).await;
    let before = weights(addr).await;
    eprintln!("attack: {} s", a.attack_secs);
    let deadline = Instant::now() + Duration::from_secs(a.attack_secs);
    let used_before = CpuUse::now(server, ticks);
    let started = Instant::now();
    let mut attacks = attacks::spawn_all(addr, a, deadline);
    // RSS while it runs (the peak is the kernel's high-water mark, read at the end).
    let sampler = observe::sample_rss(pid, deadline);
    let attack = run_step(addr, &fleet, args.connections, Some(a.honest_rate), None, a.attack_secs, server).await;
    let mut tallies = BTreeMap::new();
    while let Some(Ok((name, tally))) = attacks.join_next().await {
        tallies.insert(name.to_string(), tally);
    }
    machine.used(used_before, CpuUse::now(server, ticks), ticks, started.elapsed().as_secs_f64());
    let _ = sampler.await;
    // The view settles within a couple of recomputes after the last lie.
    let after = weights(addr).await;
    machine.loadavg_after = loadavg();
    let (rss_end_mib, rss_peak_mib) = match pid.and_then(rss_kib) {
        Some((rss, hwm)) => (Some(rss as f64 / 1024.0), Some(hwm as f64 / 1024.0)),
        None => (None, None),
    };
    let honest_sent = attack.accepted + attack.refused + attack.failed;
    let attacked = a.attacked_clusters;
    let results = HostileResults {
        honest: HonestSetup::of(args),
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
    publish(args, &results, markdown(&results))
}

/// Trickling and polling (`--trickle-poll`, `fair.rs`): every run, its section in `--md` and its
/// key `trickling_and_polling` in `--json`.
pub(crate) async fn publish_fair(args: &LoadgenArgs) -> Result<(), String> {
    let binary = args.aggregator.as_ref().ok_or("--trickle-poll needs --aggregator PATH")?;
    let results = fair::run(binary, args).await?;
    let md = fair_markdown(&results);
    crate::results::publish_section(args, &results, &md, fair::TITLE, Some("trickling_and_polling"))
}
