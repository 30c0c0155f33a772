//! The driver's command line.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "tailweight-loadgen", about = "Benchmark driver for tailweight-aggregator")]
pub(crate) struct LoadgenArgs {
    /// Start this aggregator binary (else use --target).
    #[arg(long)]
    pub aggregator: Option<PathBuf>,
    /// Core to pin the started aggregator to.
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// An already running aggregator (host:port), with --server-pid for CPU and RSS.
    #[arg(long)]
    pub target: Option<SocketAddr>,
    #[arg(long)]
    pub server_pid: Option<u32>,
    #[arg(long, default_value_t = 10_000)]
    pub reporters: usize,
    #[arg(long, default_value_t = 20)]
    pub endpoints: usize,
    /// Clusters the reporters spread over (each reporter reports one cluster of `endpoints`).
    #[arg(long, default_value_t = 500)]
    pub clusters: usize,
    /// Target report rates, one step each; a final unpaced step measures the maximum.
    #[arg(long, value_delimiter = ',', default_value = "2000,5000,10000,20000,30000")]
    pub rates: Vec<u64>,
    #[arg(long, default_value_t = 5)]
    pub step_secs: u64,
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub md: Option<PathBuf>,
    /// Also time the handling logic alone (parse, merge, reply, serialise) for this many reports.
    #[arg(long, default_value_t = 200_000)]
    pub inprocess_reports: u64,
    /// Honest principals (0: none; else each report carries `x-tailweight-principal: sa-<k>`, for
    /// an aggregator started with `--identity header:x-tailweight-principal`); a cluster's
    /// reporters spread over them.
    #[arg(long, default_value_t = 0)]
    pub principals: usize,
    /// An argument for the started aggregator (repeatable), e.g. `--server-arg=--memory-limit-mib=192`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// The hostile run instead of the rate steps: a baseline of honest reports, then the same with
    /// every attack at once (see hostile.rs).
    #[arg(long)]
    pub hostile: bool,
    /// Principals that never call a service against 1, 2 and 20 real callers, with and without
    /// attestations (see callers.rs), instead of the rate steps; its table is appended to --md.
    #[arg(long)]
    pub callers_matrix: bool,
    /// Trickling and polling instead (hostile/fair.rs): a fresh aggregator per `--runs`, honest
    /// reports at `--honest-rate` beside `--attackers` principals that trickle bodies and poll the
    /// weights; its section replaces the one of the same title in --md, its results the key
    /// `trickling_and_polling` of --json (the rest of both files is kept).
    #[arg(long)]
    pub trickle_poll: bool,
    /// Made-up endpoints, attestation fill and scraping instead (hostile/evidence.rs): each on a
    /// fresh aggregator beside honest reports at `--honest-rate` (`--attack-secs` each); its section
    /// replaces the one of the same title in --md, its results the key `evidence_attacks` of --json.
    #[arg(long)]
    pub evidence_attacks: bool,
    /// With --evidence-attacks: only the attestation fill (its baseline without attackers, then 1
    /// and 4 attackers); its rows replace the fill rows in --md, its results the key `attest_fill`.
    #[arg(long)]
    pub attest_fill_only: bool,
    #[command(flatten)]
    pub attack: AttackArgs,
    /// The worst bodies instead (bodies.rs): peak RSS per body at each --memory-limits-mib; its
    /// section replaces the one of the same title in --md (the rest of that file is kept).
    #[arg(long)]
    pub worst_bodies: bool,
    /// Budgets the worst bodies run at, in MiB.
    #[arg(long, value_delimiter = ',', default_value = "192,128")]
    pub memory_limits_mib: Vec<u64>,
    /// Rounds of eight concurrent requests per body.
    #[arg(long, default_value_t = 5)]
    pub body_rounds: usize,
}

/// The attacks' settings.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AttackArgs {
    /// Seconds of honest reports before the attack (the weights' baseline).
    #[arg(long, default_value_t = 25)]
    pub baseline_secs: u64,
    /// Seconds of the attack (the honest reports go on).
    #[arg(long, default_value_t = 40)]
    pub attack_secs: u64,
    /// Clusters the liars report on: the first ones of the fleet (the next as many are the
    /// control, which nobody lies about).
    #[arg(long, default_value_t = 50)]
    pub attacked_clusters: usize,
    /// Reporter ids each lying principal uses.
    #[arg(long, default_value_t = 8)]
    pub liar_ids: usize,
    /// Slowloris connections kept open.
    #[arg(long, default_value_t = 128)]
    pub slowloris: usize,
    /// Honest reports per second.
    #[arg(long, default_value_t = 10_000)]
    pub honest_rate: u64,
    /// Trickling and polling: the attacking principals.
    #[arg(long, default_value_t = 8)]
    pub attackers: usize,
    /// Trickling and polling: connections each attacker trickles bodies on.
    #[arg(long, default_value_t = 8)]
    pub trickle_connections: usize,
    /// Trickling and polling: connections each attacker polls the weights on.
    #[arg(long, default_value_t = 2)]
    pub poll_connections: usize,
    /// Trickling and polling: the aggregator's `--min-body-rate` (bytes/s), which the trickles
    /// keep just above and below.
    #[arg(long, default_value_t = 64 << 10)]
    pub min_body_rate: usize,
    /// Trickling and polling: runs, each on a fresh aggregator.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
}
