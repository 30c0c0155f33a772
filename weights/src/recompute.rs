//! One cluster's recompute, in the steps of the crate docs (`lib.rs`): merge what the live
//! reporters say (within each principal, then across principals), learn the slow state, rate the
//! capacities, smooth the weights toward their targets and normalise them, publish.

use crate::callers::{self, CallerScratch};
use crate::capacity;
use crate::consensus::{self, ConsensusScratch, PrincipalView};
use crate::evidence::ClusterEvidence;
use crate::merge::{self, merge_reporters, MergeScratch, Merged};
use crate::normalize;
use crate::params::WeightParams;
use crate::published::{PublishedCluster, Standing};
use crate::record::{ClusterRecord, EndpointRecord};
use crate::smoothing;
use crate::traffic;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use tailweight_wire::protocol;

/// Reused buffers: a recompute allocates nothing in steady state.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    merge: MergeScratch,
    consensus: ConsensusScratch,
    callers: CallerScratch,
    /// Live observation ids of one endpoint, by principal (then the map's order).
    live: Vec<(u32, u64)>,
    ids: Vec<u64>,
    views: Vec<PrincipalView>,
    merged: Vec<Merged>,
    /// Per endpoint: whether it counts in the cluster's normalisation (`consensus::supported`).
    counted: Vec<bool>,
    /// Per endpoint of the cluster being recomputed: capacity by CPU, raw capacity, smoothed
    /// weight and its bounds, published weight.
    by_cpu: Vec<Option<f64>>,
    raw: Vec<Option<f64>>,
    desired: Vec<f64>,
    lo_hi: Vec<(f64, f64)>,
    out: Vec<f64>,
    sorted: Vec<f64>,
}

impl Scratch {
    /// Give back what the buffers hold beyond twice what the book could need now (`observations`
    /// and `endpoints` in all): their cost is counted per unit the book holds (`memory.rs`).
    pub fn shrink(&mut self, observations: usize, endpoints: usize) {
        fn fit<T>(v: &mut Vec<T>, need: usize) {
            if v.capacity() > 2 * need.max(64) {
                v.shrink_to(need.max(64));
            }
        }
        fit(&mut self.live, observations);
        fit(&mut self.ids, observations);
        fit(&mut self.views, observations);
        fit(&mut self.merged, endpoints);
        fit(&mut self.counted, endpoints);
        fit(&mut self.by_cpu, endpoints);
        fit(&mut self.raw, endpoints);
        fit(&mut self.desired, endpoints);
        fit(&mut self.lo_hi, endpoints);
        fit(&mut self.out, endpoints);
        fit(&mut self.sorted, endpoints);
    }
}

/// What the destinations of a cluster attested, and the book's principal ids by name.
pub(crate) struct Attested<'a> {
    pub evidence: Option<&'a ClusterEvidence>,
    pub ids: &'a HashMap<String, u32>,
}

/// Recompute the weights of `cluster` (named `name`) and publish its reply view. O(observations
/// of the cluster, plus what its endpoints attested).
pub(crate) fn recompute_cluster(
    p: &WeightParams,
    cluster: &mut ClusterRecord,
    name: &str,
    external_cpu: &HashMap<IpAddr, (f64, u64)>,
    attested: Attested,
    s: &mut Scratch,
    now_us: u64,
) {
    let elapsed_us = cluster.elapsed_us(now_us);
    let evidence = attested.evidence;
    let mut principals = cluster.principals.len();
    let created_us = cluster.created_us;
    let endpoints = cluster.endpoints.as_mut_slice();
    // 1. Merge what the live reporters say: within each principal, then bound by what the
    //    endpoints attested (callers only), then across principals.
    let apart = principals > 1 || attested.evidence.is_some();
    merge_principals_apart(endpoints, apart, p, s, now_us);
    if let Some(evidence) = attested.evidence {
        if callers::bound_views(&mut s.views, endpoints, evidence, attested.ids, p, &mut s.callers, now_us) {
            principals = count_principals(&s.views, &mut s.ids);
        }
    }
    s.counted.clear();
    s.counted.resize(endpoints.len(), true);
    if apart {
        consensus::supported(&s.views, endpoints.len(), principals, &mut s.counted);
        consensus::combine(&mut s.views, endpoints.len(), p, elapsed_us, &mut s.consensus, &mut s.merged);
        for v in &s.views {
            for o in endpoints[v.endpoint].obs.values_mut().filter(|o| o.principal == v.principal) {
                o.counted_inflight *= v.inflight_factor;
            }
        }
    }
    // Endpoints without traffic for a while (left the cluster) share nothing out (`traffic.rs`).
    traffic::uncount_quiet(endpoints, &s.merged, p, now_us, &mut s.counted);
    // 2. Learn the slow state, and the CPU path of step 3.
    learn(endpoints, external_cpu, p, s, elapsed_us, now_us);
    // 3. Raw capacity by the cluster's method, less the backlog.
    capacity::rate(endpoints, &s.by_cpu, &s.counted, p, &mut s.sorted, &mut s.raw, now_us);
    // 4. Targets, smoothed toward, then bounded and normalized.
    let times = smoothing::Times { elapsed_us, now_us, cluster_created_us: created_us };
    smoothing::smooth_toward_targets(
        endpoints,
        &s.raw,
        &s.counted,
        p,
        times,
        &mut s.sorted,
        &mut s.desired,
        &mut s.lo_hi,
    );
    normalize::normalize(&s.desired, &s.lo_hi, &s.counted, &mut s.out);
    // 5. Publish.
    publish(endpoints, &s.out);
    cluster.generation += 1;
    cluster.computed_at_us = Some(now_us);
    let decided = cluster.endpoints.iter().filter_map(|e| {
        let d = e.decision.as_ref()?;
        let standing = Standing {
            attested: evidence.and_then(|ev| ev.endpoints.get(&e.address)).is_some_and(|ev| ev.attests(now_us)),
            principals: u32::try_from(e.principals.len()).unwrap_or(u32::MAX),
            served: d.served_age_ms.is_some(),
        };
        Some((e.address.as_str(), d, standing))
    });
    cluster.published = Some(Arc::new(PublishedCluster::of(name, cluster.layout, decided)));
}

/// Distinct principals among `views` (`buffer` is scratch).
fn count_principals(views: &[PrincipalView], buffer: &mut Vec<u64>) -> usize {
    buffer.clear();
    buffer.extend(views.iter().map(|v| u64::from(v.principal)));
    buffer.sort_unstable();
    buffer.dedup();
    buffer.len()
}

/// Step 1 within principals: each endpoint's live reporters merged (`merge.rs`), into
/// `s.merged` when one principal reports the cluster, else into one view per principal and
/// endpoint (`s.views`, for `consensus.rs`). Sets each observation's counted in-flight share.
fn merge_principals_apart(
    endpoints: &mut [EndpointRecord],
    several: bool,
    p: &WeightParams,
    s: &mut Scratch,
    now_us: u64,
) {
    s.merged.clear();
    s.views.clear();
    for (at, endpoint) in endpoints.iter_mut().enumerate() {
        s.live.clear();
        s.live.extend(endpoint.obs.iter().filter(|(_, o)| o.live(now_us)).map(|(id, o)| (o.principal, *id)));
        if !several {
            s.ids.clear();
            s.ids.extend(s.live.iter().map(|(_, id)| *id));
            s.merged.push(merge_and_count(endpoint, &s.ids, p, &mut s.merge, now_us));
            continue;
        }
        s.live.sort_by_key(|(principal, _)| *principal);
        for run in s.live.chunk_by(|a, b| a.0 == b.0) {
            s.ids.clear();
            s.ids.extend(run.iter().map(|(_, id)| *id));
            let merged = merge_and_count(endpoint, &s.ids, p, &mut s.merge, now_us);
            s.views.push(PrincipalView { endpoint: at, principal: run[0].0, merged, inflight_factor: 1.0 });
        }
    }
}

/// The reporters `ids` of `endpoint` merged (`merge.rs`), each one's counted in-flight share set.
fn merge_and_count(
    endpoint: &mut EndpointRecord,
    ids: &[u64],
    p: &WeightParams,
    scratch: &mut MergeScratch,
    now_us: u64,
) -> Merged {
    let merged = merge_reporters(&endpoint.obs, ids, p, scratch, now_us);
    for (id, counted) in ids.iter().zip(&scratch.inflight) {
        if let Some(o) = endpoint.obs.get_mut(id) {
            o.counted_inflight = *counted;
        }
    }
    merged
}

/// Step 2 for each endpoint (its merged numbers in `s.merged`, with the metrics store's CPU
/// folded in): the error ratio and ejection, the service time and concurrency; and step 3's CPU
/// path, into `s.by_cpu`. Leaves each endpoint's decision as far as that goes.
fn learn(
    endpoints: &mut [EndpointRecord],
    external_cpu: &HashMap<IpAddr, (f64, u64)>,
    p: &WeightParams,
    s: &mut Scratch,
    elapsed_us: Option<u64>,
    now_us: u64,
) {
    s.by_cpu.clear();
    let live = || endpoints.iter().filter(|e| !e.ejection.ejected).filter_map(|e| e.weight);
    let live_mean = if live().count() == 0 { 1.0 } else { live().sum::<f64>() / live().count() as f64 };
    let mut readmitted = false;
    for ((endpoint, merged), counted) in endpoints.iter_mut().zip(s.merged.iter_mut()).zip(&s.counted) {
        merge::with_metrics_cpu(merged, endpoint.ip, external_cpu, p, now_us);
        let merged = *merged;
        let first_sample = endpoint.weight.is_none();
        let was_ejected = endpoint.ejection.ejected;
        endpoint.ejection.learn(&merged, first_sample, p, elapsed_us);
        endpoint.weight = endpoint.ejection.resume(was_ejected, endpoint.weight, live_mean, p, now_us);
        readmitted |= was_ejected && !endpoint.ejection.ejected;
        endpoint.latency.learn(&merged, p, elapsed_us);
        // 3, CPU path: its rates over the window of a metrics-store CPU value.
        let metrics_cpu = endpoint.ip.is_some_and(|ip| external_cpu.contains_key(&ip));
        endpoint.rates.record(metrics_cpu, merged.qps, merged.eps, elapsed_us, p.cpu_window_us, now_us);
        s.by_cpu.push(capacity::by_cpu(&merged, &endpoint.rates, p));
        let mut decision = endpoint.merged_decision(merged);
        decision.counted = *counted;
        decision.view_inflight = p.view_inflight.of(&decision);
        endpoint.decision = Some(decision);
    }
    if readmitted {
        rebase(endpoints, &s.counted);
    }
}

/// After a readmission raised a weight (see `Ejection::resume`): every previous weight divided by
/// their mean over the `counted` endpoints, so they have mean 1 again. Pickers use only their
/// ratios, and `normalize`'s step bounds around them have a solution only from a mean of 1.
fn rebase(endpoints: &mut [EndpointRecord], counted: &[bool]) {
    let kept = || endpoints.iter().zip(counted).filter(|(_, c)| **c).filter_map(|(e, _)| e.weight);
    let (n, sum) = (kept().count(), kept().sum::<f64>());
    if n == 0 || !(sum.is_finite() && sum > 0.0) {
        return;
    }
    let mean = sum / n as f64;
    for w in endpoints.iter_mut().filter_map(|e| e.weight.as_mut()) {
        *w /= mean;
    }
}

/// Step 5: each endpoint's weight (`weights`, aligned with `endpoints`; a non-finite or negative
/// one is 1, none above `protocol::MAX_WEIGHT`) into its record and decision.
fn publish(endpoints: &mut [EndpointRecord], weights: &[f64]) {
    for (endpoint, w) in endpoints.iter_mut().zip(weights) {
        let w = if w.is_finite() && *w >= 0.0 { w.min(protocol::MAX_WEIGHT) } else { 1.0 };
        endpoint.weight = Some(w);
        if let Some(d) = endpoint.decision.as_mut() {
            d.weight = w;
        }
    }
}
