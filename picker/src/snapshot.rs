//! Snapshots of observations in wire form: one worker's (for its siblings and the report) and the
//! merge of all workers' into the proxy's single report.

use crate::cluster::Cluster;
use tailweight_math::hash::FastMap;
use tailweight_wire::report::{ClusterReport, EndpointReport};

/// The endpoints this worker saw recently: requests in flight to them, or a response from them within
/// `recent_us` (the endpoint ttl: what it tracks). A report must not renew what this proxy no longer
/// sees: a deleted pod drops out of every report within the ttl, and so out of the aggregator's book.
/// In the worker's own order (stable from one snapshot to the next, which the aggregator's lookups
/// like; nothing needs them sorted, and every sort is code the module carries).
pub fn of_clusters<'a>(
    clusters: impl Iterator<Item = (&'a String, &'a Cluster)>,
    now_us: u64,
    recent_us: u64,
) -> Vec<ClusterReport> {
    clusters
        .map(|(name, cluster)| {
            let endpoints: Vec<EndpointReport> = cluster
                .endpoints()
                .iter()
                .filter(|e| {
                    let recent = e.local.requests > 0 && now_us.saturating_sub(e.last_response_us) < recent_us;
                    recent || e.local.inflight.count() > 0
                })
                .map(|e| {
                    let l = &e.local;
                    let (latency_ewma_us, latency_age_ms) = match l.latency {
                        Some(ewma) => (ewma.value_us().round() as u64, age_ms(now_us, ewma.stamp_us())),
                        None => (0, 0),
                    };
                    EndpointReport {
                        address: e.address.clone(),
                        requests: l.requests,
                        errors: l.errors,
                        latency_sum_us: l.latency_sum_us,
                        inflight: l.inflight.count(),
                        latency_ewma_us,
                        latency_age_ms,
                        cpu: l.cpu.map(|(cpu, _)| cpu),
                        cpu_age_ms: l.cpu.map(|(_, at)| age_ms(now_us, at)),
                        seen_age_ms: e.answered_well.then(|| age_ms(now_us, e.last_success_us)),
                        counted_ms: Some(age_ms(now_us, l.counting_since_us)),
                    }
                })
                .collect();
            ClusterReport { name: name.clone(), endpoints }
        })
        .filter(|c| !c.endpoints.is_empty())
        .collect()
}

/// One worker's published snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub written_us: u64,
    /// A dead worker's counters still count (they are cumulative); its in-flight requests do not.
    pub live: bool,
    pub clusters: &'a [ClusterReport],
}

/// Merge all workers' snapshots as of `now_us`: counters and in-flight add up; the freshest latency
/// estimate and utilisation win (ages re-based to `now_us`); the sums have counted since the earliest
/// of their parts began (the longest `counted_ms`; absent if any part does not say). Clusters and
/// endpoints in the order they first appear.
pub fn merge(parts: &[Part], now_us: u64) -> Vec<ClusterReport> {
    let mut out: Vec<ClusterReport> = Vec::new();
    // Positions in `out`: of each cluster, and of each endpoint within its cluster.
    let mut cluster_at: FastMap<usize> = FastMap::default();
    let mut endpoint_at: Vec<FastMap<usize>> = Vec::new();
    for part in parts {
        let extra_ms = age_ms(now_us, part.written_us);
        for cluster in part.clusters {
            let ci = *cluster_at.entry(cluster.name.clone()).or_insert_with(|| {
                out.push(ClusterReport { name: cluster.name.clone(), endpoints: Vec::new() });
                endpoint_at.push(FastMap::default());
                out.len() - 1
            });
            let (merged, index) = (&mut out[ci].endpoints, &mut endpoint_at[ci]);
            for e in &cluster.endpoints {
                let mut first = false;
                let ei = *index.entry(e.address.clone()).or_insert_with(|| {
                    first = true;
                    merged.push(EndpointReport { address: e.address.clone(), ..Default::default() });
                    merged.len() - 1
                });
                let m = &mut merged[ei];
                m.requests = m.requests.saturating_add(e.requests);
                m.errors = m.errors.saturating_add(e.errors);
                m.latency_sum_us = m.latency_sum_us.saturating_add(e.latency_sum_us);
                if part.live {
                    // Capped where the wire caps it: a report above it would be refused whole.
                    m.inflight = m.inflight.saturating_add(e.inflight).min(tailweight_wire::protocol::MAX_INFLIGHT);
                }
                let age = e.latency_age_ms.saturating_add(extra_ms);
                if e.latency_ewma_us > 0 && (m.latency_ewma_us == 0 || age < m.latency_age_ms) {
                    (m.latency_ewma_us, m.latency_age_ms) = (e.latency_ewma_us, age);
                }
                if let Some(seen) = e.seen_age_ms.map(|a| a.saturating_add(extra_ms)) {
                    m.seen_age_ms = Some(m.seen_age_ms.map_or(seen, |known| known.min(seen)));
                }
                let counted = e.counted_ms.map(|c| c.saturating_add(extra_ms));
                m.counted_ms = if first { counted } else { m.counted_ms.zip(counted).map(|(known, c)| known.max(c)) };
                if let (Some(cpu), Some(cpu_age)) = (e.cpu, e.cpu_age_ms) {
                    let cpu_age = cpu_age.saturating_add(extra_ms);
                    if m.cpu_age_ms.is_none_or(|a| cpu_age < a) {
                        (m.cpu, m.cpu_age_ms) = (Some(cpu), Some(cpu_age));
                    }
                }
            }
        }
    }
    out
}

fn age_ms(now_us: u64, then_us: u64) -> u64 {
    now_us.saturating_sub(then_us) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(address: &str, requests: u64, inflight: u32, latency: u64, age: u64) -> EndpointReport {
        EndpointReport {
            address: address.into(),
            requests,
            errors: 1,
            latency_sum_us: requests * 100,
            inflight,
            latency_ewma_us: latency,
            latency_age_ms: age,
            cpu: None,
            cpu_age_ms: None,
            seen_age_ms: Some(age),
            counted_ms: Some(age),
        }
    }

    #[test]
    fn merge_adds_counters_and_keeps_the_freshest_latency() {
        let a = vec![ClusterReport { name: "c".into(), endpoints: vec![ep("10.0.0.1:80", 10, 2, 1_000, 50)] }];
        let b = vec![ClusterReport {
            name: "c".into(),
            endpoints: vec![ep("10.0.0.1:80", 5, 1, 3_000, 10), ep("10.0.0.2:80", 7, 0, 500, 0)],
        }];
        let now = 1_000_000;
        let merged = merge(
            &[
                Part { written_us: now, live: true, clusters: &a },
                Part { written_us: now - 100_000, live: true, clusters: &b },
            ],
            now,
        );
        assert_eq!(merged.len(), 1);
        let e1 = &merged[0].endpoints[0];
        assert_eq!((e1.requests, e1.errors, e1.latency_sum_us, e1.inflight), (15, 2, 1_500, 3));
        // b's sample is 10 ms old as of a write 100 ms ago: 110 ms, older than a's 50 ms.
        assert_eq!((e1.latency_ewma_us, e1.latency_age_ms), (1_000, 50));
        assert_eq!(e1.seen_age_ms, Some(50), "the most recent good answer of any worker");
        assert_eq!(merged[0].endpoints[1].latency_age_ms, 100);
    }

    #[test]
    fn merged_counters_have_counted_since_the_earliest_part_began() {
        let now = 1_000_000;
        let part = |counted: Option<u64>| {
            vec![ClusterReport {
                name: "c".into(),
                endpoints: vec![EndpointReport { counted_ms: counted, ..ep("10.0.0.1:80", 1, 0, 1, 0) }],
            }]
        };
        let (a, b, unsaid) = (part(Some(500)), part(Some(300)), part(None));
        // b's 300 ms as of a write 250 ms ago: 550 ms now, longer than a's 500.
        let merged = merge(
            &[
                Part { written_us: now, live: true, clusters: &a },
                Part { written_us: now - 250_000, live: false, clusters: &b },
            ],
            now,
        );
        assert_eq!(merged[0].endpoints[0].counted_ms, Some(550));
        // A part that does not say leaves the sum's span unknown, in either order.
        for parts in [[&a, &unsaid], [&unsaid, &a]] {
            let parts = parts.map(|clusters| Part { written_us: now, live: true, clusters });
            assert_eq!(merge(&parts, now)[0].endpoints[0].counted_ms, None);
        }
    }

    #[test]
    fn dead_workers_keep_their_counters_but_not_their_inflight() {
        let a = vec![ClusterReport { name: "c".into(), endpoints: vec![ep("10.0.0.1:80", 10, 4, 1_000, 0)] }];
        let merged = merge(&[Part { written_us: 0, live: false, clusters: &a }], 0);
        assert_eq!((merged[0].endpoints[0].requests, merged[0].endpoints[0].inflight), (10, 0));
    }

    #[test]
    fn freshest_cpu_wins() {
        let mut x = ep("10.0.0.1:80", 1, 0, 1, 0);
        x.cpu = Some(0.2);
        x.cpu_age_ms = Some(500);
        let mut y = x.clone();
        y.cpu = Some(0.9);
        y.cpu_age_ms = Some(5);
        let (a, b) = (
            vec![ClusterReport { name: "c".into(), endpoints: vec![x] }],
            vec![ClusterReport { name: "c".into(), endpoints: vec![y] }],
        );
        let merged = merge(
            &[Part { written_us: 0, live: true, clusters: &a }, Part { written_us: 0, live: true, clusters: &b }],
            0,
        );
        assert_eq!(merged[0].endpoints[0].cpu, Some(0.9));
    }
}
