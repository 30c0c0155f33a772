//! CPU utilisation per endpoint IP from a Prometheus-compatible query API (`/api/v1/query`:
//! Prometheus, VictoriaMetrics, Thanos), polled on its own interval. A failed poll is logged and
//! counted, never fatal: the last values stay until they are too old for the weight book to use.
//! A response is read only within `--cpu-max-response-bytes` and after what it may cost (body and
//! parsed series, `ServiceLimits::cpu_response_cost`) is reserved from the memory budget that
//! requests reserve from too.

use crate::admission::Reservation;
use crate::config::ServiceConfig;
use crate::state::AppState;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailweight_wire::json::escaped;

/// Where the IP of a series comes from.
#[derive(Debug, Clone)]
pub enum IpSource {
    /// A label holding `ip`, `ip:port` or `[ipv6]:port` (e.g. `instance`, `pod_ip`).
    Label(String),
    /// A label holding the pod name, joined to IPs by the series of `query` (labels `pod_label`
    /// and `ip_label`, plus `namespace` when both sides carry it).
    Pod { pod_label: String, query: String, ip_label: String },
}

#[derive(Debug, Clone)]
pub struct CpuSource {
    pub base_url: String,
    pub query: String,
    pub ip: IpSource,
    pub interval: Duration,
    pub timeout: Duration,
    /// The largest response body read, in bytes.
    pub max_response_bytes: usize,
}

impl CpuSource {
    pub fn from_config(c: &ServiceConfig) -> Option<CpuSource> {
        let base_url = c.cpu_url.as_ref()?.trim_end_matches('/').to_string();
        let interval = Duration::from_millis(c.cpu_interval_ms);
        let ip = match &c.cpu_pod_label {
            Some(pod_label) => IpSource::Pod {
                pod_label: pod_label.clone(),
                query: c.cpu_pod_ip_query.clone(),
                ip_label: c.cpu_pod_ip_label.clone(),
            },
            None => IpSource::Label(c.cpu_ip_label.clone()),
        };
        let query = c.cpu_query.replace("{interval}", &format!("{}s", interval.as_secs().max(1)));
        let timeout = Duration::from_millis(c.cpu_timeout_ms);
        let max_response_bytes = usize::try_from(c.cpu_max_response_bytes).unwrap_or(usize::MAX);
        Some(CpuSource { base_url, query, ip, interval, timeout, max_response_bytes })
    }
}

/// Why a poll failed (the `kind` label of `tailweight_cpu_source_errors_total`).
#[derive(Debug, Clone, PartialEq)]
pub enum PollError {
    Request(String),
    Status(u16),
    Decode(String),
    Query(String),
    /// The body is longer than `limit` (declared, or while it was read).
    TooLarge {
        limit: usize,
    },
    /// These bytes of the memory budget were not free (requests in progress hold them).
    Budget(usize),
}

impl PollError {
    pub fn kind(&self) -> &'static str {
        match self {
            PollError::Request(_) => "request",
            PollError::Status(_) => "status",
            PollError::Decode(_) => "decode",
            PollError::Query(_) => "query",
            PollError::TooLarge { .. } => "too_large",
            PollError::Budget(_) => "budget",
        }
    }
}

impl std::fmt::Display for PollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PollError::Request(e) => write!(f, "request failed: {e}"),
            PollError::Status(s) => write!(f, "HTTP status {s}"),
            PollError::Decode(e) => write!(f, "response is not a query result: {e}"),
            PollError::Query(e) => write!(f, "query failed: {e}"),
            PollError::TooLarge { limit } => {
                write!(f, "response is larger than {limit} bytes (--cpu-max-response-bytes); not read further")
            }
            PollError::Budget(bytes) => {
                write!(f, "{bytes} bytes of the memory budget are not free for the response (requests hold them)")
            }
        }
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    metric: HashMap<String, String>,
    /// [unix seconds, "value"]
    value: (f64, String),
}

/// An instant vector: each series' labels and value.
pub type Series = Vec<(HashMap<String, String>, f64)>;

/// The longest error text of the query API a message quotes, in characters.
const MAX_ERROR_CHARS: usize = 256;

/// Parse an `/api/v1/query` body into (labels, value) pairs of an instant vector.
pub fn parse_vector(body: &[u8]) -> Result<Series, PollError> {
    let r: ApiResponse = serde_json::from_slice(body).map_err(|e| PollError::Decode(e.to_string()))?;
    if r.status != "success" {
        // Prometheus's words, escaped on one line and clipped: they go into a log line.
        let words = r.error.map(|e| escaped(&e, MAX_ERROR_CHARS));
        return Err(PollError::Query(words.unwrap_or_else(|| format!("status {:?}", r.status))));
    }
    let data = r.data.ok_or_else(|| PollError::Decode("no data".into()))?;
    if data.result_type != "vector" {
        return Err(PollError::Query(format!("expected a vector result, got {:?}", data.result_type)));
    }
    Ok(data.result.into_iter().filter_map(|s| s.value.1.parse::<f64>().ok().map(|v| (s.metric, v))).collect())
}

/// An IP from `ip`, `ip:port` or `[ipv6]:port`.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>().ok().or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// Utilisation per IP from a CPU query result (and, for pod names, the pod -> IP series).
/// Non-finite and negative values are dropped; several series of one IP are added up (a sum that
/// overflows is dropped too).
pub fn cpu_by_ip(
    samples: &[(HashMap<String, String>, f64)],
    ip: &IpSource,
    pods: &[(HashMap<String, String>, f64)],
) -> HashMap<IpAddr, f64> {
    let mut out: HashMap<IpAddr, f64> = HashMap::new();
    let pod_ips: HashMap<(Option<&str>, &str), IpAddr> = match ip {
        IpSource::Label(_) => HashMap::new(),
        IpSource::Pod { pod_label, ip_label, .. } => pods
            .iter()
            .filter_map(|(m, _)| {
                let pod = m.get(pod_label)?;
                let ip = parse_ip(m.get(ip_label)?)?;
                Some(((m.get("namespace").map(String::as_str), pod.as_str()), ip))
            })
            .collect(),
    };
    for (labels, value) in samples {
        if !value.is_finite() || *value < 0.0 {
            continue;
        }
        let ip = match ip {
            IpSource::Label(label) => labels.get(label).and_then(|v| parse_ip(v)),
            IpSource::Pod { pod_label, .. } => labels.get(pod_label).and_then(|pod| {
                let ns = labels.get("namespace").map(String::as_str);
                pod_ips.get(&(ns, pod.as_str())).or_else(|| pod_ips.get(&(None, pod.as_str()))).copied()
            }),
        };
        if let Some(ip) = ip {
            *out.entry(ip).or_insert(0.0) += value;
        }
    }
    out.retain(|_, sum| sum.is_finite());
    out
}

/// A response's body, read within `limit` bytes after its cost is reserved from the memory budget
/// (held by the returned reservation until the caller is done with what it parsed): a declared
/// length over the limit is refused before anything is read, an undeclared body as soon as it
/// passes the limit.
async fn read_within(
    mut response: reqwest::Response,
    limit: usize,
    state: &AppState,
) -> Result<(Vec<u8>, Reservation), PollError> {
    let declared = response.content_length().and_then(|n| usize::try_from(n).ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(PollError::TooLarge { limit });
    }
    let cost = state.limits.budget.cpu_response_cost(declared.unwrap_or(limit));
    let reservation = state.memory.reserve(cost).ok_or(PollError::Budget(cost))?;
    let mut body = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(|e| PollError::Request(e.to_string()))? {
        if body.len() + chunk.len() > limit {
            return Err(PollError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, reservation))
}

async fn query(
    client: &reqwest::Client,
    source: &CpuSource,
    promql: &str,
    state: &AppState,
) -> Result<(Series, Reservation), PollError> {
    let base = &source.base_url;
    let url = reqwest::Url::parse_with_params(&format!("{base}/api/v1/query"), &[("query", promql)])
        .map_err(|e| PollError::Request(format!("bad URL {base:?}: {e}")))?;
    let response = client.get(url).send().await.map_err(|e| PollError::Request(e.to_string()))?;
    let status = response.status();
    let (body, reservation) = read_within(response, source.max_response_bytes, state).await?;
    if !status.is_success() {
        // Prometheus explains bad queries in a JSON body with a 400: prefer its words.
        if let Err(PollError::Query(e)) = parse_vector(&body) {
            return Err(PollError::Query(e));
        }
        return Err(PollError::Status(status.as_u16()));
    }
    Ok((parse_vector(&body)?, reservation))
}

/// One poll: query, map to IPs, hand to the weight book. Returns the number of IPs set. What the
/// responses hold stays reserved until they are dropped.
pub async fn poll_once(client: &reqwest::Client, source: &CpuSource, state: &AppState) -> Result<usize, PollError> {
    let (samples, _held) = query(client, source, &source.query, state).await?;
    let (pods, _held_too) = match &source.ip {
        IpSource::Pod { query: q, .. } => {
            let (series, reservation) = query(client, source, q, state).await?;
            (series, Some(reservation))
        }
        IpSource::Label(_) => (Vec::new(), None),
    };
    let by_ip = cpu_by_ip(&samples, &source.ip, &pods);
    let now = state.now_us();
    let mut book = state.book();
    for (ip, cpu) in &by_ip {
        book.set_external_cpu(*ip, *cpu, now);
    }
    Ok(by_ip.len())
}

/// Poll forever (until the task is dropped).
pub async fn run(source: CpuSource, state: Arc<AppState>) {
    let client = match reqwest::Client::builder().timeout(source.timeout).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cpu source: cannot build an HTTP client; CPU polling is off");
            state.metrics.cpu_error("request");
            return;
        }
    };
    tracing::info!(url = %source.base_url, query = %source.query, "cpu source: polling");
    let mut last_ok: Option<Instant> = None;
    let mut ticker = tokio::time::interval(source.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        poll_and_record(&client, &source, &state, &mut last_ok).await;
    }
}

/// One tick of `run`: a poll, counted in the metrics, and a log line if it failed.
async fn poll_and_record(
    client: &reqwest::Client,
    source: &CpuSource,
    state: &AppState,
    last_ok: &mut Option<Instant>,
) {
    match poll_once(client, source, state).await {
        Ok(n) => {
            *last_ok = Some(Instant::now());
            state.metrics.cpu_polls.inc();
            state.metrics.cpu_series.set(n as i64);
            tracing::debug!(series = n, "cpu source: polled");
        }
        Err(e) => {
            state.metrics.cpu_error(e.kind());
            tracing::warn!(error = %e, "cpu source: poll failed (keeping the last values)");
        }
    }
    state.metrics.cpu_staleness.set(last_ok.map_or(-1.0, |t| t.elapsed().as_secs_f64()));
}

#[cfg(test)]
mod served;

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parses_an_instant_vector_and_maps_instance_labels_to_ips() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"10.0.0.1:9100"},"value":[1700000000.1,"0.25"]},
            {"metric":{"instance":"[2001:db8::1]:80"},"value":[1700000000.1,"0.5"]},
            {"metric":{"instance":"10.0.0.2"},"value":[1700000000.1,"NaN"]},
            {"metric":{"instance":"host-a:80"},"value":[1700000000.1,"0.9"]},
            {"metric":{"job":"x"},"value":[1700000000.1,"0.9"]}]}}"#;
        let samples = parse_vector(body).unwrap();
        let got = cpu_by_ip(&samples, &IpSource::Label("instance".into()), &[]);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[&"10.0.0.1".parse::<IpAddr>().unwrap()], 0.25);
        assert_eq!(got[&"2001:db8::1".parse::<IpAddr>().unwrap()], 0.5);
    }

    #[test]
    fn pod_names_join_to_ips_by_namespace_and_pod() {
        let cpu = vec![(labels(&[("pod", "a"), ("namespace", "n1")]), 0.3), (labels(&[("pod", "b")]), 0.7)];
        let pods = vec![
            (labels(&[("pod", "a"), ("namespace", "n1"), ("pod_ip", "10.0.0.1")]), 1.0),
            (labels(&[("pod", "a"), ("namespace", "n2"), ("pod_ip", "10.0.0.9")]), 1.0),
            (labels(&[("pod", "b"), ("pod_ip", "10.0.0.2")]), 1.0),
        ];
        let src = IpSource::Pod { pod_label: "pod".into(), query: String::new(), ip_label: "pod_ip".into() };
        let got = cpu_by_ip(&cpu, &src, &pods);
        assert_eq!(got[&"10.0.0.1".parse::<IpAddr>().unwrap()], 0.3);
        assert_eq!(got[&"10.0.0.2".parse::<IpAddr>().unwrap()], 0.7);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(parse_vector(b"nope").unwrap_err().kind(), "decode");
        let err =
            parse_vector(br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#).unwrap_err();
        assert_eq!(err, PollError::Query("parse error at char 3".into()));
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(parse_vector(matrix).unwrap_err().kind(), "query");
        // Found by fuzz/findings/prometheus: the server's words are kept on one line, and clipped.
        let multiline = format!(r#"{{"status":"error","error":"a\nb{}"}}"#, "c".repeat(1000));
        let PollError::Query(words) = parse_vector(multiline.as_bytes()).unwrap_err() else { panic!() };
        assert!(words.starts_with("a\\nbccc") && words.len() == MAX_ERROR_CHARS + 1, "{words}");
    }

    #[test]
    fn a_sum_that_overflows_is_dropped() {
        // Found by fuzz/findings/prometheus.
        let huge = vec![(labels(&[("instance", "10.0.0.1")]), 1e308); 2];
        assert!(cpu_by_ip(&huge, &IpSource::Label("instance".into()), &[]).is_empty());
    }
}
