//! Command line and environment (every flag has a TAILWEIGHT_* variable).

use crate::budget::{BookBudget, ServiceLimits};
use crate::identity::IdentitySource;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;
use tailweight_weights::{ViewInflight, WeightParams};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Parser)]
#[command(name = "tailweight-aggregator", version, about = "Merges sidecar reports into per-endpoint capacity weights")]
pub struct ServiceConfig {
    /// Address to listen on, `ip:port` (port 0: any free port; see --ready-file).
    #[arg(long, env = "TAILWEIGHT_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Once listening, write the bound address (`ip:port` and a newline) to this file path,
    /// atomically (for harnesses that start it on port 0).
    #[arg(long, env = "TAILWEIGHT_READY_FILE")]
    pub ready_file: Option<std::path::PathBuf>,
    /// Tokio worker threads, a count (0 = one per CPU; 1 = everything on one thread, the cheapest
    /// per report).
    #[arg(long, env = "TAILWEIGHT_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,
    /// Where a report's principal comes from (required: there is no safe default): the identity
    /// whose reporters count as one voice in the weights (however many reporter names it uses) and
    /// get one share of each limit.
    /// `xfcc`: the URI SAN (SPIFFE ID) of the last element of x-forwarded-client-cert, which the
    /// aggregator's own Istio sidecar appends after verifying the caller's mTLS certificate (trusts
    /// that only that sidecar can reach --listen: bind it to 127.0.0.1 behind the sidecar or
    /// enforce mTLS STRICT; use --read-only-listen for anything else, e.g. kubectl port-forward).
    /// `header:<name>`: that header's value (trusts a proxy in front to set it and to remove it from
    /// callers). `report`: the report's own `reporter` field (trusts every caller to say who it is:
    /// for tests and meshless setups, where one caller inventing names is as many principals).
    /// A request without the identity gets 403.
    #[arg(long, env = "TAILWEIGHT_IDENTITY", verbatim_doc_comment)]
    pub identity: Option<IdentitySource>,
    /// Who may send attestations (`POST /v1/attest`: what a destination served, per source
    /// principal; once a cluster's endpoints attest, only its real callers' reports count).
    /// `namespace`: a principal (SPIFFE id from --identity) in the namespace of the Istio cluster
    /// name's service. `any`: every caller (the meshless harness only: anyone can then attest).
    #[arg(long, env = "TAILWEIGHT_ATTEST_RULE", default_value = "namespace", verbatim_doc_comment)]
    pub attest_rule: crate::attest::AttestRule,
    /// Where an attesting sender's IP address comes from: an attestation whose endpoint is not at
    /// that IP gets 403. `peer`: the TCP peer (sidecars call the aggregator directly). `header:<name>`:
    /// a header a trusted proxy in front overwrites with the caller's address. `unbound`: not known
    /// (behind an Istio sidecar the TCP peer is the sidecar).
    #[arg(long, env = "TAILWEIGHT_ATTEST_ADDRESS", default_value = "unbound", verbatim_doc_comment)]
    pub attest_address: crate::attest_address::AttestAddress,
    /// A second address, `ip:port`, serving only GET /v1/weights, /metrics, /healthz and /readyz
    /// (never a report, and no header there names a principal): where to inspect the weights from
    /// outside the mesh, e.g. through kubectl port-forward, which bypasses the sidecar.
    #[arg(long, env = "TAILWEIGHT_READ_ONLY_LISTEN")]
    pub read_only_listen: Option<SocketAddr>,
    /// The memory the service may use, in MiB (below the pod's limit: the Deployment's is 256 MiB):
    /// connections and requests in progress get their most (see the flags below), the weight book
    /// the rest, counted as it grows (a report that would exceed it gets 429).
    #[arg(long, env = "TAILWEIGHT_MEMORY_LIMIT_MIB", default_value_t = 192, value_parser = clap::value_parser!(u64).range(32..=1 << 20))]
    pub memory_limit_mib: u64,
    /// Open connections at most, a count; one more is answered 503 with Retry-After and closed.
    #[arg(long, env = "TAILWEIGHT_MAX_CONNECTIONS", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Reports, weight queries and metrics scrapes in progress at most (reading, handling,
    /// answering), a count; beyond, 503 with Retry-After at once.
    #[arg(long, env = "TAILWEIGHT_MAX_CONCURRENT_REQUESTS", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_concurrent_requests: u64,
    /// Requests of one principal in progress at most, a count (a principal is the --identity of a
    /// report, or the peer's IP address); its second and later also only while at least half of
    /// --max-concurrent-requests are free, so no few principals hold every slot; beyond, 503 with
    /// Retry-After.
    #[arg(long, env = "TAILWEIGHT_MAX_REQUESTS_PER_PRINCIPAL", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_requests_per_principal: u64,
    /// Time a client has to send a request's headers, in milliseconds; also how long an idle
    /// keep-alive connection stays open. Past it the connection is closed.
    #[arg(long, env = "TAILWEIGHT_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_timeout_ms: u64,
    /// Time a request has from its headers to the end of its answer (reading the body included),
    /// in milliseconds; past it, 408.
    #[arg(long, env = "TAILWEIGHT_BODY_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub body_timeout_ms: u64,
    /// Slowest request body accepted, in bytes per second, after its first second: a slower one
    /// gets 408 and gives its slot back (0: any rate, up to --body-timeout-ms).
    #[arg(long, env = "TAILWEIGHT_MIN_BODY_RATE", default_value_t = 64 << 10)]
    pub min_body_rate: usize,
    /// How old a `/metrics` page scrapes may share is at most, in milliseconds: one page is built
    /// per interval whoever scrapes (0: one per scrape).
    #[arg(long, env = "TAILWEIGHT_METRICS_PAGE_MAX_AGE_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub metrics_page_max_age_ms: u64,
    /// Largest accepted request body, in bytes; larger gets 413.
    #[arg(long, env = "TAILWEIGHT_MAX_BODY_BYTES", default_value_t = 512 << 10)]
    pub max_body_bytes: usize,
    /// Endpoints one reply carries at most, a count, shared among its clusters (a view larger than
    /// its share is truncated to the endpoints that count most, and says how many it left out).
    #[arg(long, env = "TAILWEIGHT_MAX_REPLY_ENDPOINTS", default_value_t = 2_048)]
    pub max_reply_endpoints: usize,
    /// How often weights are recomputed and silent reporters expired, in milliseconds.
    #[arg(long, env = "TAILWEIGHT_RECOMPUTE_INTERVAL_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub recompute_interval_ms: u64,
    /// Log lines on stderr: plain text, or one JSON object per line.
    #[arg(long, env = "TAILWEIGHT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (tracing's syntax), e.g. `info` or `tailweight_aggregator=debug`.
    #[arg(long, env = "TAILWEIGHT_LOG", default_value = "info")]
    pub log: String,

    // ---- weights (see tailweight_weights::WeightParams and docs/weights.md) ----
    /// Largest factor a weight may move by per recompute (> 1).
    #[arg(long, env = "TAILWEIGHT_MAX_STEP", default_value_t = WeightParams::default().max_step)]
    pub max_step: f64,
    /// Smallest weight, a ratio to the cluster's mean weight of 1: slow endpoints keep getting probes.
    #[arg(long, env = "TAILWEIGHT_FLOOR", default_value_t = WeightParams::default().floor)]
    pub floor: f64,
    /// Time constant of the geometric smoothing of weights toward their targets, in milliseconds.
    #[arg(long, env = "TAILWEIGHT_SMOOTHING_MS", default_value_t = WeightParams::default().smoothing_us as u64 / 1_000)]
    pub smoothing_ms: u64,
    /// Smoothed error ratio (a share of requests, 0..1] at which an endpoint is ejected; it is
    /// readmitted below half of it.
    #[arg(long, env = "TAILWEIGHT_EJECT_RATIO", default_value_t = WeightParams::default().eject_ratio)]
    pub eject_ratio: f64,
    /// Latency path: time each failure adds to an endpoint's time per request, in milliseconds
    /// (so failing fast never looks fast).
    #[arg(long, env = "TAILWEIGHT_FAILURE_COST_MS", default_value_t = WeightParams::default().failure_cost_us / 1e3)]
    pub failure_cost_ms: f64,
    /// CPU path: utilisation each error per request costs (Envoy CSWRR's error_utilization_penalty,
    /// a dimensionless factor): weight = qps / (cpu + penalty x eps / qps).
    #[arg(long, env = "TAILWEIGHT_ERROR_PENALTY", default_value_t = WeightParams::default().error_penalty)]
    pub error_penalty: f64,
    /// Time within which an endpoint's standing queue should drain, in milliseconds; that rate
    /// comes off its capacity (0 = off).
    #[arg(long, env = "TAILWEIGHT_BACKLOG_DRAIN_MS", default_value_t = WeightParams::default().backlog_drain_us / 1e3)]
    pub backlog_drain_ms: f64,
    /// The in-flight count the reply view gives each endpoint: `last` (the sum of the sidecars'
    /// last counts) or `mean` (requests per second x mean latency over the last window, Little's
    /// law: the queue the endpoint usually has, not one instant's). Sidecars with load stamps
    /// compare a fresh stamp against it.
    #[arg(long, env = "TAILWEIGHT_VIEW_INFLIGHT", default_value_t = WeightParams::default().view_inflight, value_parser = PossibleValuesParser::new(["last", "mean"]).try_map(|s| s.parse::<ViewInflight>()))]
    pub view_inflight: ViewInflight,
    /// Rate a sidecar's first report of an endpoint whose counters are new (its `counted_ms` at
    /// most two report intervals) over those counters at once, instead of from its next report:
    /// the mesh's cold start counts every request. Off by default: it also counts the pairs found
    /// again in steady state, and the weights then follow capacity exactly, which made the tail at
    /// 70% load worse in the simulator (sim/README.md, "Cold start").
    #[arg(long, env = "TAILWEIGHT_RATE_NEW_COUNTERS", default_value_t = WeightParams::default().rate_new_counters, action = clap::ArgAction::Set, value_parser = clap::value_parser!(bool))]
    pub rate_new_counters: bool,
    /// Slow start, in milliseconds: an endpoint new to a cluster known for longer than this gets a
    /// weight ramping from 10% to its full share over this long while the book cannot rate its
    /// capacity yet; a measured capacity already carries its warm-up (0 = off).
    #[arg(long, env = "TAILWEIGHT_SLOW_START_MS", default_value_t = WeightParams::default().slow_start_us / 1_000)]
    pub slow_start_ms: u64,
    /// Lying-reporter guard of medians (latency, ORCA CPU), a ratio in (0, 1): each reporter's
    /// vote counts at most vote_cap x the other votes.
    #[arg(long, env = "TAILWEIGHT_VOTE_CAP", default_value_t = WeightParams::default().vote_cap)]
    pub vote_cap: f64,
    /// Lying-reporter guard of sums (requests, errors, in flight), a factor >= 1: each reporter's
    /// contribution counts at most sum_clip x the largest other.
    #[arg(long, env = "TAILWEIGHT_SUM_CLIP", default_value_t = WeightParams::default().sum_clip)]
    pub sum_clip: f64,
    /// A reporter expires after this many of its own report intervals without a report (at least
    /// 3 s).
    #[arg(long, env = "TAILWEIGHT_REPORTER_TTL_INTERVALS", default_value_t = WeightParams::default().reporter_ttl_intervals)]
    pub reporter_ttl_intervals: f64,
    /// A report keeps an endpoint in the book only if its reporter saw it answer well within this
    /// many milliseconds, sent it requests since its last report, or does not say (set it at least
    /// to the filters' endpoint_ttl_ms, 60 s by default).
    #[arg(long, env = "TAILWEIGHT_MAX_SEEN_AGE_MS", default_value_t = WeightParams::default().max_seen_age_us / 1_000, value_parser = clap::value_parser!(u64).range(1_000..=86_400_000))]
    pub max_seen_age_ms: u64,
    /// The reply's ttl, in the asking reporter's report intervals (at least 3 s).
    #[arg(long, env = "TAILWEIGHT_VIEW_TTL_INTERVALS", default_value_t = WeightParams::default().view_ttl_intervals)]
    pub view_ttl_intervals: f64,
    /// Longest report interval the service takes from a report, in milliseconds: a reporter
    /// claiming a longer one still expires after the ttl intervals of this.
    #[arg(long, env = "TAILWEIGHT_MAX_INTERVAL_MS", default_value_t = WeightParams::default().max_interval_us / 1_000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub max_interval_ms: u64,
    /// With three or more principals on an endpoint, the ratio (0..0.5) by which one principal's
    /// split of its traffic may differ from theirs and still count (see docs/weights.md).
    #[arg(long, env = "TAILWEIGHT_SPLIT_TOLERANCE", default_value_t = WeightParams::default().split_tolerance)]
    pub split_tolerance: f64,
    /// The share (0..1] of each limit (the weight book's memory, reporters, clusters) one principal
    /// may hold; a cluster has room for max-endpoints-per-cluster / this many endpoints.
    #[arg(long, env = "TAILWEIGHT_PRINCIPAL_SHARE", default_value_t = 0.25)]
    pub principal_share: f64,
    /// Cap: live reporters (principal, name, incarnation), a count; a report from one more gets
    /// 429 (default: as many as the memory budget could hold).
    #[arg(long, env = "TAILWEIGHT_MAX_REPORTERS")]
    pub max_reporters: Option<usize>,
    /// Cap: clusters tracked, a count; a report naming one more gets 429 (default: from the memory
    /// budget).
    #[arg(long, env = "TAILWEIGHT_MAX_CLUSTERS")]
    pub max_clusters: Option<usize>,
    /// Cap: endpoints of one cluster one principal may name, a count (also the most one report may
    /// name per cluster); the cluster holds this / principal-share from all principals.
    #[arg(long, env = "TAILWEIGHT_MAX_ENDPOINTS_PER_CLUSTER", default_value_t = WeightParams::default().max_endpoints_per_cluster)]
    pub max_endpoints_per_cluster: usize,
    /// Cap: reporter x endpoint pairs in all, a count (default: from the memory budget).
    #[arg(long, env = "TAILWEIGHT_MAX_OBSERVATIONS")]
    pub max_observations: Option<usize>,
    /// Clusters one report may carry, a count (the filter sends one); more gets 400.
    #[arg(long, env = "TAILWEIGHT_MAX_CLUSTERS_PER_REPORT", default_value_t = 16)]
    pub max_clusters_per_report: usize,

    // ---- CPU from a Prometheus-compatible query API ----
    /// Base URL of the query API (Prometheus, VictoriaMetrics, Thanos), e.g. http://prometheus:9090. Unset: no polling.
    #[arg(long, env = "TAILWEIGHT_CPU_URL")]
    pub cpu_url: Option<String>,
    /// PromQL returning one utilisation (CPU cores in use) per endpoint; `{interval}` becomes the
    /// poll interval (e.g. `30s`).
    #[arg(
        long,
        env = "TAILWEIGHT_CPU_QUERY",
        default_value = "sum by (instance) (rate(process_cpu_seconds_total[1m]))"
    )]
    pub cpu_query: String,
    /// Label carrying the endpoint IP (`ip`, `ip:port` or `[ipv6]:port`).
    #[arg(long, env = "TAILWEIGHT_CPU_IP_LABEL", default_value = "instance")]
    pub cpu_ip_label: String,
    /// Instead of an IP label: the label with the pod name, joined to IPs by `cpu_pod_ip_query`.
    #[arg(long, env = "TAILWEIGHT_CPU_POD_LABEL")]
    pub cpu_pod_label: Option<String>,
    /// Query whose series carry a pod name (same label as `cpu_pod_label`) and its IP (`cpu_pod_ip_label`).
    #[arg(long, env = "TAILWEIGHT_CPU_POD_IP_QUERY", default_value = "kube_pod_info")]
    pub cpu_pod_ip_query: String,
    /// Label of `cpu_pod_ip_query`'s series carrying the pod IP.
    #[arg(long, env = "TAILWEIGHT_CPU_POD_IP_LABEL", default_value = "pod_ip")]
    pub cpu_pod_ip_label: String,
    /// How often the CPU query is polled, in milliseconds.
    #[arg(long, env = "TAILWEIGHT_CPU_INTERVAL_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub cpu_interval_ms: u64,
    /// Timeout of one CPU poll, in milliseconds.
    #[arg(long, env = "TAILWEIGHT_CPU_TIMEOUT_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub cpu_timeout_ms: u64,
    /// Largest query response read from the CPU source, in bytes (a larger one fails the poll and
    /// the last values stay). With a CPU source, 5x this per query is set aside from the memory
    /// budget for the poll (the body and its parsed series) and reserved before the body is read.
    #[arg(long, env = "TAILWEIGHT_CPU_MAX_RESPONSE_BYTES", default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(1_024..=1 << 30))]
    pub cpu_max_response_bytes: u64,
    /// Age after which a CPU value is not used, in milliseconds.
    #[arg(long, env = "TAILWEIGHT_CPU_MAX_AGE_MS", default_value_t = WeightParams::default().cpu_max_age_us / 1_000)]
    pub cpu_max_age_ms: u64,
    /// Age after which a proxy's ORCA utilisation is not voted, in milliseconds (0: the CPU max
    /// age). With many proxies each reaches an endpoint rarely: a short age keeps their votes from
    /// pairing today's request rate with a utilisation from long ago.
    #[arg(long, env = "TAILWEIGHT_ORCA_MAX_AGE_MS", default_value_t = WeightParams::default().orca_max_age_us / 1_000, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub orca_max_age_ms: u64,
    /// The window the query averages CPU over, in milliseconds (the `[1m]` of the default query):
    /// capacity divides it into the request rate over the same window.
    #[arg(long, env = "TAILWEIGHT_CPU_WINDOW_MS", default_value_t = WeightParams::default().cpu_window_us / 1_000, value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
    pub cpu_window_ms: u64,
}

impl ServiceConfig {
    /// The limits that bound what connections and requests hold.
    pub fn service_limits(&self) -> ServiceLimits {
        ServiceLimits {
            memory_limit_bytes: usize::try_from(self.memory_limit_mib << 20).unwrap_or(usize::MAX),
            max_connections: self.max_connections as usize,
            max_concurrent_requests: self.max_concurrent_requests as usize,
            max_body_bytes: self.max_body_bytes,
            max_reply_endpoints: self.max_reply_endpoints,
            cpu_response_bytes: if self.cpu_url.is_some() {
                usize::try_from(self.cpu_max_response_bytes).unwrap_or(usize::MAX)
            } else {
                0
            },
            cpu_queries: match (&self.cpu_url, &self.cpu_pod_label) {
                (None, _) => 0,
                (Some(_), None) => 1,
                (Some(_), Some(_)) => 2,
            },
        }
    }

    /// The weight parameters, with the caps the memory budget leaves for the book, checked (the
    /// error is one line naming the first bad setting).
    pub fn weight_params(&self) -> Result<WeightParams, String> {
        let BookBudget { max_bytes, max_reporters, max_clusters, max_observations } =
            self.service_limits().book_budget()?;
        let p = WeightParams {
            max_step: self.max_step,
            floor: self.floor,
            smoothing_us: self.smoothing_ms as f64 * 1e3,
            eject_ratio: self.eject_ratio,
            failure_cost_us: self.failure_cost_ms * 1e3,
            backlog_drain_us: self.backlog_drain_ms * 1e3,
            view_inflight: self.view_inflight,
            rate_new_counters: self.rate_new_counters,
            slow_start_us: self.slow_start_ms.saturating_mul(1_000),
            error_penalty: self.error_penalty,
            vote_cap: self.vote_cap,
            sum_clip: self.sum_clip,
            split_tolerance: self.split_tolerance,
            principal_share: self.principal_share,
            max_interval_us: self.max_interval_ms.saturating_mul(1_000),
            reporter_ttl_intervals: self.reporter_ttl_intervals,
            max_seen_age_us: self.max_seen_age_ms.saturating_mul(1_000),
            view_ttl_intervals: self.view_ttl_intervals,
            max_bytes,
            max_reporters: self.max_reporters.unwrap_or(max_reporters),
            max_clusters: self.max_clusters.unwrap_or(max_clusters),
            max_endpoints_per_cluster: self.max_endpoints_per_cluster,
            max_observations: self.max_observations.unwrap_or(max_observations),
            cpu_max_age_us: self.cpu_max_age_ms.saturating_mul(1_000),
            orca_max_age_us: self.orca_max_age_ms.saturating_mul(1_000),
            cpu_window_us: self.cpu_window_ms.saturating_mul(1_000),
            ..WeightParams::default()
        };
        p.validate().map_err(|e| e.to_string())?;
        Ok(p)
    }

    pub fn recompute_interval(&self) -> Duration {
        Duration::from_millis(self.recompute_interval_ms)
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    /// The identity source, or the one-line reason to refuse to start without one.
    pub fn identity_source(&self) -> Result<IdentitySource, String> {
        self.identity.clone().ok_or_else(|| {
            "identity: choose where a report's principal comes from with --identity (or TAILWEIGHT_IDENTITY): \
             `xfcc` behind an Istio sidecar, `header:<name>` behind a proxy that sets it, `report` only for tests"
                .to_string()
        })
    }

    /// Defaults with a listen address and `--identity report`, for tests.
    pub fn for_tests(listen: SocketAddr) -> ServiceConfig {
        let mut c = ServiceConfig::parse_from(["tailweight-aggregator", "--identity", "report"]);
        c.listen = listen;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Each long flag of `--help` with its help text (what follows the flag up to the next one,
    /// without clap's own `[env: ...]`, `[default: ...]` and `[possible values: ...]`).
    fn flag_help() -> Vec<(String, String)> {
        let help = ServiceConfig::command().render_help().to_string();
        let mut flags: Vec<(String, String)> = Vec::new();
        for line in help.lines() {
            let trimmed = line.trim_start();
            let flag_line = trimmed.starts_with("--") || (trimmed.starts_with('-') && trimmed.contains(", --"));
            if flag_line {
                let at = trimmed.find("--").unwrap_or(0);
                let flag = trimmed[at..].split_whitespace().next().unwrap_or_default().to_string();
                // Help on the same line: whatever follows the value name.
                let rest = trimmed[at + flag.len()..].trim_start();
                let rest = if rest.starts_with('<') { rest.split_once('>').map_or("", |(_, r)| r) } else { rest };
                flags.push((flag, rest.to_string()));
            } else if let Some((_, text)) = flags.last_mut() {
                text.push(' ');
                text.push_str(trimmed);
            }
        }
        for (_, text) in &mut flags {
            while let Some(start) = text.find(" [").or_else(|| text.starts_with('[').then_some(0)) {
                let Some(len) = text[start..].find(']') else { break };
                text.replace_range(start..start + len + 1, "");
            }
            *text = text.trim().to_string();
        }
        flags
    }

    #[test]
    fn every_long_flag_has_a_help_line() {
        let flags = flag_help();
        assert!(flags.len() > 30, "{flags:?}");
        for (flag, text) in &flags {
            assert!(!text.is_empty(), "{flag} has no help text");
        }
    }

    #[test]
    fn every_flag_with_a_unit_in_its_name_states_it() {
        for (flag, text) in flag_help() {
            let unit = match flag.rsplit('-').next() {
                Some("ms") => "milliseconds",
                Some("bytes") => "bytes",
                Some("mib") => "MiB",
                Some("intervals") => "intervals",
                _ => continue,
            };
            assert!(text.contains(unit), "{flag}: {text:?} does not say {unit}");
        }
    }

    #[test]
    fn defaults_are_the_weight_books_with_caps_from_the_memory_budget() {
        let c = ServiceConfig::for_tests("127.0.0.1:0".parse().unwrap());
        let p = c.weight_params().unwrap();
        let budget = c.service_limits().book_budget().unwrap();
        let (max_bytes, max_reporters, max_observations) = (p.max_bytes, p.max_reporters, p.max_observations);
        assert_eq!(
            (max_bytes, max_reporters, max_observations),
            (budget.max_bytes, budget.max_reporters, budget.max_observations)
        );
        assert!(max_bytes > 100 << 20 && max_bytes < 192 << 20, "{max_bytes}");
        let expected = WeightParams {
            principal_share: 0.25,
            max_bytes,
            max_reporters,
            max_clusters: budget.max_clusters,
            max_observations,
            ..WeightParams::default()
        };
        assert_eq!(p, expected);
        assert_eq!(c.identity, Some(IdentitySource::Report));
        let unset = ServiceConfig::try_parse_from(["tailweight-aggregator"]).unwrap();
        let err = unset.identity_source().unwrap_err();
        assert!(err.starts_with("identity: choose") && err.contains("--identity") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn a_budget_too_small_for_the_connections_is_one_line() {
        let mut c = ServiceConfig::for_tests("127.0.0.1:0".parse().unwrap());
        c.memory_limit_mib = 32;
        let err = c.weight_params().unwrap_err();
        assert!(err.starts_with("memory_limit_mib: 32 MiB") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn orca_max_age_reaches_the_weight_book_and_is_range_checked() {
        let c = ServiceConfig::try_parse_from(["tailweight-aggregator", "--orca-max-age-ms", "1500"]).unwrap();
        assert_eq!(c.weight_params().unwrap().orca_max_age_us, 1_500_000);
        let e = ServiceConfig::try_parse_from(["tailweight-aggregator", "--orca-max-age-ms", "4000000"]).unwrap_err();
        assert!(e.to_string().contains("--orca-max-age-ms"), "{e}");
    }

    #[test]
    fn rate_new_counters_is_off_unless_set() {
        let parse = |args: &[&str]| ServiceConfig::try_parse_from([&["tailweight-aggregator"], args].concat());
        assert!(!parse(&[]).unwrap().weight_params().unwrap().rate_new_counters);
        assert!(parse(&["--rate-new-counters", "true"]).unwrap().weight_params().unwrap().rate_new_counters);
        assert!(parse(&["--rate-new-counters", "yes"]).unwrap_err().to_string().contains("--rate-new-counters"));
    }

    #[test]
    fn view_inflight_reaches_the_weight_book_and_names_the_flag_otherwise() {
        let parse = |args: &[&str]| ServiceConfig::try_parse_from([&["tailweight-aggregator"], args].concat());
        assert_eq!(parse(&[]).unwrap().weight_params().unwrap().view_inflight, ViewInflight::Mean);
        let last = parse(&["--view-inflight", "last"]).unwrap();
        assert_eq!(last.weight_params().unwrap().view_inflight, ViewInflight::Last);
        let e = parse(&["--view-inflight", "average"]).unwrap_err().to_string();
        assert!(e.contains("--view-inflight") && e.contains("last") && e.contains("mean"), "{e}");
    }

    /// One definition of the default deployment: without flags the aggregator weighs exactly as
    /// `WeightParams::default()` (what the simulator's default `tailweight` runs and the Helm
    /// chart installs), all but its caps: the memory budget's and each principal's share of them.
    #[test]
    fn the_flags_defaults_are_the_weight_books() {
        let p = ServiceConfig::try_parse_from(["tailweight-aggregator"]).unwrap().weight_params().unwrap();
        let budgeted = WeightParams {
            principal_share: p.principal_share,
            max_bytes: p.max_bytes,
            max_reporters: p.max_reporters,
            max_clusters: p.max_clusters,
            max_observations: p.max_observations,
            ..WeightParams::default()
        };
        assert_eq!(p, budgeted);
    }
}
