//! The evidence attacks (`--evidence-attacks`, part of `make bench-hostile`; issue 38's targets),
//! each on a fresh aggregator beside the fleet's honest reports at `--honest-rate`:
//! - made-up endpoints: one principal reports 2,046 endpoints that do not exist in a cluster real
//!   callers report (`made_up.rs`);
//! - attestation fill by one principal, then by four, after the same driver without attackers
//!   (`attest_fill.rs`; its rows: `fill_table.rs`);
//! - three clients scraping `/metrics` back to back, against a baseline of the same run
//!   (`scrape.rs`).
//!
//! Its section replaces the one of the same title in `--md`, its results the key
//! `evidence_attacks` of `--json`.

use super::attest_fill::{self, FillRun};
use super::fair::accepted_pct;
use super::fresh::{fresh_aggregator, FreshAggregator};
use super::made_up::{self, MadeUpResult};
use super::scrape::{self, ScrapeRun};
use crate::args::LoadgenArgs;
use crate::drive::{run_step, Step};
use crate::process::rss_kib;
use serde::Serialize;
use std::path::Path;

/// The markdown section's title (what `publish_section` replaces).
pub(crate) const TITLE: &str = "\n## Made-up endpoints, attestation fill and scraping";

/// Seconds of honest reports while the made-up endpoints are reported (its 12 rounds and a margin).
const MADE_UP_SECS: u64 = 14;

#[derive(Debug, Serialize)]
pub(crate) struct EvidenceResults {
    /// The aggregator binary these ran against (which build: glibc or musl).
    pub aggregator: String,
    pub honest: super::results::HonestSetup,
    pub made_up: MadeUpResult,
    /// The honest fleet's reports beside the made-up endpoints.
    pub made_up_honest: Step,
    pub made_up_honest_accepted_pct: f64,
    pub made_up_rss_peak_mib: Option<f64>,
    pub fills: Vec<FillRun>,
    pub scrape: ScrapeRun,
    pub loadavg_before: String,
    pub loadavg_after: String,
}

/// The made-up endpoints on a fresh aggregator, the fleet's honest reports beside them.
async fn made_up_run(binary: &Path, args: &LoadgenArgs) -> Result<(MadeUpResult, Step, Option<f64>), String> {
    let FreshAggregator { server, addr, pid, fleet, at } = fresh_aggregator(binary, args).await?;
    eprintln!("  made-up endpoints: {} honest reports/s for {MADE_UP_SECS} s", args.attack.honest_rate);
    let (rate, connections) = (args.attack.honest_rate, args.connections);
    let load =
        tokio::spawn(async move { run_step(addr, &fleet, connections, Some(rate), None, MADE_UP_SECS, at).await });
    let result = made_up::run(addr).await?;
    let honest = load.await.map_err(|e| format!("honest load: {e}"))?;
    let rss = rss_kib(pid).map(|(_, hwm)| hwm as f64 / 1024.0);
    drop(server);
    Ok((result, honest, rss))
}

/// Every evidence attack, in turn.
pub(crate) async fn run(binary: &Path, args: &LoadgenArgs) -> Result<EvidenceResults, String> {
    let loadavg_before = super::observe::loadavg();
    let (made_up, made_up_honest, made_up_rss_peak_mib) = made_up_run(binary, args).await?;
    let mut fills = Vec::new();
    for attackers in super::fill_table::ATTACKERS {
        eprintln!("attestation fill by {attackers}");
        fills.push(attest_fill::run(binary, args, attackers, args.attack.attack_secs).await?);
    }
    eprintln!("scraping /metrics");
    let scrape = scrape::run(binary, args, args.attack.attack_secs).await?;
    Ok(EvidenceResults {
        aggregator: binary.display().to_string(),
        honest: super::results::HonestSetup::of(args),
        made_up_honest_accepted_pct: accepted_pct(&made_up_honest, args.attack.honest_rate),
        made_up,
        made_up_honest,
        made_up_rss_peak_mib,
        fills,
        scrape,
        loadavg_before,
        loadavg_after: super::observe::loadavg(),
    })
}

/// The reports due at a step's rate over its length (a report sent late, behind a slow answer on
/// its connection, counts as not accepted; see `accepted_pct`).
fn due(step: &Step) -> u64 {
    (step.target_rps.unwrap_or(0) as f64 * step.secs).round() as u64
}

fn mib(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0} MiB"))
}

/// The section: one row per attack, its measured numbers beside its target.
pub(crate) fn markdown(r: &EvidenceResults) -> String {
    let m = &r.made_up;
    let mut md = format!(
        "{TITLE}\n\nIssue 38's targets, each on a fresh aggregator (`{}`; build: {}) beside honest load: {}. \
         One run each, on a shared 2-core machine busy with other jobs (load average {} before, {} after): \
         compare ratios within this run. \
         Accepted: of the reports due at the rate; each of the 32 connections waits for its answer before \
         the next, so an aggregator slow to answer also shows as reports not sent in time.\n\n\
         | attack | measured | target |\n|---|---|---|\n",
        r.aggregator,
        if r.aggregator.contains("musl") { "musl, static (the image's)" } else { "glibc" },
        r.honest.describe(),
        r.loadavg_before,
        r.loadavg_after
    );
    md += &format!(
        "| made-up endpoints: one principal reports {} made-up endpoints in a cluster of {} real ones reported \
         by {} honest principals (12 rounds, one a second) | honest replies with every real endpoint: {} of {}; \
         largest `omitted` in a reply: {}; `tailweight_reply_endpoints_omitted_total` {}; liar's reports accepted \
         {} of {}; honest fleet reports accepted {:.2}%, p99 {:.1} ms; peak RSS {} | every honest reply keeps the \
         real endpoints, the metric counts the rest |\n",
        m.made_up_endpoints,
        m.real_endpoints,
        m.honest_callers,
        m.replies_with_every_real_endpoint,
        m.honest_replies,
        m.max_omitted_in_a_reply,
        m.omitted_metric.map_or("absent".into(), |v| format!("{v:.0}")),
        m.liar_accepted,
        m.liar_reports,
        r.made_up_honest_accepted_pct,
        r.made_up_honest.p99_ms,
        mib(r.made_up_rss_peak_mib),
    );
    md += &super::fill_table::rows(&r.fills);
    let s = &r.scrape;
    md += &format!(
        "| {} clients scraping `/metrics` back to back | honest reports accepted {:.2}% (sent {} of {} due, refused \
         by status {:?}; baseline {:.2}%); p99 \
         {:.1} ms against the baseline's {:.1} ms: {:.2}x; scrapes answered 200: {:.1}/s, all outcomes {:?} | \
         accepted >= 99.9%, p99 within 2x of the baseline |\n",
        s.scrapers,
        s.scraped_accepted_pct,
        s.scraped.sent,
        due(&s.scraped),
        s.scraped.refused_by_status,
        s.baseline_accepted_pct,
        s.scraped.p99_ms,
        s.baseline.p99_ms,
        s.p99_ratio,
        s.scrapes_per_s,
        s.scrapes.outcomes,
    );
    md += &format!("\nThe aggregator's refusals while scraped: {}.\n", super::observe::refusals(&s.aggregator_metrics));
    md
}

/// Run them, then publish the section and the key `evidence_attacks`.
pub(crate) async fn publish(args: &LoadgenArgs) -> Result<(), String> {
    if args.attest_fill_only {
        return super::fill_table::publish(args).await;
    }
    let binary = args.aggregator.as_ref().ok_or("--evidence-attacks needs --aggregator PATH")?;
    let results = run(binary, args).await?;
    let md = markdown(&results);
    crate::results::publish_section(args, &results, &md, TITLE, Some("evidence_attacks"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_is_the_rate_over_the_steps_length() {
        let step = Step { target_rps: Some(2_000), secs: 20.004, ..Step::default() };
        assert_eq!(due(&step), 40_008);
    }
}
