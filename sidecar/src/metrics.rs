//! The sidecar's metrics, as `wasmcustom.tailweight.*` in a Wasm shell's /stats
//! (`tailweight_*` in /stats/prometheus). Bounded cardinality: per-endpoint metrics only when
//! `per_endpoint_metrics` is on, because Envoy cannot delete a metric once defined.

use crate::host::{Host, MetricId, MetricKind};
use tailweight_math::hash::FastMap;

/// A counter as the host defined it (None inside: the host refused it; updates are then dropped).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter(Option<MetricId>);

/// A gauge likewise. Gauges are process-wide: every worker adds to or sets one value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauge(Option<MetricId>);

impl Counter {
    pub fn define(host: &impl Host, name: &str) -> Counter {
        Counter(host.define_metric(MetricKind::Counter, name))
    }

    pub fn inc(self, host: &impl Host) {
        self.add(host, 1);
    }

    /// Add `n` (no host call for 0).
    pub fn add(self, host: &impl Host, n: u64) {
        if let (Some(id), true) = (self.0, n > 0) {
            host.increment_metric(id, i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

impl Gauge {
    pub fn define(host: &impl Host, name: &str) -> Gauge {
        Gauge(host.define_metric(MetricKind::Gauge, name))
    }

    pub fn set(self, host: &impl Host, value: u64) {
        if let Some(id) = self.0 {
            host.record_metric(id, value);
        }
    }

    /// Move the gauge by `delta` (each worker adds its own change to a process-wide sum).
    pub fn add(self, host: &impl Host, delta: i64) {
        if let (Some(id), true) = (self.0, delta != 0) {
            host.increment_metric(id, delta);
        }
    }
}

/// The client role's metrics.
pub struct Metrics {
    /// Requests steered with the override header.
    pub picks: Counter,
    /// Steered requests served by the first choice, and by another endpoint (refused or retried).
    pub honoured: Counter,
    pub not_honoured: Counter,
    /// Of those not honoured, the ones Envoy never tried (not in the cluster; not endpoint failures).
    pub refused: Counter,
    /// Requests of clusters whose steering is paused (Envoy refused most picks).
    pub paused: Counter,
    pub steering_pauses: Counter,
    /// Responses counted against their endpoint: failures (5xx, resets, failure gRPC statuses) and
    /// overload answers (429, RESOURCE_EXHAUSTED).
    pub failures: Counter,
    pub overloads: Counter,
    /// Endpoints suspended after a run of failures, and suspensions ended by a good probe.
    pub suspensions: Counter,
    pub recoveries: Counter,
    /// Health checks of suspended endpoints sent (`health_check_path`, `health_check_grpc`), those
    /// that failed (not passed in time, or refused by the host) and those the destination does not
    /// serve us (then its cluster's checks pause for a minute, see `CheckVerdict::Unanswerable`); a
    /// passed one that ends a suspension is a recovery.
    pub health_checks_sent: Counter,
    pub health_checks_failed: Counter,
    pub health_checks_unanswerable: Counter,
    /// Due checks left to other callers, and suspensions ended by their users' good answers (see
    /// `tailweight_picker::check_share`).
    pub health_checks_left_to_others: Counter,
    pub readmissions_on_evidence: Counter,
    /// Left to the fallback LB on purpose (exploration), and for want of a candidate.
    pub explorations: Counter,
    pub fallbacks: Counter,
    /// Requests of clusters beyond `max_clusters`, or without a cluster name.
    pub untracked: Counter,
    /// A request arrived carrying the override header: removed/overwritten, or kept (trusted).
    pub incoming_header_replaced: Counter,
    pub incoming_header_trusted: Counter,
    pub reports_sent: Counter,
    pub reports_ok: Counter,
    pub reports_failed: Counter,
    pub views_applied: Counter,
    /// Load stamps read from responses (`load_stamp_max_age_ms` > 0), and stamp headers that could
    /// not be read (removed all the same).
    pub stamps_read: Counter,
    pub stamps_invalid: Counter,
    /// Stamp headers of clusters not in `load_stamp_clusters`: removed unread.
    pub stamps_untrusted: Counter,
    pub endpoints_forgotten: Counter,
    /// Gauges (process-wide: the last writer wins, so only one worker writes each).
    pub endpoints_tracked: Gauge,
    pub weights_age_ms: Gauge,
    /// Shared-data slots of this proxy's workers (bounded by the workers alive at once).
    pub vm_slots: Gauge,
    /// Clusters whose steering is paused (each worker adds its own change).
    pub clusters_paused: Gauge,
    /// With `per_endpoint_metrics`: each endpoint's metrics (defined on first use; never deleted).
    per_endpoint: Option<EndpointMetrics>,
}

/// The endpoints with metrics, at most `MAX_ENDPOINT_METRICS`: their metrics, and their place by
/// `cluster\naddress` (a `FastMap<usize>`, the one map type the picker's indexes use too, so the
/// Wasm module carries one hash table instance, not one per value type).
#[derive(Default)]
struct EndpointMetrics {
    at: FastMap<usize>,
    ids: Vec<EndpointIds>,
    /// Endpoints left without metrics for want of room.
    over: Counter,
    /// The key being looked up (kept to reuse its allocation: picks look up every request).
    key: String,
}

/// Endpoints given per-endpoint metrics by one worker at most: Envoy cannot delete a metric, so
/// without a bound every pod a rollout brings would grow the proxy's stats for its life. Beyond it
/// an endpoint's picks and state are not shown (counted in `tailweight.endpoint_metrics_over`).
pub const MAX_ENDPOINT_METRICS: usize = 1024;

/// The per-endpoint gauges: the picker's state of it (`tailweight_picker::EndpointState` as a
/// number), its latency estimate and the requests in flight to it from this proxy.
pub const ENDPOINT_GAUGES: [&str; 3] = ["state", "latency_us", "inflight"];

/// One endpoint's metrics (None: not defined yet) and the gauges' last values.
#[derive(Default)]
struct EndpointIds {
    picks: Option<Counter>,
    gauges: Option<[Gauge; 3]>,
    last: [Option<u64>; 3],
}

fn endpoint_metric(address: &str, cluster: &str, name: &str) -> String {
    format!("tailweight.endpoint.{address}.{cluster}.{name}")
}

/// Defined by every role, so that a healthy configuration shows `config_errors: 0`.
pub const CONFIG_ERRORS: &str = "tailweight.config_errors";
/// Requests whose endpoint the picker chose (a shell's own load balancer counts its choices here too).
pub const PICKS_COUNTER: &str = "tailweight.picks";

/// The counters of a server-role filter (see `server_request`).
pub struct StampMetrics {
    /// Responses stamped with the endpoint's requests in flight.
    pub written: Counter,
    /// Of those, responses whose application had set the stamp header itself (replaced).
    pub replaced: Counter,
}

impl StampMetrics {
    pub fn define(host: &impl Host) -> Self {
        Counter::define(host, CONFIG_ERRORS);
        StampMetrics {
            written: Counter::define(host, "tailweight.stamps_written"),
            replaced: Counter::define(host, "tailweight.stamps_replaced"),
        }
    }
}

impl Metrics {
    pub fn define(host: &impl Host, per_endpoint: bool) -> Self {
        // Full names: a `format!` of the prefix per metric cost ~1.3 KB of Wasm module.
        let c = |name: &str| Counter::define(host, name);
        let g = |name: &str| Gauge::define(host, name);
        c(CONFIG_ERRORS);
        Metrics {
            picks: c(PICKS_COUNTER),
            honoured: c("tailweight.picks_honoured"),
            not_honoured: c("tailweight.picks_not_honoured"),
            refused: c("tailweight.picks_refused"),
            paused: c("tailweight.paused"),
            steering_pauses: c("tailweight.steering_pauses"),
            failures: c("tailweight.failures"),
            overloads: c("tailweight.overloads"),
            suspensions: c("tailweight.suspensions"),
            recoveries: c("tailweight.recoveries"),
            health_checks_sent: c("tailweight.health_checks_sent"),
            health_checks_failed: c("tailweight.health_checks_failed"),
            health_checks_unanswerable: c("tailweight.health_checks_unanswerable"),
            health_checks_left_to_others: c("tailweight.health_checks_left_to_others"),
            readmissions_on_evidence: c("tailweight.readmissions_on_evidence"),
            explorations: c("tailweight.explorations"),
            fallbacks: c("tailweight.fallbacks"),
            untracked: c("tailweight.untracked"),
            incoming_header_replaced: c("tailweight.incoming_header_replaced"),
            incoming_header_trusted: c("tailweight.incoming_header_trusted"),
            reports_sent: c("tailweight.reports_sent"),
            reports_ok: c("tailweight.reports_ok"),
            reports_failed: c("tailweight.reports_failed"),
            views_applied: c("tailweight.views_applied"),
            stamps_read: c("tailweight.stamps_read"),
            stamps_invalid: c("tailweight.stamps_invalid"),
            stamps_untrusted: c("tailweight.stamps_untrusted"),
            endpoints_forgotten: c("tailweight.endpoints_forgotten"),
            endpoints_tracked: g("tailweight.endpoints_tracked"),
            weights_age_ms: g("tailweight.weights_age_ms"),
            vm_slots: g("tailweight.vm_slots"),
            clusters_paused: g("tailweight.clusters_paused"),
            per_endpoint: per_endpoint
                .then(|| EndpointMetrics { over: c("tailweight.endpoint_metrics_over"), ..EndpointMetrics::default() }),
        }
    }

    /// `tailweight.endpoint.<ip>:<port>.<cluster>.picks`, only when opted in. The chart's sidecar
    /// bootstrap override (`charts/tailweight/files/sidecar-bootstrap.json`, `stats_tags`) turns the
    /// address and the cluster into the labels `upstream_endpoint` and `upstream_cluster` of
    /// `tailweight_endpoint_picks` in /stats/prometheus; its address pattern is the one here.
    pub fn endpoint_pick(&mut self, host: &impl Host, cluster: &str, address: &str) {
        if let Some(ids) = self.endpoint_ids(host, cluster, address) {
            let picks =
                *ids.picks.get_or_insert_with(|| Counter::define(host, &endpoint_metric(address, cluster, "picks")));
            picks.inc(host);
        }
    }

    /// The gauges `tailweight.endpoint.<ip>:<port>.<cluster>.{state,latency_us,inflight}` (see
    /// `ENDPOINT_GAUGES`), each recorded when it changes, only when opted in.
    pub fn endpoint_gauges(&mut self, host: &impl Host, cluster: &str, address: &str, values: [u64; 3]) {
        if let Some(ids) = self.endpoint_ids(host, cluster, address) {
            let gauges = *ids.gauges.get_or_insert_with(|| {
                ENDPOINT_GAUGES.map(|g| Gauge::define(host, &endpoint_metric(address, cluster, g)))
            });
            for ((gauge, value), last) in gauges.into_iter().zip(values).zip(&mut ids.last) {
                if *last != Some(value) {
                    gauge.set(host, value);
                    *last = Some(value);
                }
            }
        }
    }

    pub fn per_endpoint(&self) -> bool {
        self.per_endpoint.is_some()
    }

    /// The metrics of one endpoint of one cluster, entered on first use (None: not opted in, or no
    /// room left: see `MAX_ENDPOINT_METRICS`).
    fn endpoint_ids(&mut self, host: &impl Host, cluster: &str, address: &str) -> Option<&mut EndpointIds> {
        let m = self.per_endpoint.as_mut()?;
        m.key.clear();
        m.key.extend([cluster, "\n", address]);
        let at = match m.at.get(m.key.as_str()) {
            Some(&at) => at,
            None if m.ids.len() >= MAX_ENDPOINT_METRICS => {
                m.over.inc(host);
                return None;
            }
            None => {
                m.ids.push(EndpointIds::default());
                m.at.insert(m.key.clone(), m.ids.len() - 1);
                m.ids.len() - 1
            }
        };
        m.ids.get_mut(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_host::TestProxy;

    #[test]
    fn per_endpoint_metrics_stop_at_the_bound_and_count_the_rest() {
        let proxy = TestProxy::new(0, 1);
        let host = proxy.host(0);
        let mut m = Metrics::define(&host, true);
        for i in 0..MAX_ENDPOINT_METRICS + 6 {
            let address = format!("10.1.{}.{}:80", i / 250, i % 250);
            m.endpoint_pick(&host, "c", &address);
            m.endpoint_pick(&host, "c", &address);
        }
        let picks = proxy.metrics_named("tailweight.endpoint.");
        assert_eq!(picks.len(), MAX_ENDPOINT_METRICS);
        assert!(picks.iter().all(|(_, v)| *v == 2), "each counts its own picks");
        assert_eq!(proxy.metric("tailweight.endpoint_metrics_over"), 12, "6 endpoints, 2 picks each");
        assert_eq!(proxy.metric("tailweight.endpoint.10.1.0.0:80.c.picks"), 2);
    }

    #[test]
    fn without_the_opt_in_no_endpoint_metric_is_defined() {
        let proxy = TestProxy::new(0, 1);
        let host = proxy.host(0);
        let mut m = Metrics::define(&host, false);
        m.endpoint_pick(&host, "c", "10.0.0.1:80");
        m.endpoint_gauges(&host, "c", "10.0.0.1:80", [1, 2, 3]);
        assert!(proxy.metrics_named("tailweight.endpoint.").is_empty());
    }
}
