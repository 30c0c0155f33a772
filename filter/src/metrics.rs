//! The filter's metrics, as `wasmcustom.tailweight.*` in /stats (`tailweight_*` in /stats/prometheus).
//! Bounded cardinality: per-endpoint counters only when `per_endpoint_metrics` is on, because Envoy
//! cannot delete a metric once defined.

use crate::host;
use tailweight_math::hash::FastMap;

pub struct Metrics {
    /// Requests steered with the override header.
    pub picks: Option<u32>,
    /// Steered requests served by the first choice, and by another endpoint (refused or retried).
    pub honoured: Option<u32>,
    pub not_honoured: Option<u32>,
    /// Of those not honoured, the ones Envoy never tried (not in the cluster; not endpoint failures).
    pub refused: Option<u32>,
    /// Requests of clusters whose steering is paused (Envoy refused most picks; see tailweight_picker::steering).
    pub paused: Option<u32>,
    pub steering_pauses: Option<u32>,
    /// Responses counted against their endpoint: failures (5xx, resets, failure gRPC statuses) and
    /// overload answers (429, RESOURCE_EXHAUSTED).
    pub failures: Option<u32>,
    pub overloads: Option<u32>,
    /// Endpoints suspended after a run of failures, and suspensions ended by a good probe.
    pub suspensions: Option<u32>,
    pub recoveries: Option<u32>,
    /// Health checks of suspended endpoints sent (`health_check_path`, `health_check_grpc`), those
    /// that failed (not passed in time, or refused by the host) and those the destination does not
    /// serve us (then its cluster's checks pause for a minute, see `CheckVerdict::Unanswerable`); a
    /// passed one that ends a suspension is a recovery.
    pub health_checks_sent: Option<u32>,
    pub health_checks_failed: Option<u32>,
    pub health_checks_unanswerable: Option<u32>,
    /// Due checks left to other callers, and suspensions ended by their users' good answers (see
    /// `tailweight_picker::health_check::check_share`).
    pub health_checks_left_to_others: Option<u32>,
    pub readmissions_on_evidence: Option<u32>,
    /// Left to the fallback LB on purpose (exploration), and for want of a candidate.
    pub explorations: Option<u32>,
    pub fallbacks: Option<u32>,
    /// Requests of clusters beyond `max_clusters`, or without a cluster name.
    pub untracked: Option<u32>,
    /// A request arrived carrying the override header: removed/overwritten, or kept (trusted).
    pub incoming_header_replaced: Option<u32>,
    pub incoming_header_trusted: Option<u32>,
    pub reports_sent: Option<u32>,
    pub reports_ok: Option<u32>,
    pub reports_failed: Option<u32>,
    pub views_applied: Option<u32>,
    /// Load stamps read from responses (`load_stamp_max_age_ms` > 0), and stamp headers that could
    /// not be read (removed all the same).
    pub stamps_read: Option<u32>,
    pub stamps_invalid: Option<u32>,
    /// Stamp headers of clusters not in `load_stamp_clusters`: removed unread.
    pub stamps_untrusted: Option<u32>,
    pub endpoints_forgotten: Option<u32>,
    /// Gauges (process-wide: the last writer wins, so only one VM writes each).
    pub endpoints_tracked: Option<u32>,
    pub weights_age_ms: Option<u32>,
    /// Shared-data slots of this Envoy's VMs (bounded by the VMs alive at once: see `shared_layout`).
    pub vm_slots: Option<u32>,
    pub clusters_paused: Option<u32>,
    /// Per cluster and endpoint address, its metrics (defined on first use; never deleted).
    per_endpoint: Option<FastMap<FastMap<EndpointIds>>>,
}

/// The per-endpoint gauges: the picker's state of it (`tailweight_picker::inspect::EndpointState`
/// as a number), its latency estimate and the requests in flight to it from this proxy.
pub const ENDPOINT_GAUGES: [&str; 3] = ["state", "latency_us", "inflight"];

/// One endpoint's metric ids (None inside: the host refused to define it) and the gauges' last values.
#[derive(Default)]
struct EndpointIds {
    picks: Option<Option<u32>>,
    gauges: Option<[Option<u32>; 3]>,
    last: [Option<u64>; 3],
}

fn endpoint_metric(address: &str, cluster: &str, name: &str) -> String {
    format!("tailweight.endpoint.{address}.{cluster}.{name}")
}

/// The counters of a server-role filter (see `server`).
pub struct StampMetrics {
    /// Responses stamped with the endpoint's requests in flight.
    pub written: Option<u32>,
    /// Of those, responses whose application had set the stamp header itself (replaced).
    pub replaced: Option<u32>,
}

impl StampMetrics {
    pub fn define() -> Self {
        host::define_counter("tailweight.config_errors");
        StampMetrics {
            written: host::define_counter("tailweight.stamps_written"),
            replaced: host::define_counter("tailweight.stamps_replaced"),
        }
    }
}

pub fn inc(metric: Option<u32>) {
    host::increment(metric, 1);
}

/// Add `n` (no host call for 0).
pub fn add(metric: Option<u32>, n: u32) {
    if n > 0 {
        host::increment(metric, i64::from(n));
    }
}

impl Metrics {
    pub fn define(per_endpoint: bool) -> Self {
        // Full names: a `format!` of the prefix per metric cost ~1.3 KB of module.
        let (c, g) = (host::define_counter, host::define_gauge);
        // Defined (not kept) so that a healthy configuration shows `config_errors: 0`.
        c("tailweight.config_errors");
        Metrics {
            picks: c("tailweight.picks"),
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
            per_endpoint: per_endpoint.then(FastMap::default),
        }
    }

    /// `tailweight.endpoint.<ip>:<port>.<cluster>.picks`, only when opted in. The chart's sidecar
    /// bootstrap override (`charts/tailweight/files/sidecar-bootstrap.json`, `stats_tags`) turns the
    /// address and the cluster into the labels `upstream_endpoint` and `upstream_cluster` of
    /// `tailweight_endpoint_picks` in /stats/prometheus; its address pattern is the one here.
    pub fn endpoint_pick(&mut self, cluster: &str, address: &str) {
        if let Some(ids) = self.endpoint_ids(cluster, address) {
            let id =
                *ids.picks.get_or_insert_with(|| host::define_counter(&endpoint_metric(address, cluster, "picks")));
            host::increment(id, 1);
        }
    }

    /// The gauges `tailweight.endpoint.<ip>:<port>.<cluster>.{state,latency_us,inflight}` (see
    /// `ENDPOINT_GAUGES`), each recorded when it changes, only when opted in.
    pub fn endpoint_gauges(&mut self, cluster: &str, address: &str, values: [u64; 3]) {
        if let Some(ids) = self.endpoint_ids(cluster, address) {
            let gauges = *ids.gauges.get_or_insert_with(|| {
                ENDPOINT_GAUGES.map(|g| host::define_gauge(&endpoint_metric(address, cluster, g)))
            });
            for ((gauge, value), last) in gauges.into_iter().zip(values).zip(&mut ids.last) {
                if *last != Some(value) {
                    host::record(gauge, value);
                    *last = Some(value);
                }
            }
        }
    }

    pub fn per_endpoint(&self) -> bool {
        self.per_endpoint.is_some()
    }

    /// The metric ids of one endpoint of one cluster, entered on first use (None: not opted in).
    fn endpoint_ids(&mut self, cluster: &str, address: &str) -> Option<&mut EndpointIds> {
        let clusters = self.per_endpoint.as_mut()?;
        // Look up by &str first: the owned keys are made once per endpoint, not per request.
        if !clusters.get(cluster).is_some_and(|by_address| by_address.contains_key(address)) {
            clusters.entry(cluster.to_string()).or_default().insert(address.to_string(), EndpointIds::default());
        }
        clusters.get_mut(cluster)?.get_mut(address)
    }
}
