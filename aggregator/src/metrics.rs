//! The service's own metrics, in Prometheus text format at `/metrics`.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use tailweight_weights::{Counts, Rejection};

/// Why a report was refused (the label of `tailweight_reports_rejected_total`).
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
    /// The body did not arrive within `--body-timeout-ms` (408).
    Timeout,
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
        ]
        .into_iter()
        .chain(Rejection::ALL.into_iter().map(RejectReason::Cap))
    }
}

pub struct AggregatorMetrics {
    registry: Registry,
    pub reports_accepted: IntCounter,
    reports_rejected: IntCounterVec,
    pub report_seconds: Histogram,
    pub recompute_seconds: Histogram,
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

impl AggregatorMetrics {
    pub fn new() -> AggregatorMetrics {
        let registry = Registry::new();
        let m = AggregatorMetrics {
            reports_accepted: IntCounter::new("tailweight_reports_accepted_total", "Reports merged").unwrap(),
            reports_rejected: IntCounterVec::new(
                Opts::new("tailweight_reports_rejected_total", "Reports refused, by reason"),
                &["reason"],
            )
            .unwrap(),
            report_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "tailweight_report_handling_seconds",
                    "Time to handle one report (parse, merge, reply)",
                )
                .buckets(vec![25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3]),
            )
            .unwrap(),
            recompute_seconds: Histogram::with_opts(
                HistogramOpts::new("tailweight_weight_compute_seconds", "Time to recompute all weights and expire")
                    .buckets(vec![1e-4, 5e-4, 1e-3, 5e-3, 10e-3, 50e-3, 100e-3, 500e-3, 1.0]),
            )
            .unwrap(),
            principals: IntGauge::new("tailweight_principals", "Identities holding something in the book").unwrap(),
            reporters: IntGauge::new("tailweight_reporters_live", "Reporters not yet expired").unwrap(),
            clusters: IntGauge::new("tailweight_clusters_tracked", "Clusters with at least one live report").unwrap(),
            endpoints: IntGauge::new("tailweight_endpoints_tracked", "Endpoints with at least one live report")
                .unwrap(),
            observations: IntGauge::new("tailweight_observations", "Reporter x endpoint pairs held").unwrap(),
            book_bytes: IntGauge::new(
                "tailweight_book_bytes",
                "Bytes the weight book holds as it counts them (bounded by the memory budget)",
            )
            .unwrap(),
            shed: IntCounterVec::new(
                Opts::new("tailweight_requests_shed_total", "Requests refused before handling, by reason"),
                &["reason"],
            )
            .unwrap(),
            connections_open: IntGauge::new("tailweight_connections_open", "Connections open").unwrap(),
            connections_refused: IntCounter::new(
                "tailweight_connections_refused_total",
                "Connections answered 503 and closed at --max-connections",
            )
            .unwrap(),
            cpu_entries: IntGauge::new(
                "tailweight_cpu_entries",
                "Endpoint IPs with a CPU value from the metrics store",
            )
            .unwrap(),
            cpu_polls: IntCounter::new("tailweight_cpu_source_polls_total", "Successful polls of the CPU source")
                .unwrap(),
            cpu_errors: IntCounterVec::new(
                Opts::new("tailweight_cpu_source_errors_total", "Failed polls of the CPU source, by kind"),
                &["kind"],
            )
            .unwrap(),
            cpu_series: IntGauge::new(
                "tailweight_cpu_source_series",
                "Series with a usable IP and value in the last poll",
            )
            .unwrap(),
            cpu_staleness: Gauge::new(
                "tailweight_cpu_source_staleness_seconds",
                "Seconds since the last successful poll (-1: none yet)",
            )
            .unwrap(),
            registry,
        };
        for reason in RejectReason::all() {
            m.reports_rejected.with_label_values(&[reason.as_str()]);
        }
        for reason in ["overloaded", "timeout"] {
            m.shed.with_label_values(&[reason]);
        }
        for kind in ["request", "status", "decode", "query"] {
            m.cpu_errors.with_label_values(&[kind]);
        }
        m.cpu_staleness.set(-1.0);
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.reports_accepted.clone()),
            Box::new(m.reports_rejected.clone()),
            Box::new(m.report_seconds.clone()),
            Box::new(m.recompute_seconds.clone()),
            Box::new(m.principals.clone()),
            Box::new(m.reporters.clone()),
            Box::new(m.clusters.clone()),
            Box::new(m.endpoints.clone()),
            Box::new(m.observations.clone()),
            Box::new(m.book_bytes.clone()),
            Box::new(m.shed.clone()),
            Box::new(m.connections_open.clone()),
            Box::new(m.connections_refused.clone()),
            Box::new(m.cpu_entries.clone()),
            Box::new(m.cpu_polls.clone()),
            Box::new(m.cpu_errors.clone()),
            Box::new(m.cpu_series.clone()),
            Box::new(m.cpu_staleness.clone()),
        ];
        for c in collectors {
            m.registry.register(c).expect("metric names are unique");
        }
        m
    }

    pub fn rejected(&self, reason: RejectReason) {
        self.reports_rejected.with_label_values(&[reason.as_str()]).inc();
    }

    /// A request refused before handling: `overloaded` or `timeout`.
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

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec only fails on a broken collector; an empty page is the honest answer then.
        if TextEncoder::new().encode(&self.registry.gather(), &mut buf).is_err() {
            buf.clear();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for AggregatorMetrics {
    fn default() -> Self {
        AggregatorMetrics::new()
    }
}
