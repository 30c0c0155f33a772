//! The service's own metrics, in Prometheus text format at `/metrics`.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use tailweight_weights::{Counts, Rejection};

/// Why a report or an attestation was refused (the label of `tailweight_reports_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    TooLarge,
    Malformed,
    UnsupportedVersion,
    Invalid,
    /// No usable identity for `--identity` (403).
    NoIdentity,
    /// Its principal already has `--max-requests-per-principal` in progress (503).
    PrincipalBusy,
    /// The body did not arrive within `--body-timeout-ms`, or slower than `--min-body-rate` (408).
    Timeout,
    /// An attestation from a principal `--attest-rule` does not let speak for its cluster (403).
    NotAllowed,
    /// An attestation for an address not the sender's (`--attest-address`, 403).
    NotSendersAddress,
    /// Every request slot is taken (503).
    Overloaded,
    /// What it may cost does not fit the requests' memory budget now (503).
    Memory,
    Cap(Rejection),
}

impl RejectReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::TooLarge => "too_large",
            RejectReason::Malformed => "malformed",
            RejectReason::UnsupportedVersion => "unsupported_version",
            RejectReason::Invalid => "invalid",
            RejectReason::NoIdentity => "no_identity",
            RejectReason::PrincipalBusy => "principal_busy",
            RejectReason::Timeout => "timeout",
            RejectReason::NotAllowed => "attest_not_allowed",
            RejectReason::NotSendersAddress => "attest_not_senders_address",
            RejectReason::Memory => "memory",
            RejectReason::Overloaded => "overloaded",
            RejectReason::Cap(r) => r.as_str(),
        }
    }

    fn all() -> impl Iterator<Item = RejectReason> {
        [
            RejectReason::TooLarge,
            RejectReason::Malformed,
            RejectReason::UnsupportedVersion,
            RejectReason::Invalid,
            RejectReason::NoIdentity,
            RejectReason::PrincipalBusy,
            RejectReason::Timeout,
            RejectReason::NotAllowed,
            RejectReason::NotSendersAddress,
            RejectReason::Memory,
            RejectReason::Overloaded,
        ]
        .into_iter()
        .chain(Rejection::ALL.into_iter().map(RejectReason::Cap))
    }
}

pub struct AggregatorMetrics {
    registry: Registry,
    pub reports_accepted: IntCounter,
    reports_rejected: IntCounterVec,
    /// Endpoints of reported clusters' views that replies left out to stay within their caps.
    pub reply_endpoints_omitted: IntCounter,
    pub report_seconds: Histogram,
    pub recompute_seconds: Histogram,
    /// Recompute ticks that panicked (each makes the replica not ready until one completes).
    pub recompute_panics: IntCounter,
    principals: IntGauge,
    reporters: IntGauge,
    clusters: IntGauge,
    endpoints: IntGauge,
    observations: IntGauge,
    book_bytes: IntGauge,
    cpu_entries: IntGauge,
    /// Requests refused before a handler ran (load shedding, deadlines), by reason.
    shed: IntCounterVec,
    pub connections_open: IntGauge,
    pub connections_refused: IntCounter,
    pub cpu_polls: IntCounter,
    cpu_errors: IntCounterVec,
    pub cpu_series: IntGauge,
    /// Seconds since the last successful poll (-1 before the first).
    pub cpu_staleness: Gauge,
}

/// Makes each metric and registers it at once, so a metric cannot be made and left out.
struct Registering {
    registry: Registry,
}

impl Registering {
    fn register<C: Collector + Clone + 'static>(&self, metric: C) -> prometheus::Result<C> {
        self.registry.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.register(IntCounter::new(name, help)?)
    }

    /// A counter by `label`, with each of `values` present from the start (at 0).
    fn counters(&self, name: &str, help: &str, label: &str, values: &[&str]) -> prometheus::Result<IntCounterVec> {
        let counters = IntCounterVec::new(Opts::new(name, help), &[label])?;
        for value in values {
            counters.with_label_values(&[value]);
        }
        self.register(counters)
    }

    fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.register(IntGauge::new(name, help)?)
    }

    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> prometheus::Result<Histogram> {
        self.register(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?)
    }
}

impl AggregatorMetrics {
    /// Every metric, registered (Err: a name or help text prometheus refuses, or a name twice).
    pub fn new() -> prometheus::Result<AggregatorMetrics> {
        let r = Registering { registry: Registry::new() };
        let reasons: Vec<&str> = RejectReason::all().map(|reason| reason.as_str()).collect();
        let m = AggregatorMetrics {
            reports_accepted: r.counter("tailweight_reports_accepted_total", "Reports merged")?,
            reports_rejected: r.counters(
                "tailweight_reports_rejected_total",
                "Reports refused, by reason",
                "reason",
                &reasons,
            )?,
            reply_endpoints_omitted: r.counter(
                "tailweight_reply_endpoints_omitted_total",
                "Endpoints replies left out of views too large for --max-reply-endpoints or the filter's 2,048",
            )?,
            report_seconds: r.histogram(
                "tailweight_report_handling_seconds",
                "Time to handle one report (parse, merge, reply)",
                &[25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3],
            )?,
            recompute_seconds: r.histogram(
                "tailweight_weight_compute_seconds",
                "Time to recompute all weights and expire",
                &[1e-4, 5e-4, 1e-3, 5e-3, 10e-3, 50e-3, 100e-3, 500e-3, 1.0],
            )?,
            recompute_panics: r.counter(
                "tailweight_recompute_panics_total",
                "Recompute ticks that panicked (not ready until a recompute completes)",
            )?,
            principals: r.gauge("tailweight_principals", "Identities holding something in the book")?,
            reporters: r.gauge("tailweight_reporters_live", "Reporters not yet expired")?,
            clusters: r.gauge("tailweight_clusters_tracked", "Clusters with at least one live report")?,
            endpoints: r.gauge("tailweight_endpoints_tracked", "Endpoints with at least one live report")?,
            observations: r.gauge("tailweight_observations", "Reporter x endpoint pairs held")?,
            book_bytes: r.gauge(
                "tailweight_book_bytes",
                "Bytes the weight book holds as it counts them (bounded by the memory budget)",
            )?,
            shed: r.counters(
                "tailweight_requests_shed_total",
                "Requests refused before handling, by reason",
                "reason",
                &["overloaded", "principal_busy", "memory", "slow_body", "timeout"],
            )?,
            connections_open: r.gauge("tailweight_connections_open", "Connections open")?,
            connections_refused: r.counter(
                "tailweight_connections_refused_total",
                "Connections answered 503 and closed at --max-connections",
            )?,
            cpu_entries: r.gauge("tailweight_cpu_entries", "Endpoint IPs with a CPU value from the metrics store")?,
            cpu_polls: r.counter("tailweight_cpu_source_polls_total", "Successful polls of the CPU source")?,
            cpu_errors: r.counters(
                "tailweight_cpu_source_errors_total",
                "Failed polls of the CPU source, by kind",
                "kind",
                &["request", "status", "decode", "query"],
            )?,
            cpu_series: r
                .gauge("tailweight_cpu_source_series", "Series with a usable IP and value in the last poll")?,
            cpu_staleness: r.register(Gauge::new(
                "tailweight_cpu_source_staleness_seconds",
                "Seconds since the last successful poll (-1: none yet)",
            )?)?,
            registry: r.registry,
        };
        m.cpu_staleness.set(-1.0);
        Ok(m)
    }

    pub fn rejected(&self, reason: RejectReason) {
        self.reports_rejected.with_label_values(&[reason.as_str()]).inc();
    }

    /// A request refused before or while reading it: `overloaded` (every slot taken),
    /// `principal_busy` (its principal holds its share of them), `memory` (its reservation does not
    /// fit), `slow_body` (slower than `--min-body-rate`) or `timeout`.
    pub fn shed(&self, reason: &str) {
        self.shed.with_label_values(&[reason]).inc();
    }

    pub fn cpu_error(&self, kind: &str) {
        self.cpu_errors.with_label_values(&[kind]).inc();
    }

    pub fn set_counts(&self, c: &Counts) {
        self.principals.set(c.principals as i64);
        self.reporters.set(c.reporters as i64);
        self.clusters.set(c.clusters as i64);
        self.endpoints.set(c.endpoints as i64);
        self.observations.set(c.observations as i64);
        self.book_bytes.set(c.bytes as i64);
        self.cpu_entries.set(c.cpu_entries as i64);
    }

    /// Clusters the book held at the last recompute (`set_counts`), read without the book's lock.
    pub fn clusters_tracked(&self) -> usize {
        usize::try_from(self.clusters.get()).unwrap_or(0)
    }

    /// Every registered metric's current values.
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec only fails on a broken collector; an empty page is the honest answer then.
        if TextEncoder::new().encode(&self.registry.gather(), &mut buf).is_err() {
            buf.clear();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
