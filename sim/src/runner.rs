//! One run per policy on the same trace (same arrivals, same service-time draws), optionally on
//! several threads; and the sweep over load.

use crate::arrivals::Arrivals;
use crate::dist::derive_seed;
use crate::engine::{Engine, Measured};
use crate::policy::cswrr::Cswrr;
use crate::policy::least_request::LeastRequest;
use crate::policy::operator::Operator;
use crate::policy::peak_ewma::PeakEwmaP2c;
use crate::policy::prequal::Prequal;
use crate::policy::round_robin::RoundRobin;
use crate::policy::tailweight::Tailweight;
use crate::policy::{Ideal, Policy};
use crate::results::{fmt_ms, PolicyResult, RunResult};
use crate::scenario::POLICIES;
use crate::setup::{check_policy, Setup};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tailweight_sidecar::FilterConfig;

/// Stream numbers for derived seeds.
const TRACE_STREAM: u64 = 1;
const POLICY_STREAM: u64 = 100;

/// The filter's configuration for the tailweight policies: the plugin JSON (empty = defaults).
/// Unless the JSON sets `max_endpoints_per_cluster`, it is raised to the endpoint count so that a
/// large cluster is not cut at the filter's default.
pub fn filter_config(json: &str, endpoints: usize) -> Result<FilterConfig, String> {
    let mut config = FilterConfig::parse(json.as_bytes()).map_err(|e| format!("filter config: {e}"))?;
    if !json.contains("max_endpoints_per_cluster") {
        config.max_endpoints_per_cluster = config.max_endpoints_per_cluster.max(endpoints);
    }
    Ok(config)
}

fn arrivals(setup: &Setup) -> Result<Arrivals, String> {
    let seed = derive_seed(setup.seed, TRACE_STREAM);
    match &setup.trace {
        None => Ok(Arrivals::poisson(setup.qps, setup.clients, setup.service, setup.end_ns(), seed)),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("trace {path}: {e}"))?;
            Arrivals::trace(&text, setup.clients, setup.service, setup.end_ns(), seed)
        }
    }
}

fn simulate<P: Policy>(setup: &Setup, policy: P) -> Result<(Measured, P), String> {
    let mut engine = Engine::new(setup, policy, arrivals(setup)?);
    let m = engine.run();
    Ok((m, engine.into_policy()))
}

/// CPU time this thread has run (Linux schedstat), so that speed on a shared machine is measured
/// per core actually used.
fn thread_cpu_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// Simulate one policy on the setup's trace.
pub fn run_policy(setup: &Setup, name: &str, filter: &FilterConfig) -> Result<PolicyResult, String> {
    check_policy(name)?;
    let (c, e) = (setup.clients, setup.endpoints.len() as u32);
    let index = POLICIES.iter().position(|p| *p == name).unwrap_or(0) as u64;
    let seed = derive_seed(setup.seed, POLICY_STREAM + index);
    let started = Instant::now();
    let cpu_before = thread_cpu_s();
    let mut extra = BTreeMap::new();
    let m = match name {
        "round_robin" => simulate(setup, RoundRobin::new(c, e, seed))?.0,
        "least_request" => simulate(setup, LeastRequest::new(c, e, seed))?.0,
        "peak_ewma" => simulate(setup, PeakEwmaP2c::new(c, e, seed))?.0,
        "cswrr_orca" => simulate(setup, Cswrr::new(c, e, setup.cswrr, seed))?.0,
        "operator" => {
            let capacities: Vec<f64> = setup.endpoints.iter().map(|s| s.capacity_rps()).collect();
            simulate(setup, Operator::new(c, &capacities, seed))?.0
        }
        "prequal" => {
            let (m, pq) = simulate(setup, Prequal::new(c, e, &setup.prequal, seed))?;
            let s = pq.stats;
            let picks = s.picks.max(1) as f64;
            extra.insert("prequal_random_share".into(), s.random_picks as f64 / picks);
            extra.insert("prequal_hot_share".into(), s.hot_picks as f64 / picks);
            extra.insert("prequal_mean_pool".into(), s.pooled_sum as f64 / picks);
            extra.insert("prequal_probes_per_query".into(), s.probes_sent as f64 / picks);
            m
        }
        "tailweight_local" | "tailweight" => {
            let (m, tw) = simulate(setup, Tailweight::new(c, e, filter, name == "tailweight", &setup.variant, seed))?;
            let picks = (tw.steered + tw.fallbacks).max(1) as f64;
            extra.insert("fallback_share".to_string(), tw.fallbacks as f64 / picks);
            extra.insert("rejected_reports".to_string(), tw.rejected_reports() as f64);
            if filter.health_check.is_some() {
                let checks = &tw.health_checks;
                let (peak, mean) = checks.peak_and_mean_per_endpoint_s();
                extra.insert("health_checks_sent".into(), checks.sent as f64);
                extra.insert("health_checks_to_down".into(), checks.to_down as f64);
                extra.insert("health_checks_left_to_others".into(), checks.left_to_others as f64);
                extra.insert("readmissions_on_evidence".into(), checks.readmitted_on_evidence as f64);
                extra.insert("health_checks_peak_per_endpoint_s".into(), f64::from(peak));
                extra.insert("health_checks_mean_per_endpoint_s".into(), mean);
            }
            if let Some(cost) = tw.aggregator_cost() {
                let simulated_s = (setup.warmup_ns + setup.duration_ns) as f64 / 1e9;
                let reports = cost.reports.max(1) as f64;
                extra.insert("aggregator_reports_per_s".into(), cost.reports as f64 / simulated_s);
                extra.insert("aggregator_entries_per_report".into(), cost.report_entries as f64 / reports);
                extra.insert("aggregator_delta_entries_per_report".into(), cost.delta_entries as f64 / reports);
                extra.insert("aggregator_report_bytes_per_entry".into(), cost.report_bytes_per_entry());
                extra.insert("aggregator_reply_entries_per_reply".into(), cost.reply_entries as f64 / reports);
                extra.insert("aggregator_reply_bytes_per_entry".into(), cost.reply_bytes_per_entry());
            }
            // Each backend group's share of the aggregator's final weights (next to its capacity share).
            let weights = tw.view_weights();
            let total: f64 = weights.iter().map(|(_, w)| w).sum();
            for (i, w) in weights {
                if let Some(spec) = setup.endpoints.get(i as usize) {
                    *extra.entry(format!("weight_share_group_{}", spec.group)).or_insert(0.0) += w / total.max(1e-9);
                }
            }
            m
        }
        "ideal" => simulate(setup, Ideal)?.0,
        other => return Err(format!("policy {other:?} is unknown")),
    };
    let mut result = PolicyResult::new(setup, name, &m, started.elapsed().as_secs_f64());
    if let (Some(a), Some(b)) = (cpu_before, thread_cpu_s()) {
        result.cpu_s = Some(b - a);
        result.requests_per_cpu_s = (b > a).then(|| m.arrivals as f64 / (b - a));
    }
    result.extra = extra;
    Ok(result)
}

/// Run `policies` (results in the given order) on up to `threads` threads.
pub fn run_all(setup: &Setup, policies: &[String], filter: &FilterConfig, threads: usize) -> Result<RunResult, String> {
    for p in policies {
        check_policy(p)?;
    }
    let results = parallel(policies.len(), threads, |i| run_policy(setup, &policies[i], filter))?;
    Ok(RunResult::new(setup, results))
}

/// f(0..n) on up to `threads` threads, results in index order; the first error wins.
fn parallel<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<Result<T, String>>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let r = f(i);
                if let Ok(mut s) = slots.lock() {
                    s[i] = Some(r);
                }
            });
        }
    });
    let slots = slots.into_inner().map_err(|_| "a simulation thread panicked".to_string())?;
    slots.into_iter().map(|s| s.unwrap_or_else(|| Err("a simulation did not finish".into()))).collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub load_factor: f64,
    pub qps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepResult {
    pub scenario: String,
    pub seed: u64,
    pub clients: u32,
    pub endpoints: usize,
    pub capacity_rps: f64,
    pub duration_s: f64,
    pub loads: Vec<f64>,
    /// Per policy, one point per load.
    pub policies: BTreeMap<String, Vec<SweepPoint>>,
    pub order: Vec<String>,
}

/// Every policy at every load (as a share of capacity).
pub fn sweep(
    base: &Setup,
    loads: &[f64],
    policies: &[String],
    filter: &FilterConfig,
    threads: usize,
) -> Result<SweepResult, String> {
    for p in policies {
        check_policy(p)?;
    }
    let mut setups = Vec::new();
    for &load in loads {
        if !(load.is_finite() && load > 0.0 && load < 100.0) {
            return Err(format!("loads: {load} is not a share of capacity in (0, 100)"));
        }
        let mut s = base.clone();
        s.qps = load * base.capacity_rps();
        setups.push(s);
    }
    let jobs: Vec<(usize, usize)> = (0..setups.len()).flat_map(|l| (0..policies.len()).map(move |p| (l, p))).collect();
    let results = parallel(jobs.len(), threads, |j| {
        let (l, p) = jobs[j];
        run_policy(&setups[l], &policies[p], filter)
    })?;
    let mut out: BTreeMap<String, Vec<SweepPoint>> = BTreeMap::new();
    for ((l, _), r) in jobs.iter().zip(results) {
        out.entry(r.policy.clone()).or_default().push(SweepPoint {
            load_factor: loads[*l],
            qps: setups[*l].qps,
            p50_ms: r.latency_ms.p50,
            p90_ms: r.latency_ms.p90,
            p99_ms: r.latency_ms.p99,
            p999_ms: r.latency_ms.p999,
            errors: r.errors,
        });
    }
    Ok(SweepResult {
        scenario: base.name.clone(),
        seed: base.seed,
        clients: base.clients,
        endpoints: base.endpoints.len(),
        capacity_rps: base.capacity_rps(),
        duration_s: base.duration_ns as f64 / 1e9,
        loads: loads.to_vec(),
        policies: out,
        order: policies.to_vec(),
    })
}

impl SweepResult {
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## {}: p99 latency (ms) vs load, {} clients, {} endpoints (capacity {:.0} rps), {} s per point, seed {}\n\n",
            self.scenario, self.clients, self.endpoints, self.capacity_rps, self.duration_s, self.seed
        );
        out += "| load |";
        for p in &self.order {
            out += &format!(" {p} |");
        }
        out += "\n| ---: |";
        out += &" ---: |".repeat(self.order.len());
        out += "\n";
        for (i, load) in self.loads.iter().enumerate() {
            out += &format!("| {:.0}% |", load * 100.0);
            for p in &self.order {
                let cell = self.policies.get(p).and_then(|pts| pts.get(i)).map_or("-".into(), |pt| fmt_ms(pt.p99_ms));
                out += &format!(" {cell} |");
            }
            out += "\n";
        }
        out
    }
}
