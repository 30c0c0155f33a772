//! What the hostile run observes: the weights before and after (and how far they moved), the
//! aggregator's own counters, and how busy the machine was.

use crate::drive::connect;
use crate::fleet::Fleet;
use crate::process::{cpu_seconds, rss_kib};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How far the attackers moved one set of clusters' weights (see `moved`).
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Moved {
    pub clusters: usize,
    pub endpoints: usize,
    /// The largest relative change of an endpoint's share of its cluster's honest endpoints'
    /// weight, attack over baseline (an ejection that differs counts as 1).
    pub max_share_change: f64,
    pub mean_share_change: f64,
    pub ejections_flipped: usize,
}

/// How busy the machine was: its load before, and the CPU others used while the attack ran.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Machine {
    pub cpus: usize,
    pub loadavg_before: String,
    pub loadavg_after: String,
    /// CPU the whole machine used during the attack, in cores, and of it the aggregator's and the
    /// driver's.
    pub busy_cores: Option<f64>,
    pub aggregator_cores: Option<f64>,
    pub driver_cores: Option<f64>,
}

impl Machine {
    /// The machine's CPUs and its load now.
    pub fn now() -> Machine {
        Machine {
            cpus: std::fs::read_to_string("/proc/cpuinfo")
                .map_or(0, |c| c.lines().filter(|l| l.starts_with("processor")).count()),
            loadavg_before: loadavg(),
            ..Machine::default()
        }
    }

    /// The CPU used from `before` to `after`, `secs` apart, in cores.
    pub fn used(&mut self, before: CpuUse, after: CpuUse, ticks: f64, secs: f64) {
        self.busy_cores = before.machine.zip(after.machine).map(|(b0, b1)| (b1 - b0) / ticks / secs);
        self.aggregator_cores = before.aggregator.zip(after.aggregator).map(|(x, y)| (y - x) / secs);
        self.driver_cores = before.driver.zip(after.driver).map(|(x, y)| (y - x) / secs);
    }
}

/// CPU used so far: the machine's busy jiffies, the aggregator's and this driver's CPU seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuUse {
    machine: Option<f64>,
    aggregator: Option<f64>,
    driver: Option<f64>,
}

impl CpuUse {
    /// Now, for the aggregator `server` (its pid and the clock ticks per second).
    pub fn now(server: Option<(u32, f64)>, ticks: f64) -> CpuUse {
        CpuUse {
            machine: machine_busy(),
            aggregator: server.and_then(|(p, t)| cpu_seconds(p, t)),
            driver: cpu_seconds(std::process::id(), ticks),
        }
    }
}

/// Total busy jiffies of all CPUs (/proc/stat).
fn machine_busy() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<f64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let total: f64 = cpu.iter().take(8).sum();
    Some(total - cpu.get(3)? - cpu.get(4).copied().unwrap_or(0.0))
}

/// The largest RSS of `pid` (KiB) sampled every 500 ms until `deadline` (the kernel's high-water
/// mark, VmHWM, is read at the end; this is the peak during the attack alone).
pub(crate) fn sample_rss(pid: Option<u32>, deadline: Instant) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut peak = 0u64;
        while Instant::now() < deadline {
            peak = peak.max(pid.and_then(rss_kib).map_or(0, |(rss, _)| rss));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        peak
    })
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// GET `path`, the body as text (None on any failure).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = connect(addr).await.ok()?;
    let request = hyper::Request::get(path).header(hyper::header::HOST, "x").body(Full::new(Bytes::new())).ok()?;
    let response = s.send_request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// Every cluster's endpoints: address -> (weight, ejected), through the pages of /v1/weights.
pub(crate) async fn weights(addr: SocketAddr) -> HashMap<String, HashMap<String, (f64, bool)>> {
    let mut out = HashMap::new();
    let mut after = String::new();
    for _ in 0..1_000 {
        let path = format!("/v1/weights?limit=1024&after={}", percent_encode(&after));
        let Some(page) = get(addr, &path).await else { break };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&page) else { break };
        for c in v["clusters"].as_array().into_iter().flatten() {
            let endpoints = c["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    Some((e["address"].as_str()?.to_string(), (e["weight"].as_f64()?, e["ejected"].as_bool()?)))
                })
                .collect();
            out.insert(c["name"].as_str().unwrap_or_default().to_string(), endpoints);
        }
        match v["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    out
}

/// Query-string encoding of a cluster name (`|` and the rest outside the unreserved set).
pub(crate) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) type Snapshot = HashMap<String, HashMap<String, (f64, bool)>>;

/// How far the weights of `clusters` moved from `before` to `after`: per cluster, each honest
/// endpoint's share of the honest endpoints' weight (`w_e / sum w`), after over before, minus 1
/// (an ejection that differs: 1).
pub(crate) fn moved(fleet: &Fleet, clusters: std::ops::Range<usize>, before: &Snapshot, after: &Snapshot) -> Moved {
    let mut m = Moved::default();
    let mut sum = 0.0;
    for c in clusters {
        let name = Fleet::cluster_name(c);
        let (Some(b), Some(a)) = (before.get(&name), after.get(&name)) else { continue };
        let honest: Vec<String> = (0..fleet.endpoints).map(|e| Fleet::address(c, e)).collect();
        let total =
            |s: &HashMap<String, (f64, bool)>| honest.iter().filter_map(|e| s.get(e)).map(|(w, _)| w).sum::<f64>();
        let (tb, ta) = (total(b), total(a));
        m.clusters += 1;
        for e in &honest {
            let (Some((wb, eb)), Some((wa, ea))) = (b.get(e), a.get(e)) else { continue };
            let change = if eb != ea {
                m.ejections_flipped += 1;
                1.0
            } else if tb > 0.0 && ta > 0.0 && *wb > 0.0 {
                ((wa / ta) / (wb / tb) - 1.0).abs()
            } else {
                0.0
            };
            m.endpoints += 1;
            m.max_share_change = m.max_share_change.max(change);
            sum += change;
        }
    }
    m.mean_share_change = if m.endpoints > 0 { sum / m.endpoints as f64 } else { 0.0 };
    m
}

/// The aggregator's counters and gauges of interest, from /metrics.
pub(crate) async fn aggregator_metrics(addr: SocketAddr) -> BTreeMap<String, f64> {
    let page = get(addr, "/metrics").await.unwrap_or_default();
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            [
                "tailweight_reports_",
                "tailweight_requests_shed",
                "tailweight_connections",
                "tailweight_book_bytes",
                "tailweight_principals",
                "tailweight_reporters_live",
                "tailweight_observations",
                "tailweight_endpoints",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter(|l| !l.contains("_bucket") && !l.contains("_sum") && !l.contains("_count"))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// The refusal and shed counters of `metrics`, by reason: `reason=n, ...`.
pub(crate) fn refusals(metrics: &BTreeMap<String, f64>) -> String {
    let counted: Vec<String> = metrics
        .iter()
        .filter(|(k, _)| k.contains("_rejected_total") || k.contains("_shed_total"))
        .map(|(k, v)| {
            let reason = k.split("reason=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or(k);
            let kind = if k.contains("_shed_") { "shed" } else { "refused" };
            format!("{kind} {reason}: {v:.0}")
        })
        .collect();
    if counted.is_empty() {
        "none".into()
    } else {
        counted.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_each_reason_and_whether_it_was_shed() {
        let metrics = [
            ("tailweight_reports_rejected_total{reason=\"memory_budget\"}", 7.0),
            ("tailweight_requests_shed_total{reason=\"memory\"}", 3.0),
            ("tailweight_book_bytes", 9.0),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into_iter()
        .collect();
        assert_eq!(refusals(&metrics), "refused memory_budget: 7, shed memory: 3");
        assert_eq!(refusals(&Default::default()), "none");
    }
}
