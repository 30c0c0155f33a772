//! What this worker learned of one endpoint, for a load balancer that picks on its own (the native
//! shell's load-balancing policy, which has Envoy's own in-flight count and needs only the rest):
//! the cost of one more request there without the in-flight factor, the share of picks its health
//! allows, and whether a suspended endpoint's probe is due.

use super::Balancer;
use crate::health::Availability;

/// One endpoint as this worker learned it (see `Balancer::learned_endpoint`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearnedEndpoint {
    /// `Endpoint::idle_score`: `(latency + failure_latency x f) x (1 + error_penalty x f)`, from the
    /// faded latency estimate (peak EWMA, fading toward the cluster's prior with the age of its last
    /// sample), `f` the recent failure ratio.
    pub cost_us: f64,
    /// `Endpoint::sampling_weight`: 0 while suspended or absent, the ramp's share while one runs,
    /// the aggregator's weight while its view is fresh.
    pub weight: f64,
    /// Suspended and its probe is due at `now_us`: one request may go there to see if it is back.
    pub probe_due: bool,
}

impl Balancer {
    /// Endpoint `address` of cluster `cluster_name` as learned here at `now_us`; None when unknown.
    pub fn learned_endpoint(&self, cluster_name: &str, address: &str, now_us: u64) -> Option<LearnedEndpoint> {
        let cluster = self.clusters.get(cluster_name)?;
        let endpoint = cluster.get(address)?;
        let p = &self.settings.pick;
        let probe_due = matches!(endpoint.health.availability(), Availability::Suspended { probe_at_us, .. } if probe_at_us <= now_us);
        Some(LearnedEndpoint {
            cost_us: endpoint.idle_score(now_us, p, cluster.prior_latency_us()),
            weight: endpoint.sampling_weight(cluster.view_fresh(now_us), cluster.readmit_weight(), now_us),
            probe_due,
        })
    }

    /// The cost an endpoint of `cluster_name` not known here is given: the cluster's prior latency
    /// (its known endpoints' typical latency; the configured default before any); None when the
    /// cluster is not tracked.
    pub fn learned_prior_us(&self, cluster_name: &str) -> Option<f64> {
        self.clusters.get(cluster_name).map(|c| c.prior_latency_us())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::Settings;
    use crate::outcome::{RequestOutcome, ResponseClass};

    const C: &str = "outbound|80||svc";
    const MS: u64 = 1_000;

    fn answer(b: &mut Balancer, served: &str, latency_us: u64, class: ResponseClass, now_us: u64) {
        let outcome = RequestOutcome { served: Some(served), attempts: 1, latency_us, class, load: None };
        b.complete(C, None, &outcome, now_us);
    }

    #[test]
    fn a_slow_endpoint_costs_more_and_a_failing_one_is_suspended_until_its_probe() {
        let mut b = Balancer::new(Settings::default(), 3);
        assert_eq!(b.learned_endpoint(C, "10.0.0.1:80", 0), None);
        for i in 0..5 {
            answer(&mut b, "10.0.0.1:80", 2 * MS, ResponseClass::Success, i * MS);
            answer(&mut b, "10.0.0.2:80", 40 * MS, ResponseClass::Success, i * MS);
        }
        let (a, slow) = (
            b.learned_endpoint(C, "10.0.0.1:80", 5 * MS).unwrap(),
            b.learned_endpoint(C, "10.0.0.2:80", 5 * MS).unwrap(),
        );
        assert!(slow.cost_us > 5.0 * a.cost_us, "{slow:?} against {a:?}");
        assert_eq!((a.weight, a.probe_due), (1.0, false));
        assert!(b.learned_prior_us(C).is_some() && b.learned_prior_us("other").is_none());
        for i in 0..2 {
            answer(&mut b, "10.0.0.1:80", MS, ResponseClass::Failure, (6 + i) * MS);
        }
        let suspended = b.learned_endpoint(C, "10.0.0.1:80", 8 * MS).unwrap();
        assert_eq!((suspended.weight, suspended.probe_due), (0.0, false));
        assert!(b.learned_endpoint(C, "10.0.0.1:80", 7 * MS + b.settings.pick.probe_interval_us).unwrap().probe_due);
    }
}
