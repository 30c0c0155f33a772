//! Results in the benchmark's shape: p50/p90/p99/p99.9, errors, per-endpoint share, reaction time
//! after each scenario event; written as JSON and as a markdown table.

use crate::engine::{Measured, SERIES_WINDOW_NS};
use crate::settle::SETTLE;
use crate::setup::{EventAction, Setup};
use crate::steady::{p99_by_second_ms, steady_state, SteadyState, COLD_START_BAND, STEADY_SHARE};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub mean: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupShare {
    pub group: usize,
    pub endpoints: usize,
    /// The group's speed factor (service time multiplier) in the file.
    pub speed: f64,
    /// Share of all requests the group's endpoints got, and its share of the capacity.
    pub share: f64,
    pub capacity_share: f64,
    /// Mean time its requests waited in the endpoints' queues before service (recorded part).
    pub mean_wait_ms: f64,
    /// Share of the requests sent in the run's opening (`steady::OPENING_NS`, warm-up included)
    /// that the group's endpoints got.
    pub opening_share: f64,
}

/// How traffic to an event's endpoints settled, defined as the benchmark harness does (`settle`:
/// sim/settle-analysis.json, shared): the share of requests they got over a trailing window
/// (share_window_s), sampled every sample_s; `settle_s` = seconds from the event until that share
/// stays within band x its final value (the mean of the samples in the last final_window_s before
/// the next event or the end); None when still outside at the last sample.
#[derive(Debug, Clone, Serialize)]
pub struct Reaction {
    pub event: usize,
    /// Seconds from the start of the recorded part.
    pub at_s: f64,
    pub action: String,
    pub endpoints: usize,
    /// Share in the before_window_s before the event.
    pub share_before: f64,
    pub final_share: f64,
    pub settle_s: Option<f64>,
    /// The sampled shares: (seconds after the event, share).
    pub samples: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    pub policy: String,
    pub requests: u64,
    pub errors: u64,
    pub latency_ms: Latency,
    /// Mean time a request waited in an endpoint's queue before service.
    pub mean_wait_ms: f64,
    pub groups: Vec<GroupShare>,
    pub per_endpoint_share: Vec<f64>,
    pub reactions: Vec<Reaction>,
    /// The steady-state p99 and how long the cold start took (see `steady`).
    pub steady_state: Option<SteadyState>,
    /// p99 (ms) of the requests that arrived in each second of the run, warm-up included.
    pub p99_by_second_ms: Vec<f64>,
    /// Requests that waited in their client for a free connection (connection limit only).
    pub delayed: u64,
    /// Every request simulated (warm-up included), the wall time it took, and their ratio.
    pub simulated_requests: u64,
    pub wall_s: f64,
    pub requests_per_wall_s: f64,
    /// CPU time of the simulating thread, and simulated requests per CPU second (when known).
    pub cpu_s: Option<f64>,
    pub requests_per_cpu_s: Option<f64>,
    /// Conservation check: answers minus arrivals, and answers for requests not in flight.
    pub unanswered: i64,
    pub anomalies: u64,
    /// Policy-specific figures (e.g. tailweight's share of fallback picks).
    pub extra: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub scenario: String,
    pub seed: u64,
    pub clients: u32,
    pub endpoints: usize,
    pub capacity_rps: f64,
    pub qps: f64,
    pub load_factor: f64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub connection_limit: bool,
    pub network_delay_ms: f64,
    pub policies: Vec<PolicyResult>,
}

fn ms(ns: f64) -> f64 {
    (ns / 1e6 * 1_000.0).round() / 1_000.0
}

impl PolicyResult {
    pub fn new(setup: &Setup, policy: &str, m: &Measured, wall_s: f64) -> PolicyResult {
        let h = &m.latency;
        let total = m.recorded.max(1) as f64;
        let per_endpoint_share: Vec<f64> = m.per_endpoint.iter().map(|&c| c as f64 / total).collect();
        let capacity = setup.capacity_rps();
        let mut groups: BTreeMap<usize, GroupShare> = BTreeMap::new();
        for (spec, share) in setup.endpoints.iter().zip(&per_endpoint_share) {
            let g = groups.entry(spec.group).or_insert(GroupShare {
                group: spec.group,
                endpoints: 0,
                speed: spec.speed,
                share: 0.0,
                capacity_share: 0.0,
                mean_wait_ms: 0.0,
                opening_share: 0.0,
            });
            g.endpoints += 1;
            g.share += share;
            g.capacity_share += spec.capacity_rps() / capacity;
        }
        let opening_total = m.opening_per_endpoint.iter().sum::<u64>().max(1) as f64;
        for (spec, sent) in setup.endpoints.iter().zip(&m.opening_per_endpoint) {
            if let Some(g) = groups.get_mut(&spec.group) {
                g.opening_share += *sent as f64 / opening_total;
            }
        }
        let mut waits: BTreeMap<usize, (f64, u64)> = BTreeMap::new();
        for (i, spec) in setup.endpoints.iter().enumerate() {
            let w = waits.entry(spec.group).or_default();
            w.0 += m.per_endpoint_wait_ns.get(i).copied().unwrap_or(0.0);
            w.1 += m.per_endpoint_served.get(i).copied().unwrap_or(0);
        }
        for (group, (wait, served)) in waits {
            if let Some(g) = groups.get_mut(&group) {
                g.mean_wait_ms = ms(wait / served.max(1) as f64);
            }
        }
        PolicyResult {
            policy: policy.to_string(),
            requests: m.recorded,
            errors: m.errors,
            latency_ms: Latency {
                p50: ms(h.quantile(0.5) as f64),
                p90: ms(h.quantile(0.9) as f64),
                p99: ms(h.quantile(0.99) as f64),
                p999: ms(h.quantile(0.999) as f64),
                mean: ms(h.mean()),
                max: ms(h.max() as f64),
            },
            mean_wait_ms: ms(m.wait_sum_ns / m.served.max(1) as f64),
            groups: groups.into_values().collect(),
            per_endpoint_share,
            reactions: reactions(setup, m),
            steady_state: steady_state(&m.per_second, setup.warmup_ns as f64 / 1e9, setup.end_ns() as f64 / 1e9),
            p99_by_second_ms: p99_by_second_ms(&m.per_second),
            delayed: m.delayed,
            simulated_requests: m.arrivals,
            wall_s,
            requests_per_wall_s: if wall_s > 0.0 { m.arrivals as f64 / wall_s } else { 0.0 },
            cpu_s: None,
            requests_per_cpu_s: None,
            unanswered: m.arrivals as i64 - m.completions as i64,
            anomalies: m.anomalies,
            extra: BTreeMap::new(),
        }
    }
}

/// Share of requests sent to an event's endpoints over windows [from, to).
fn share(sent: &[u32], to_event: &[u32], from: usize, to: usize) -> Option<f64> {
    let (from, to) = (from.min(sent.len()), to.min(sent.len()));
    let total: u64 = sent[from..to].iter().map(|&x| x as u64).sum();
    let hit: u64 = to_event[from..to].iter().map(|&x| x as u64).sum();
    (total > 0).then(|| hit as f64 / total as f64)
}

/// Seconds as a whole number of series windows.
fn windows(seconds: f64) -> usize {
    (seconds * 1e9 / SERIES_WINDOW_NS as f64).round() as usize
}

fn reactions(setup: &Setup, m: &Measured) -> Vec<Reaction> {
    let w = |ns: u64| (ns / SERIES_WINDOW_NS) as usize;
    let (sample, share_window) = (windows(SETTLE.sample_s), windows(SETTLE.share_window_s));
    let (final_window, before) = (windows(SETTLE.final_window_s), windows(SETTLE.before_window_s));
    let end = w(setup.end_ns());
    setup
        .events
        .iter()
        .zip(&m.event_series)
        .enumerate()
        .map(|(i, (ev, series))| {
            let at = w(ev.at_ns);
            let next = setup.events.get(i + 1).map_or(end, |n| w(n.at_ns)).max(at + 1);
            // (window index at the sample's end, share over the trailing second)
            let samples: Vec<(usize, f64)> = (at + sample..=next)
                .step_by(sample)
                .filter_map(|k| share(&m.sent_series, series, k.saturating_sub(share_window), k).map(|s| (k, s)))
                .collect();
            let last = samples.last().map_or(next, |(k, _)| *k);
            let finals: Vec<f64> = samples.iter().filter(|(k, _)| *k + final_window >= last).map(|(_, s)| *s).collect();
            let final_share = if finals.is_empty() { 0.0 } else { finals.iter().sum::<f64>() / finals.len() as f64 };
            let outside = |s: f64| (s - final_share).abs() > SETTLE.band * final_share;
            let settle_s = match samples.iter().rposition(|(_, s)| outside(*s)) {
                None if samples.is_empty() => None,
                None => Some(0.0),
                Some(j) if j + 1 == samples.len() => None,
                Some(j) => Some((samples[j + 1].0 - at) as f64 * SERIES_WINDOW_NS as f64 / 1e9),
            };
            Reaction {
                event: i,
                at_s: (ev.at_ns - setup.warmup_ns) as f64 / 1e9,
                action: match ev.action {
                    EventAction::Speed => format!("speed x{}", ev.value.unwrap_or(1.0)),
                    EventAction::Fail => "fail".into(),
                    EventAction::Stop => "stop".into(),
                    EventAction::Recover => "recover".into(),
                },
                endpoints: ev.endpoints.len(),
                share_before: share(&m.sent_series, series, at.saturating_sub(before), at).unwrap_or(0.0),
                final_share,
                settle_s,
                samples: samples.iter().map(|&(k, s)| ((k - at) as f64 * SERIES_WINDOW_NS as f64 / 1e9, s)).collect(),
            }
        })
        .collect()
}

impl RunResult {
    pub fn new(setup: &Setup, policies: Vec<PolicyResult>) -> RunResult {
        RunResult {
            scenario: setup.name.clone(),
            seed: setup.seed,
            clients: setup.clients,
            endpoints: setup.endpoints.len(),
            capacity_rps: setup.capacity_rps(),
            qps: setup.qps,
            load_factor: setup.load_factor(),
            warmup_s: setup.warmup_ns as f64 / 1e9,
            duration_s: setup.duration_ns as f64 / 1e9,
            connection_limit: setup.connection_limit,
            network_delay_ms: setup.network_delay_ns as f64 / 1e6,
            policies,
        }
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## {}: {} clients, {} endpoints, {:.0} rps ({:.0}% of capacity {:.0} rps), {} s recorded after {} s warm-up, seed {}{}\n\n",
            self.scenario,
            self.clients,
            self.endpoints,
            self.qps,
            self.load_factor * 100.0,
            self.capacity_rps,
            self.duration_s,
            self.warmup_s,
            self.seed,
            if self.connection_limit { ", connection-limited like Fortio" } else { ", open loop" },
        );
        let groups = self.policies.first().map(|p| p.groups.clone()).unwrap_or_default();
        let group_names: Vec<String> = groups
            .iter()
            .map(|g| format!("{} x speed {} ({:.1}% of capacity)", g.endpoints, g.speed, g.capacity_share * 100.0))
            .collect();
        out += &format!("Share columns are per backend group: {}. ", group_names.join("; "));
        out += &format!(
            "Steady p99: the requests that arrived in the last {:.0}% of the recorded part; cold start: seconds from the start of the run until every 1 s window's p99 stays within {} x that.\n\n",
            STEADY_SHARE * 100.0,
            COLD_START_BAND
        );
        out += "| policy | p50 ms | p90 ms | p99 ms | p99.9 ms | mean ms | steady p99 ms | cold start s | errors | share by group % | first 3 s share by group % | settle s after events | requests | sim req/s (wall) |\n";
        out += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: |\n";
        for p in &self.policies {
            let l = &p.latency_ms;
            let shares: Vec<String> = p.groups.iter().map(|g| format!("{:.1}", g.share * 100.0)).collect();
            let opening: Vec<String> = p.groups.iter().map(|g| format!("{:.1}", g.opening_share * 100.0)).collect();
            let reactions: Vec<String> =
                p.reactions.iter().map(|r| r.settle_s.map_or("never".into(), |t| format!("{t:.1}"))).collect();
            let (steady_p99, cold_start) = p
                .steady_state
                .map_or(("n/a".into(), "n/a".into()), |s| (fmt_ms(s.p99_ms), format!("{:.0}", s.cold_start_s)));
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2e} |\n",
                p.policy,
                fmt_ms(l.p50),
                fmt_ms(l.p90),
                fmt_ms(l.p99),
                fmt_ms(l.p999),
                fmt_ms(l.mean),
                steady_p99,
                cold_start,
                p.errors,
                shares.join(" / "),
                opening.join(" / "),
                if reactions.is_empty() { "n/a".into() } else { reactions.join(", ") },
                p.requests,
                p.requests_per_wall_s,
            );
        }
        out
    }
}

pub fn fmt_ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}
