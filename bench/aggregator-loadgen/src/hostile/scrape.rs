//! Scraping `/metrics` back to back (`--evidence-attacks`, issue 38 target 3): on a fresh
//! aggregator, after a warm-up, the fleet's honest reports at `--honest-rate` for `secs` (the
//! baseline), then as long again beside `SCRAPERS` clients (principals of their own) each asking
//! for `/metrics` on one keep-alive connection as soon as its last answer is read. Measured: the
//! honest reports' acceptance and p99 in both, and what the scrapers got.

use super::attacks::{send, AttackTally};
use super::fair::accepted_pct;
use super::fresh::{fresh_aggregator, FreshAggregator};
use crate::args::LoadgenArgs;
use crate::drive::{run_step, Step};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const SCRAPERS: usize = 3;
/// Bound on each scraper's requests, besides the deadline.
const MAX_SCRAPES: u64 = 1_000_000;

/// The baseline and the scraped phase of one run.
#[derive(Debug, Serialize)]
pub(crate) struct ScrapeRun {
    pub scrapers: usize,
    pub baseline: Step,
    pub baseline_accepted_pct: f64,
    pub scraped: Step,
    pub scraped_accepted_pct: f64,
    /// The scraped phase's honest p99 over the baseline's.
    pub p99_ratio: f64,
    pub scrapes: AttackTally,
    pub scrapes_per_s: f64,
    /// The aggregator's counters at the end (refusals and sheds by reason).
    pub aggregator_metrics: std::collections::BTreeMap<String, f64>,
}

/// One scraper: `/metrics` back to back until `deadline`.
async fn scrape(addr: SocketAddr, k: usize, deadline: Instant) -> AttackTally {
    let principal = format!("spiffe://cluster.local/ns/monitoring/sa/scraper{k}");
    let mut tally = AttackTally::default();
    let mut sender = None;
    while Instant::now() < deadline && tally.sent < MAX_SCRAPES {
        send(addr, &mut sender, hyper::Request::get("/metrics"), Some(&principal), Vec::new(), &mut tally).await;
        if sender.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tally
}

/// The scrapers on a thread and runtime of their own, so that their work does not queue with the
/// honest reports' in the driver.
fn scrape_elsewhere(addr: SocketAddr, deadline: Instant) -> tokio::task::JoinHandle<AttackTally> {
    tokio::task::spawn_blocking(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return AttackTally::default();
        };
        runtime.block_on(async move {
            let mut set = tokio::task::JoinSet::new();
            for k in 0..SCRAPERS {
                set.spawn(scrape(addr, k, deadline));
            }
            let mut all = AttackTally::default();
            while let Some(Ok(tally)) = set.join_next().await {
                all.absorb(tally);
            }
            all
        })
    })
}

/// The run: warm-up, baseline, then the same beside the scrapers.
pub(crate) async fn run(binary: &Path, args: &LoadgenArgs, secs: u64) -> Result<ScrapeRun, String> {
    let FreshAggregator { server, addr, fleet, at, .. } = fresh_aggregator(binary, args).await?;
    let rate = args.attack.honest_rate;
    eprintln!("  scraping: baseline, {rate} honest reports/s for {secs} s");
    let baseline = run_step(addr, &fleet, args.connections, Some(rate), None, secs, at).await;
    eprintln!("  scraping: {SCRAPERS} scrapers beside them for {secs} s");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let scrapers = scrape_elsewhere(addr, deadline);
    let scraped = run_step(addr, &fleet, args.connections, Some(rate), None, secs, at).await;
    let scrapes = scrapers.await.map_err(|e| format!("scrapers: {e}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let aggregator_metrics = super::observe::aggregator_metrics(addr).await;
    drop(server);
    let ok = scrapes.outcomes.get("200").copied().unwrap_or(0);
    Ok(ScrapeRun {
        scrapers: SCRAPERS,
        baseline_accepted_pct: accepted_pct(&baseline, rate),
        scraped_accepted_pct: accepted_pct(&scraped, rate),
        p99_ratio: scraped.p99_ms / baseline.p99_ms.max(1e-3),
        baseline,
        scraped,
        scrapes,
        scrapes_per_s: ok as f64 / elapsed,
        aggregator_metrics,
    })
}
