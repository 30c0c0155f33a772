//! `tailweight endpoints`: one row per endpoint of one cluster, from what a client sidecar's admin
//! interface and the aggregator expose. Pure: the caller fetches the pages and passes their text.
//!
//! - The sidecar's `/stats` (with `per_endpoint_metrics`): `wasmcustom.tailweight.endpoint.<ip>:<port>.<cluster>.`
//!   `picks` (a counter) and the gauges `state`, `latency_us`, `inflight` (the picker's view; see
//!   the filter's `metrics.rs`), and `wasmcustom.tailweight.weights_age_ms` (the view's age).
//! - The sidecar's `/clusters?format=json`: the endpoints Envoy has now (gauges of gone endpoints
//!   stay in /stats: Envoy cannot delete a metric).
//! - The aggregator's `GET /v1/weights?cluster=<name>`: each endpoint's weight and ejection.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

const ENDPOINT_PREFIX: &str = "wasmcustom.tailweight.endpoint.";
const VIEW_AGE: &str = "wasmcustom.tailweight.weights_age_ms";

/// One endpoint's per-endpoint stats in one /stats page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointStats {
    pub picks: Option<u64>,
    pub state: Option<u64>,
    pub latency_us: Option<u64>,
    pub inflight: Option<u64>,
}

/// A /stats page's per-endpoint stats of `cluster`, by address, and the view's age (ms).
pub fn parse_stats(text: &str, cluster: &str) -> (BTreeMap<String, EndpointStats>, Option<u64>) {
    let mut out: BTreeMap<String, EndpointStats> = BTreeMap::new();
    let mut view_age_ms = None;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else { continue };
        let Ok(value) = value.trim().parse::<u64>() else { continue };
        if name == VIEW_AGE {
            view_age_ms = Some(value);
            continue;
        }
        let Some(rest) = name.strip_prefix(ENDPOINT_PREFIX) else { continue };
        let Some((head, metric)) = rest.rsplit_once('.') else { continue };
        let Some(address) = head.strip_suffix(cluster).and_then(|a| a.strip_suffix('.')) else { continue };
        let entry = out.entry(address.to_string()).or_default();
        match metric {
            "picks" => entry.picks = Some(value),
            "state" => entry.state = Some(value),
            "latency_us" => entry.latency_us = Some(value),
            "inflight" => entry.inflight = Some(value),
            _ => {}
        }
    }
    (out, view_age_ms)
}

/// The addresses (`ip:port`, IPv6 in brackets) Envoy has in `cluster`, from `/clusters?format=json`.
/// Err: the page is not that JSON, or has no such cluster.
pub fn parse_clusters(json: &str, cluster: &str) -> Result<Vec<String>, String> {
    let page: Value = serde_json::from_str(json).map_err(|e| format!("/clusters: not JSON: {e}"))?;
    let statuses = page["cluster_statuses"].as_array().ok_or("/clusters: no cluster_statuses")?;
    let found = statuses
        .iter()
        .find(|c| c["name"] == cluster)
        .ok_or_else(|| format!("/clusters: the sidecar has no cluster {cluster:?}"))?;
    let hosts = found["host_statuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(hosts
        .iter()
        .filter_map(|h| {
            let socket = &h["address"]["socket_address"];
            let (ip, port) = (socket["address"].as_str()?, socket["port_value"].as_u64()?);
            Some(if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") })
        })
        .collect())
}

/// The aggregator's weight and ejection of each endpoint, from `GET /v1/weights?cluster=`.
pub fn parse_weights(json: &str) -> Result<BTreeMap<String, (f64, bool)>, String> {
    let page: Value = serde_json::from_str(json).map_err(|e| format!("/v1/weights: not JSON: {e}"))?;
    let endpoints = page["clusters"][0]["endpoints"].as_array().ok_or("/v1/weights: no clusters[0].endpoints")?;
    Ok(endpoints
        .iter()
        .filter_map(|e| Some((e["address"].as_str()?.to_string(), (e["weight"].as_f64()?, e["ejected"].as_bool()?))))
        .collect())
}

/// The picker's state gauge as a word (`tailweight_picker::inspect::EndpointState`).
pub fn state_name(state: Option<u64>) -> &'static str {
    match state {
        Some(0) => "healthy",
        Some(1) => "ramping",
        Some(2) => "suspended",
        Some(3) => "ejected",
        Some(4) => "refused",
        Some(_) => "unknown",
        None => "untracked",
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The pod with this address, from the apiserver (None: not asked, or no pod has it).
    pub pod: Option<String>,
    pub address: String,
    /// Of this sidecar's picks in the window, the endpoint's share (None: no picks at all).
    pub share: Option<f64>,
    pub picks: u64,
    /// From the aggregator (None: not asked, or it does not hold the endpoint).
    pub weight: Option<f64>,
    pub aggregator_ejected: Option<bool>,
    pub latency_ms: Option<f64>,
    pub inflight: Option<u64>,
    pub state: &'static str,
}

/// What `-o json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub cluster: String,
    pub view_age_ms: Option<u64>,
    pub window_s: f64,
    pub endpoints: Vec<Row>,
}

/// The rows: each endpoint Envoy has in the cluster (`hosts`), with its picks between `before` and
/// `after` (two /stats readings; `before` empty: since the sidecar started), the picker's gauges as
/// of `after`, the aggregator's `weights` when given, and the pod names (`pods`, by IP).
pub fn rows(
    hosts: &[String],
    before: &BTreeMap<String, EndpointStats>,
    after: &BTreeMap<String, EndpointStats>,
    weights: Option<&BTreeMap<String, (f64, bool)>>,
    pods: &BTreeMap<String, String>,
) -> Vec<Row> {
    let picks_of = |address: &str| {
        let now = after.get(address).and_then(|s| s.picks).unwrap_or(0);
        now.saturating_sub(before.get(address).and_then(|s| s.picks).unwrap_or(0))
    };
    let total: u64 = hosts.iter().map(|h| picks_of(h)).sum();
    hosts
        .iter()
        .map(|address| {
            let stats = after.get(address).cloned().unwrap_or_default();
            let picks = picks_of(address);
            let from_aggregator = weights.and_then(|w| w.get(address)).copied();
            Row {
                pod: pods.get(crate::pods::ip_of(address)).cloned(),
                address: address.clone(),
                share: (total > 0).then(|| picks as f64 / total as f64),
                picks,
                weight: from_aggregator.map(|(w, _)| w),
                aggregator_ejected: from_aggregator.map(|(_, e)| e),
                latency_ms: stats.latency_us.filter(|us| *us > 0).map(|us| us as f64 / 1_000.0),
                inflight: stats.inflight,
                state: state_name(stats.state),
            }
        })
        .collect()
}

/// The report as an aligned text table; its first column is the endpoints' pods when the
/// apiserver named any (otherwise the addresses lead, as without Kubernetes).
pub fn table(report: &Report) -> String {
    let with_pods = report.endpoints.iter().any(|r| r.pod.is_some());
    let header = ["POD", "ENDPOINT", "SHARE", "PICKS", "WEIGHT", "LATENCY", "INFLIGHT", "STATE"];
    let dash = || "-".to_string();
    let mut lines: Vec<[String; 8]> = vec![header.map(String::from)];
    for r in &report.endpoints {
        lines.push([
            r.pod.clone().unwrap_or_else(dash),
            r.address.clone(),
            r.share.map_or_else(dash, |s| format!("{:.1}%", s * 100.0)),
            r.picks.to_string(),
            r.weight.map_or_else(dash, |w| format!("{w:.3}")),
            r.latency_ms.map_or_else(dash, |ms| format!("{ms:.1}ms")),
            r.inflight.map_or_else(dash, |n| n.to_string()),
            r.state.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0)).collect();
    let mut out = format!(
        "cluster {}  view age {}  picks over {}\n",
        report.cluster,
        report.view_age_ms.map_or_else(|| "-".to_string(), |ms| format!("{ms}ms")),
        if report.window_s > 0.0 { format!("the last {}s", report.window_s) } else { "the sidecar's life".into() }
    );
    let skip = usize::from(!with_pods);
    for line in &lines {
        let cells: Vec<String> = line.iter().zip(&widths).skip(skip).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "outbound|8080||cart.shop.svc.cluster.local";

    fn stats(picks: [u64; 2]) -> String {
        format!(
            "wasmcustom.tailweight.endpoint.10.0.0.1:8080.{CLUSTER}.picks: {}\n\
             wasmcustom.tailweight.endpoint.10.0.0.1:8080.{CLUSTER}.state: 2\n\
             wasmcustom.tailweight.endpoint.10.0.0.1:8080.{CLUSTER}.latency_us: 2500\n\
             wasmcustom.tailweight.endpoint.10.0.0.1:8080.{CLUSTER}.inflight: 3\n\
             wasmcustom.tailweight.endpoint.[fd00::2]:8080.{CLUSTER}.picks: {}\n\
             wasmcustom.tailweight.endpoint.10.0.0.1:8080.other.picks: 99\n\
             wasmcustom.tailweight.weights_age_ms: 420\n\
             cluster.x.upstream_rq_total: 7\n",
            picks[0], picks[1]
        )
    }

    #[test]
    fn stats_of_the_cluster_by_address() {
        let (by_address, age) = parse_stats(&stats([10, 30]), CLUSTER);
        assert_eq!(age, Some(420));
        assert_eq!(by_address.len(), 2);
        let first = &by_address["10.0.0.1:8080"];
        assert_eq!(
            (first.picks, first.state, first.latency_us, first.inflight),
            (Some(10), Some(2), Some(2500), Some(3))
        );
        assert_eq!(by_address["[fd00::2]:8080"].picks, Some(30));
    }

    #[test]
    fn rows_share_the_window_picks_and_join_the_aggregator() {
        let (before, _) = parse_stats(&stats([10, 30]), CLUSTER);
        let (after, _) = parse_stats(&stats([40, 120]), CLUSTER);
        let hosts = vec!["10.0.0.1:8080".to_string(), "[fd00::2]:8080".to_string(), "10.0.0.3:8080".to_string()];
        let weights =
            parse_weights(r#"{"clusters":[{"endpoints":[{"address":"10.0.0.1:8080","weight":0.5,"ejected":true}]}]}"#)
                .unwrap();
        let pods = BTreeMap::from([("10.0.0.1".to_string(), "cart-7d9f".to_string())]);
        let rows = rows(&hosts, &before, &after, Some(&weights), &pods);
        assert_eq!((rows[0].pod.as_deref(), rows[1].pod.as_deref()), (Some("cart-7d9f"), None));
        assert_eq!(rows.iter().map(|r| r.picks).collect::<Vec<_>>(), [30, 90, 0]);
        assert_eq!(rows[0].share, Some(0.25));
        assert_eq!((rows[0].weight, rows[0].aggregator_ejected, rows[0].state), (Some(0.5), Some(true), "suspended"));
        assert_eq!((rows[0].latency_ms, rows[0].inflight), (Some(2.5), Some(3)));
        assert_eq!((rows[2].state, rows[2].weight, rows[2].share), ("untracked", None, Some(0.0)));
        let mut report = Report { cluster: CLUSTER.into(), view_age_ms: Some(420), window_s: 2.0, endpoints: rows };
        let text = table(&report);
        assert!(
            text.lines()
                .nth(2)
                .unwrap()
                .starts_with("cart-7d9f  10.0.0.1:8080   25.0%  30     0.500   2.5ms    3         suspended"),
            "{text}"
        );
        assert!(text.lines().nth(3).unwrap().starts_with("-          [fd00::2]:8080"), "{text}");
        // No pod named: the addresses lead, as without Kubernetes.
        report.endpoints.iter_mut().for_each(|r| r.pod = None);
        let text = table(&report);
        assert!(text.lines().nth(1).unwrap().starts_with("ENDPOINT  "), "{text}");
        assert!(text.lines().nth(2).unwrap().starts_with("10.0.0.1:8080   25.0%  30     0.500"), "{text}");
    }

    #[test]
    fn clusters_page_gives_the_current_hosts() {
        let page = format!(
            r#"{{"cluster_statuses":[{{"name":"{CLUSTER}","host_statuses":[
            {{"address":{{"socket_address":{{"address":"10.0.0.1","port_value":8080}}}}}},
            {{"address":{{"socket_address":{{"address":"fd00::2","port_value":8080}}}}}}]}}]}}"#
        );
        assert_eq!(parse_clusters(&page, CLUSTER).unwrap(), ["10.0.0.1:8080", "[fd00::2]:8080"]);
        assert!(parse_clusters(&page, "nope").unwrap_err().contains("no cluster \"nope\""));
        assert!(parse_clusters("<html>", CLUSTER).unwrap_err().starts_with("/clusters: not JSON"));
    }
}
