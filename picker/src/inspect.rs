//! One endpoint as this worker's picker sees it, for the per-endpoint gauges that
//! `tailweight endpoints` reads (the filter sets them with `per_endpoint_metrics`).

use crate::endpoint::Endpoint;
use crate::health::Availability;

/// Why an endpoint gets the picks it gets, most telling first: refused (Envoy refused a pick of it:
/// no picks until it serves again), suspended (a run of failures: probes only), ejected (by the
/// aggregator, while its view is fresh: probes only), ramping (slow start or recovery: a growing
/// share), healthy. The number is the gauge's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointState {
    Healthy = 0,
    Ramping = 1,
    Suspended = 2,
    Ejected = 3,
    Refused = 4,
}

/// What the gauges show of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointInspection {
    pub state: EndpointState,
    /// This worker's latency estimate (its Peak-EWMA, else its siblings' freshest), 0 while none.
    pub latency_us: u64,
    /// Requests in flight to it from this proxy: this worker's and its siblings' as last published.
    pub inflight: u32,
}

/// `endpoint` as of `now_us`; `view_fresh`: the cluster's aggregator view is young enough to use.
pub fn inspect(endpoint: &Endpoint, now_us: u64, view_fresh: bool) -> EndpointInspection {
    let health = &endpoint.health;
    let state = match health.availability() {
        Availability::Absent => EndpointState::Refused,
        Availability::Suspended { .. } => EndpointState::Suspended,
        Availability::Available if view_fresh && endpoint.global.is_some_and(|g| g.ejected) => EndpointState::Ejected,
        Availability::Available if health.ramp().is_some_and(|r| !r.done(now_us)) => EndpointState::Ramping,
        Availability::Available => EndpointState::Healthy,
    };
    let latency_us = endpoint
        .local
        .latency
        .map(|ewma| ewma.value_us())
        .or(endpoint.siblings.latency.map(|(us, _)| us))
        .map_or(0, |us| us.max(0.0).round() as u64);
    let inflight = endpoint.local.inflight.count().saturating_add(endpoint.siblings.inflight);
    EndpointInspection { state, latency_us, inflight }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::GlobalStats;

    #[test]
    fn states_in_order_of_what_tells_most() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        assert_eq!(inspect(&e, 1, true).state, EndpointState::Healthy);
        e.health.start_ramp(0, 10_000_000);
        assert_eq!(inspect(&e, 1_000, true).state, EndpointState::Ramping);
        assert_eq!(inspect(&e, 20_000_000, true).state, EndpointState::Healthy, "a finished ramp");
        e.global = Some(GlobalStats { weight: 0.1, inflight: 0.0, latency_us: 0.0, ejected: true, served_us: None });
        assert_eq!(inspect(&e, 1_000, true).state, EndpointState::Ejected);
        assert_eq!(inspect(&e, 1_000, false).state, EndpointState::Ramping, "a stale view is not used");
        e.health.mark_absent();
        assert_eq!(inspect(&e, 1_000, true).state, EndpointState::Refused);
    }

    #[test]
    fn in_flight_adds_the_siblings_and_latency_falls_back_to_theirs() {
        let mut e = Endpoint::new("10.0.0.1:80", 0);
        e.siblings.inflight = 3;
        e.siblings.latency = Some((2_499.6, 0));
        assert_eq!(
            inspect(&e, 1, true),
            EndpointInspection { state: EndpointState::Healthy, latency_us: 2_500, inflight: 3 }
        );
    }
}
