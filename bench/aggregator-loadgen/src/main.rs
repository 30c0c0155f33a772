//! Load driver for the aggregator benchmark: many simulated sidecars POST real v1 reports (cumulative
//! counters that grow) at rising rates over keep-alive HTTP/1.1 connections, and it measures accepted
//! reports/s, handling latency (send to full response), the server's CPU use, and its RSS.
//!
//! With `--aggregator PATH` it starts the aggregator itself (pinned with `taskset -c SERVER_CPU`,
//! `--worker-threads 1`, its own process group, stopped by PID at the end, even on failure).
//! Pin this driver to another core yourself (`taskset -c 0 tailweight-loadgen ...`).

mod args;
mod bodies;
mod callers;
mod drive;
mod fleet;
mod hostile;
mod inprocess;
mod process;
mod results;

use args::LoadgenArgs;
use clap::Parser;
use drive::{run_step, wait_healthy};
use fleet::Fleet;
use process::{clock_ticks, rss_kib, start_server};
use results::{markdown, publish, Results};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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

/// The modes that start fresh aggregators of their own (None: none of them was asked for).
async fn run_fresh_servers(args: &LoadgenArgs) -> Option<Result<(), String>> {
    if args.worst_bodies {
        let Some(binary) = args.aggregator.as_ref() else {
            return Some(Err("--worst-bodies needs --aggregator PATH".into()));
        };
        let run = bodies::run(binary, args.server_cpu, &args.memory_limits_mib, args.body_rounds).await;
        return Some(run.and_then(|(rows, md)| results::publish_section(args, &rows, &md, bodies::TITLE, None)));
    }
    if args.evidence_attacks {
        return Some(hostile::publish_evidence(args).await);
    }
    if args.trickle_poll {
        return Some(hostile::publish_fair(args).await);
    }
    None
}

async fn run(args: LoadgenArgs) -> Result<(), String> {
    if args.reporters == 0 || args.endpoints == 0 || args.clusters == 0 || args.connections == 0 {
        return Err("reporters, endpoints, clusters and connections must be > 0".into());
    }
    if let Some(done) = run_fresh_servers(&args).await {
        return done;
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
    if args.callers_matrix {
        return callers::run(addr, args.md.as_deref()).await;
    }
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
            inprocess::time_inprocess(&fleet, args.inprocess_reports)
        }),
    };
    publish(&args, &results, markdown(&results))
}
