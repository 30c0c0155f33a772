//! What the latency path learns about an endpoint over recomputes (step 2): its service time and
//! concurrency, which step 3 rates its capacity from (`capacity`).

use crate::merge::Merged;
use crate::params::WeightParams;
use tailweight_math::ewma::decay_weight;

/// What the latency path learns about an endpoint over recomputes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct LatencyModel {
    /// Work per request: the low envelope of the merged mean latency.
    pub service_us: Option<f64>,
    /// Requests it serves at once, from Little's law (None until seen saturated).
    pub concurrency: Option<f64>,
}

impl LatencyModel {
    /// Step 2, latency path, `elapsed_us` after the last recompute (None: the first; it counts as
    /// a second). The service time is a valley follower of the merged mean latency: it drops to a
    /// lower latency at once and rises toward a higher one by `1 - exp(-elapsed / service_rise)` of
    /// the gap. Queueing only ever adds latency, so the low envelope estimates the work per request,
    /// while the mean at high load mostly measures queueing (which the picker scores per request
    /// from in-flight counts). While the endpoint queues (latency > `saturation_factor` x service
    /// time) it serves at capacity, so Little's law gives its concurrency: `k = qps x service time`
    /// (at least 1), smoothed with `exp(-elapsed / concurrency_decay)`.
    pub fn learn(&mut self, m: &Merged, p: &WeightParams, elapsed_us: Option<u64>) {
        let dt_us = elapsed_us.unwrap_or(1_000_000);
        let Some(latency) = m.latency_us.filter(|l| *l > 0.0) else { return };
        let service = match self.service_us {
            Some(s) if latency > s => s + (latency - s) * (1.0 - decay_weight(dt_us, p.service_rise_us)),
            _ => latency,
        };
        self.service_us = Some(service);
        if latency > p.saturation_factor * service && m.qps > 0.0 {
            let k = (m.qps * service / 1e6).max(1.0);
            let keep = decay_weight(dt_us, p.concurrency_decay_us);
            self.concurrency = Some(match self.concurrency {
                Some(old) => old * keep + k * (1.0 - keep),
                None => k,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_time_drops_at_once_and_rises_slowly() {
        let p = WeightParams::default();
        let mut l = LatencyModel::default();
        let at = |latency_us: f64| Merged {
            qps: 10.0,
            eps: 0.0,
            inflight: 0.0,
            latency_us: Some(latency_us),
            cpu: None,
            reporters: 1,
            ..Merged::default()
        };
        l.learn(&at(10_000.0), &p, None);
        l.learn(&at(5_000.0), &p, Some(1_000_000));
        assert_eq!(l.service_us, Some(5_000.0));
        l.learn(&at(15_000.0), &p, Some(p.service_rise_us as u64));
        let risen = 5_000.0 + 10_000.0 * (1.0 - (-1.0f64).exp());
        assert!((l.service_us.unwrap() - risen).abs() < 1e-6, "{:?}", l.service_us);
        assert_eq!(l.concurrency, None, "never above saturation_factor x service time");
    }

    #[test]
    fn littles_law_gives_the_concurrency_while_it_queues() {
        let p = WeightParams::default();
        let mut l = LatencyModel { service_us: Some(10_000.0), concurrency: None };
        // 400 req/s at a 10 ms service time, 50 ms latency: 4 in service.
        let m = Merged { qps: 400.0, inflight: 20.0, latency_us: Some(50_000.0), reporters: 1, ..Merged::default() };
        l.learn(&m, &p, Some(1_000));
        let service = l.service_us.unwrap();
        assert!(service > 10_000.0 && service < 10_010.0, "rises slowly toward 50 ms: {service}");
        assert_eq!(l.concurrency, Some(400.0 * service / 1e6));
    }
}
