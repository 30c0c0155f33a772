//! Raw capacity, in requests per second: by CPU when the cluster's endpoints report utilisation,
//! else by latency and Little's law; less the rate that drains a standing queue.

use crate::decision::Method;
use crate::held_capacity::{hold, ErrorState};
use crate::merge::{CpuOrigin, Merged};
use crate::params::WeightParams;
use crate::rate_history::RateHistory;
use crate::record::EndpointRecord;
use tailweight_math::stats::median;

/// Envoy client-side WRR's weight from an ORCA-style report: `qps / (utilisation + penalty x eps /
/// qps)`, throughput per unit of utilisation with each error costing `penalty` / qps of it
/// (Envoy's `error_utilization_penalty`). None unless qps and utilisation are positive and the
/// weight is finite and positive (Envoy ignores such reports). The weight book's CPU path and the
/// simulator's CSWRR peer both use it.
pub fn cswrr_weight(qps: f64, eps: f64, utilization: f64, error_penalty: f64) -> Option<f64> {
    if !(qps > 0.0 && utilization > 0.0) {
        return None;
    }
    let weight = qps / (utilization + error_penalty * eps / qps);
    (weight.is_finite() && weight > 0.0).then_some(weight)
}

/// Step 3, CPU path: [`cswrr_weight`] of the merged CPU and the request and error rates over the
/// same window. ORCA utilisation covers about the reporters' last interval, like their request
/// windows; a metrics-store value averages over `cpu_window_us` ending when it was set, so it is
/// divided into the rates over that window (`rates`; the last window's while those are unknown).
/// None below `min_cpu` or `min_qps_for_cpu`.
pub(crate) fn by_cpu(m: &Merged, rates: &RateHistory, p: &WeightParams) -> Option<f64> {
    let cpu = m.cpu?;
    let (qps, eps) = match cpu.source {
        CpuOrigin::Metrics => {
            rates.rates_over(cpu.at_us.saturating_sub(p.cpu_window_us), cpu.at_us).unwrap_or((m.qps, m.eps))
        }
        CpuOrigin::Orca => (m.qps, m.eps),
    };
    if !(cpu.utilization >= p.min_cpu && qps >= p.min_qps_for_cpu) {
        return None;
    }
    cswrr_weight(qps, eps, cpu.utilization, p.error_penalty)
}

/// Step 3, latency path: `k x success / (service + failure_cost x errors)` requests per second,
/// with `k` the concurrency and `errors` the error ratio. Errors cost twice: the capacity counts
/// successes only, and each failure adds `failure_cost_us` to the time per request, so failing
/// fast never looks fast.
fn by_latency(concurrency: f64, error_ratio: f64, service_us: Option<f64>, p: &WeightParams) -> Option<f64> {
    let errors = error_ratio.clamp(0.0, 1.0);
    service_us
        .filter(|s| *s > 0.0)
        .map(|service_us| concurrency * 1e6 * (1.0 - errors) / (service_us + p.failure_cost_us * errors))
}

/// Requests in flight beyond the endpoint's concurrency: a standing queue, work already owed.
fn backlog(inflight: f64, concurrency: f64) -> f64 {
    (inflight - concurrency).max(0.0)
}

/// Capacity left for new requests while `backlog` requests wait: `backlog / backlog_drain` requests
/// per second come off, down to 1% of the capacity (0 = off), so new requests go elsewhere until
/// the queue drains. Capacity alone keeps feeding a queue that built up (cold start, a slowdown)
/// at the full rate, and it then drains only at the spare rate. The in-flight sum is seconds old:
/// it acts through the smoothed, step-bounded weights, never on single requests.
fn drained(capacity: f64, backlog: f64, p: &WeightParams) -> f64 {
    if p.backlog_drain_us <= 0.0 {
        return capacity;
    }
    (capacity - backlog * 1e6 / p.backlog_drain_us).max(0.01 * capacity)
}

/// One method per cluster (raw capacities in different units must not be compared): CPU when at
/// least half of the `counted` endpoints that vote can be rated by CPU. An endpoint votes when it
/// served at least `min_qps_for_cpu` (below that the CPU path cannot rate it, whatever it
/// reports: no traffic is no vote for latency) and can be rated at all; when none does, every
/// counted endpoint that can be rated votes.
fn cluster_method(endpoints: &[EndpointRecord], by_cpu: &[Option<f64>], counted: &[bool], p: &WeightParams) -> Method {
    let rated = || {
        endpoints
            .iter()
            .zip(by_cpu)
            .zip(counted)
            .filter(|(_, c)| **c)
            .map(|(e, _)| e)
            .filter(|(e, cpu)| cpu.is_some() || e.latency.service_us.is_some())
    };
    let busy = |e: &EndpointRecord| e.decision.as_ref().is_some_and(|d| d.qps >= p.min_qps_for_cpu);
    let any_busy = rated().any(|(e, _)| busy(e));
    let voters = || rated().filter(move |(e, _)| !any_busy || busy(e));
    let by_cpu_count = voters().filter(|(_, cpu)| cpu.is_some()).count();
    if by_cpu_count > 0 && by_cpu_count * 2 >= voters().count() {
        Method::Cpu
    } else {
        Method::Latency
    }
}

/// Step 3: each endpoint's raw capacity by the cluster's method (held while it cannot be rated),
/// less its backlog, into `raw` (None: no capacity, the median target). Endpoints never seen
/// saturated count with the median learned concurrency of the `counted` ones (else 1). `by_cpu`
/// and `counted` are aligned with `endpoints`; `sorted` is scratch. The CPU path does not rate an
/// endpoint back from quiet (`traffic.rs`) in that first window: the reporters' windows began
/// before its traffic did, so the request rate is diluted by the quiet part while the utilisation
/// covers the busy part (returning backends were rated at half their capacity).
pub(crate) fn rate(
    endpoints: &mut [EndpointRecord],
    by_cpu: &[Option<f64>],
    counted: &[bool],
    p: &WeightParams,
    sorted: &mut Vec<f64>,
    raw: &mut Vec<Option<f64>>,
    now_us: u64,
) {
    let method = cluster_method(endpoints, by_cpu, counted, p);
    sorted.clear();
    sorted.extend(endpoints.iter().zip(counted).filter(|(_, c)| **c).filter_map(|(e, _)| e.latency.concurrency));
    let median_concurrency = median(sorted).unwrap_or(1.0);
    raw.clear();
    for (endpoint, by_cpu) in endpoints.iter_mut().zip(by_cpu) {
        let k = endpoint.latency.concurrency.unwrap_or(median_concurrency);
        let rated = match method {
            Method::Cpu => by_cpu.filter(|_| !endpoint.back_from_quiet),
            _ => by_latency(k, endpoint.ejection.error_ratio, endpoint.latency.service_us, p),
        };
        let errors = ErrorState {
            eps: endpoint.decision.as_ref().map_or(0.0, |d| d.eps),
            error_ratio: endpoint.ejection.error_ratio,
            ejected: endpoint.ejection.ejected,
        };
        let rated = rated.filter(|v| v.is_finite() && *v > 0.0);
        let capacity = hold(&mut endpoint.held, rated, method, errors, p, now_us);
        let backlog = endpoint.decision.as_ref().map_or(0.0, |d| backlog(d.inflight, k));
        raw.push(capacity.map(|c| drained(c, backlog, p)));
        if let Some(d) = endpoint.decision.as_mut() {
            d.capacity = capacity;
            d.method = if capacity.is_some() { method } else { Method::Median };
            d.backlog = backlog;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cswrr_weight_is_qps_per_utilisation_with_an_error_penalty() {
        assert_eq!(cswrr_weight(100.0, 0.0, 0.5, 1.0), Some(200.0));
        assert_eq!(cswrr_weight(100.0, 50.0, 0.5, 1.0), Some(100.0));
        assert_eq!(cswrr_weight(100.0, 50.0, 0.5, 0.0), Some(200.0), "no penalty: errors are free");
        assert_eq!(cswrr_weight(100.0, 0.0, 0.0, 1.0), None);
        assert_eq!(cswrr_weight(0.0, 0.0, 0.5, 1.0), None);
        assert_eq!(cswrr_weight(f64::NAN, 0.0, 0.5, 1.0), None);
    }

    #[test]
    fn failures_cost_time_and_count_no_capacity() {
        let p = WeightParams::default();
        assert_eq!(by_latency(2.0, 0.0, Some(10_000.0), &p), Some(200.0));
        // Half failing: half the successes per request, each request 50 ms dearer.
        assert_eq!(by_latency(2.0, 0.5, Some(10_000.0), &p), Some(2.0 * 1e6 * 0.5 / 60_000.0));
        assert_eq!(by_latency(2.0, 0.0, None, &p), None);
    }

    #[test]
    fn a_backlog_takes_its_drain_rate_off_down_to_one_percent() {
        let p = WeightParams::default();
        assert_eq!(backlog(12.0, 4.0), 8.0);
        assert_eq!(backlog(2.0, 4.0), 0.0);
        // 5 s to drain 100 requests: 20 req/s off.
        assert_eq!(drained(100.0, 100.0, &p), 80.0);
        assert_eq!(drained(100.0, 1e6, &p), 1.0);
        assert_eq!(drained(100.0, 1e6, &WeightParams { backlog_drain_us: 0.0, ..p }), 100.0);
    }
}
