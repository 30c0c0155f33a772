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
    pub endpoints_forgotten: Option<u32>,
    /// Gauges (process-wide: the last writer wins, so only one VM writes each).
    pub endpoints_tracked: Option<u32>,
    pub weights_age_ms: Option<u32>,
    pub clusters_paused: Option<u32>,
    /// Metric id per endpoint address (usize::MAX: the host refused to define it).
    per_endpoint: Option<FastMap<usize>>,
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
            endpoints_forgotten: c("tailweight.endpoints_forgotten"),
            endpoints_tracked: g("tailweight.endpoints_tracked"),
            weights_age_ms: g("tailweight.weights_age_ms"),
            clusters_paused: g("tailweight.clusters_paused"),
            per_endpoint: per_endpoint.then(FastMap::default),
        }
    }

    /// `tailweight.endpoint.<ip>_<port>.picks`, only when opted in.
    pub fn endpoint_pick(&mut self, address: &str) {
        if let Some(map) = &mut self.per_endpoint {
            // Look up by &str first: the owned key is made once per endpoint, not per request.
            let id = match map.get(address) {
                Some(id) => *id,
                None => {
                    let name = address.replace([':', '.', '[', ']'], "_");
                    let id = host::define_counter(&format!("tailweight.endpoint.{name}.picks"))
                        .map_or(usize::MAX, |id| id as usize);
                    *map.entry(address.to_string()).or_insert(id)
                }
            };
            host::increment(u32::try_from(id).ok(), 1);
        }
    }
}
