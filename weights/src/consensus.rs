//! Step 1 across principals: what several principals say about one cluster's endpoints, combined
//! so that a principal is one voice however many reporter ids it uses. A principal is an identity
//! the service vouches for (`WeightBook::ingest_as`); `merge.rs` first merges each principal's own
//! reporters into its view of each endpoint. Then:
//!
//! - **Volume.** Each principal's total request rate over the cluster is clipped at `sum_clip` x
//!   the median principal's (with two principals: the other's), and so is its total in-flight
//!   count: the whole principal is scaled at once, so its split over the endpoints stands.
//! - **One other principal** on an endpoint: they bound each other as two reporters do
//!   (`merge.rs`): sums clipped at `sum_clip` x the other's, medians with capped votes; and when
//!   both send requests there, the error ratio is at most the lower of theirs (ejection needs both).
//! - **Three or more: the majority decides.** One vote per principal: the error ratio is the lower
//!   median of the principals' own error ratios (errors / requests, among those with
//!   `eject_min_requests` in the window), latency and ORCA CPU are the medians of theirs. Requests
//!   and in-flight counts follow the consensus split: per endpoint, the median over the qualified
//!   principals (`eject_min_requests` per endpoint they report, in the window) of their own share
//!   there (its count / their total over the cluster). Each qualified principal's total on the
//!   endpoints that have a consensus is spread by that split, and its own count on an endpoint
//!   counts only within `split_tolerance` of its spread share (an endpoint it did not report gets
//!   the lower end): so it cannot concentrate traffic on an endpoint or withhold it from one by
//!   more than that ratio, and all it can do beyond is scale its volume, which the weights do not
//!   depend on (they are relative). docs/weights.md states what this guarantees.
//! - **Served evidence and reporter counts** are weighed the same way: an endpoint's
//!   `served_age_ms` (how long ago callers' users were answered well) is the `SERVED_QUORUM`-th
//!   most recent over its principals once the cluster has two or more (one principal cannot
//!   readmit or prove an endpoint for all; two of any number can, so a recovered endpoint is
//!   readmitted when a minority has seen it again), and each principal's reporter count is
//!   clipped at `sum_clip` x the median principal's (with two: the other's), as volumes are.

use crate::merge::{capped_median, clip_contributions, CpuOrigin, Merged, MergedCpu, Vote};
use crate::params::WeightParams;
use std::collections::HashMap;
use tailweight_math::stats::{lower_median, median};

/// Which endpoints count in the cluster's normalisation (mean raw capacity, mean weight 1, the
/// capacity method, the median concurrency): those at least half of the cluster's `principals`
/// report (`views` sorted by endpoint, `endpoints` in all). An endpoint fewer report (say, made up
/// by a minority) still gets a weight on the same scale, but cannot shift the others'.
pub(crate) fn supported(views: &[PrincipalView], endpoints: usize, principals: usize, out: &mut Vec<bool>) {
    out.clear();
    out.resize(endpoints, false);
    for run in by_endpoint(views) {
        out[run[0].endpoint] = 2 * run.len() >= principals;
    }
}

/// One principal's merged view of one endpoint (level 1), combined by [`combine`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrincipalView {
    /// Index of the endpoint in its cluster.
    pub endpoint: usize,
    pub principal: u32,
    pub merged: Merged,
    /// What its in-flight count there counts for, as a multiple of its level-1 count (set by
    /// [`combine`]; for the asking reporter's `peer_inflight`).
    pub inflight_factor: f64,
}

/// One principal's totals over the cluster.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    qps: f64,
    inflight: f64,
    /// Endpoints it reports.
    endpoints: usize,
    /// Enough requests to vote on the split (`eject_min_requests` per endpoint it reports).
    qualified: bool,
    /// Its requests and in-flight count on endpoints that have a consensus split.
    qps_on_consensus: f64,
    inflight_on_consensus: f64,
    /// The most reporters it has on one endpoint, and what its reporters count for at most.
    reporters: f64,
    reporters_cap: f64,
}

/// The principals of a cluster and their totals.
#[derive(Debug, Default)]
struct Table {
    totals: Vec<Totals>,
    index: HashMap<u32, usize>,
}

impl Table {
    fn of(&self, principal: u32) -> &Totals {
        &self.totals[self.index[&principal]]
    }
}

/// Reusable vectors for one endpoint's combination.
#[derive(Debug, Default)]
struct Buffers {
    values: Vec<f64>,
    sums: Vec<f64>,
    active: Vec<bool>,
    votes: Vec<Vote>,
    ages: Vec<u64>,
}

/// Reused buffers: combining allocates nothing in steady state.
#[derive(Debug, Default)]
pub(crate) struct ConsensusScratch {
    table: Table,
    share: Vec<Option<f64>>,
    inflight_share: Vec<Option<f64>>,
    factors: Vec<(f64, f64)>,
    buffers: Buffers,
}

/// The volume a principal's total (requests, or in flight) is clipped against: with three or more
/// principals, the median of the positive totals (a minority of principals, together, cannot
/// raise it); with two, the other's (as between two reporters). None: nothing to clip against.
fn volume_reference(totals: &[f64], values: &mut Vec<f64>) -> VolumeReference {
    values.clear();
    values.extend(totals.iter().copied().filter(|t| *t > 0.0));
    if values.len() >= 3 {
        return VolumeReference::Median(median(values).unwrap_or(0.0));
    }
    let (top, second) = values.iter().fold((0.0, 0.0), |(a, b), v| if *v > a { (*v, a) } else { (a, b.max(*v)) });
    VolumeReference::LargestOther { top, second }
}

#[derive(Debug, Clone, Copy)]
enum VolumeReference {
    Median(f64),
    /// The two largest totals (the largest other is the first, except for the first itself).
    LargestOther {
        top: f64,
        second: f64,
    },
}

impl VolumeReference {
    /// The factor that clips `total` at `clip` x the reference (1 if there is none).
    fn factor(self, total: f64, clip: f64) -> f64 {
        let reference = match self {
            VolumeReference::Median(m) => m,
            VolumeReference::LargestOther { top, second } => {
                if total >= top {
                    second
                } else {
                    top
                }
            }
        };
        if total > 0.0 && reference > 0.0 {
            (clip * reference / total).min(1.0)
        } else {
            1.0
        }
    }
}

/// The endpoint of each run of `views` (sorted by endpoint) and the run.
fn by_endpoint(views: &[PrincipalView]) -> impl Iterator<Item = &[PrincipalView]> {
    views.chunk_by(|a, b| a.endpoint == b.endpoint)
}

/// Combine the principals' views (`views`, sorted by endpoint then principal) into one `Merged` per
/// endpoint of the cluster (`out[endpoint]`, `endpoints` of them; an endpoint without a view gets
/// zeros), `elapsed_us` after the last recompute (None: the first; a second). Sets each view's
/// `inflight_factor`.
pub(crate) fn combine(
    views: &mut [PrincipalView],
    endpoints: usize,
    p: &WeightParams,
    elapsed_us: Option<u64>,
    s: &mut ConsensusScratch,
    out: &mut Vec<Merged>,
) {
    let window_s = elapsed_us.unwrap_or(1_000_000) as f64 / 1e6;
    let ConsensusScratch { table, share, inflight_share, factors, buffers } = s;
    tally(views, table);
    clip_volumes(views, table, factors, &mut buffers.values, p, window_s);
    consensus_split(views, table, endpoints, share, inflight_share, &mut buffers.values);
    let spread = Spread::of(share, table.totals.iter().map(|t| (t.qualified, t.qps_on_consensus)));
    let inflight_spread =
        Spread::of(inflight_share, table.totals.iter().map(|t| (t.qualified, t.inflight_on_consensus)));
    out.clear();
    out.resize(endpoints, Merged::default());
    for run in by_endpoint_mut(views) {
        let e = run[0].endpoint;
        let requests = (spread, share[e]);
        let in_flight = (inflight_spread, inflight_share[e]);
        out[e] = combine_endpoint(run, table, buffers, requests, in_flight, p, window_s);
        out[e].served_age_ms = served_quorum(run, table.totals.len(), &mut buffers.ages);
        out[e].reporters = run.iter().map(|v| counted_reporters(v, table)).sum();
    }
}

/// Principals whose users' good answers an endpoint's `served_age_ms` needs once its cluster has
/// two or more principals: one voice never decides for all, and two of any number do.
pub(crate) const SERVED_QUORUM: usize = 2;

/// The age of the good answers an endpoint's principals' (`run`) users had: the
/// `SERVED_QUORUM`-th most recent of theirs (the most recent when the cluster has one principal of
/// `principals`); None when fewer show one.
fn served_quorum(run: &[PrincipalView], principals: usize, ages: &mut Vec<u64>) -> Option<u64> {
    ages.clear();
    ages.extend(run.iter().filter_map(|v| v.merged.served_age_ms));
    ages.sort_unstable();
    ages.get(SERVED_QUORUM.min(principals).max(1) - 1).copied()
}

/// What `v`'s reporters count for in its endpoint's `reporters`: at most its principal's cap.
fn counted_reporters(v: &PrincipalView, table: &Table) -> usize {
    let cap = table.of(v.principal).reporters_cap;
    (v.merged.reporters as f64).min(cap.floor().max(1.0)) as usize
}

/// Each principal's totals over the cluster.
fn tally(views: &[PrincipalView], table: &mut Table) {
    table.totals.clear();
    table.index.clear();
    for v in views {
        let at = *table.index.entry(v.principal).or_insert_with(|| {
            table.totals.push(Totals::default());
            table.totals.len() - 1
        });
        let t = &mut table.totals[at];
        t.qps += v.merged.qps;
        t.inflight += v.merged.inflight;
        t.endpoints += 1;
        t.reporters = t.reporters.max(v.merged.reporters as f64);
    }
}

/// Volume: whole principals clipped against the others' (their totals, and their views'
/// requests, errors and in-flight counts, by the same factors; their reporter counts' caps);
/// which principals qualify to vote on the split.
fn clip_volumes(
    views: &mut [PrincipalView],
    table: &mut Table,
    factors: &mut Vec<(f64, f64)>,
    values: &mut Vec<f64>,
    p: &WeightParams,
    window_s: f64,
) {
    let qps: Vec<f64> = table.totals.iter().map(|t| t.qps).collect();
    let inflight: Vec<f64> = table.totals.iter().map(|t| t.inflight).collect();
    let qps_reference = volume_reference(&qps, values);
    let inflight_reference = volume_reference(&inflight, values);
    let reporters: Vec<f64> = table.totals.iter().map(|t| t.reporters).collect();
    let reporters_reference = volume_reference(&reporters, values);
    factors.clear();
    for t in table.totals.iter_mut() {
        t.reporters_cap = t.reporters * reporters_reference.factor(t.reporters, p.sum_clip);
        let f = qps_reference.factor(t.qps, p.sum_clip);
        let g = inflight_reference.factor(t.inflight, p.sum_clip);
        factors.push((f, g));
        t.qps *= f;
        t.inflight *= g;
        t.qualified = t.qps > 0.0 && t.qps * window_s >= p.eject_min_requests * t.endpoints as f64;
    }
    for v in views.iter_mut() {
        let (f, g) = factors[table.index[&v.principal]];
        v.merged.qps *= f;
        v.merged.eps *= f;
        v.merged.inflight *= g;
        v.inflight_factor *= g;
    }
}

/// The consensus split: per endpoint, the median share of three or more qualified principals (of
/// requests into `share`, of in-flight counts into `inflight_share`); and each principal's volume
/// on the endpoints that have one.
fn consensus_split(
    views: &[PrincipalView],
    table: &mut Table,
    endpoints: usize,
    share: &mut Vec<Option<f64>>,
    inflight_share: &mut Vec<Option<f64>>,
    values: &mut Vec<f64>,
) {
    share.clear();
    share.resize(endpoints, None);
    inflight_share.clear();
    inflight_share.resize(endpoints, None);
    for run in by_endpoint(views) {
        let e = run[0].endpoint;
        values.clear();
        values.extend(run.iter().filter_map(|v| {
            let t = table.of(v.principal);
            t.qualified.then(|| v.merged.qps / t.qps)
        }));
        if values.len() >= 3 {
            share[e] = median(values);
        }
        values.clear();
        values.extend(run.iter().filter_map(|v| {
            let t = table.of(v.principal);
            (t.qualified && t.inflight > 0.0).then(|| v.merged.inflight / t.inflight)
        }));
        if values.len() >= 3 {
            inflight_share[e] = median(values);
        }
    }
    for v in views {
        let t = &mut table.totals[table.index[&v.principal]];
        if share[v.endpoint].is_some() {
            t.qps_on_consensus += v.merged.qps;
        }
        if inflight_share[v.endpoint].is_some() {
            t.inflight_on_consensus += v.merged.inflight;
        }
    }
}

/// `by_endpoint`, mutable.
fn by_endpoint_mut(views: &mut [PrincipalView]) -> impl Iterator<Item = &mut [PrincipalView]> {
    views.chunk_by_mut(|a, b| a.endpoint == b.endpoint)
}

/// The sum of the consensus shares (they are medians: not exactly 1) and of the qualified
/// principals' volume on the endpoints that have one.
#[derive(Debug, Clone, Copy)]
struct Spread {
    shares: f64,
    volume: f64,
}

impl Spread {
    fn of(shares: &[Option<f64>], principals: impl Iterator<Item = (bool, f64)>) -> Spread {
        Spread {
            shares: shares.iter().flatten().sum(),
            volume: principals.filter(|(qualified, _)| *qualified).map(|(_, v)| v).sum(),
        }
    }
}

/// One endpoint's sum (requests or in flight) over its principals' `values` (aligned with `run`):
/// with a consensus `share` and three or more principals, each qualified principal's count within
/// `split_tolerance` of its volume on consensus endpoints (`volume_of`) spread by the split, plus
/// the lower end of that range for the qualified principals that did not report the endpoint; else
/// the clipped sum of `merge.rs`. Leaves what each value counts for in `values`.
fn split_sum(
    run: &[PrincipalView],
    values: &mut [f64],
    active: &mut Vec<bool>,
    (spread, share): (Spread, Option<f64>),
    volume_of: impl Fn(&Totals) -> f64,
    table: &Table,
    p: &WeightParams,
) -> f64 {
    let Some(share) = share.filter(|_| run.len() >= 3 && spread.shares > 0.0) else {
        active.clear();
        active.extend(run.iter().map(|v| v.merged.qps > 0.0 || v.merged.inflight > 0.0));
        return clip_contributions(values, active, p.sum_clip);
    };
    let at = share / spread.shares;
    let (lo, hi) = (1.0 - p.split_tolerance, 1.0 + p.split_tolerance);
    let mut reported_volume = 0.0;
    for (v, value) in run.iter().zip(values.iter_mut()) {
        let t = table.of(v.principal);
        if t.qualified {
            let spread_share = volume_of(t) * at;
            *value = value.clamp(spread_share * lo, spread_share * hi);
            reported_volume += volume_of(t);
        }
    }
    let unreported = (spread.volume - reported_volume).max(0.0) * at * lo;
    values.iter().sum::<f64>() + unreported
}

/// Combine one endpoint's views (see the module docs).
fn combine_endpoint(
    run: &mut [PrincipalView],
    table: &Table,
    b: &mut Buffers,
    requests: (Spread, Option<f64>),
    in_flight: (Spread, Option<f64>),
    p: &WeightParams,
    window_s: f64,
) -> Merged {
    if run.len() == 1 {
        return run[0].merged;
    }
    let latency_votes = run.iter().map(|v| v.merged.latency_votes).sum();
    let cpu_votes = run.iter().map(|v| v.merged.cpu_votes).sum();
    let majority = run.len() >= 3;
    b.sums.clear();
    b.sums.extend(run.iter().map(|v| v.merged.qps));
    let qps = split_sum(run, &mut b.sums, &mut b.active, requests, |t| t.qps_on_consensus, table, p);
    let eps = if majority {
        // Principals with enough requests in the window vote (all with requests if none has).
        let evidence = |v: &PrincipalView| v.merged.qps * window_s >= p.eject_min_requests;
        let any_evidence = run.iter().any(evidence);
        b.values.clear();
        b.values.extend(
            run.iter()
                .filter(|v| v.merged.qps > 0.0 && (!any_evidence || evidence(v)))
                .map(|v| (v.merged.eps / v.merged.qps).clamp(0.0, 1.0)),
        );
        lower_median(&mut b.values).unwrap_or(0.0) * qps
    } else {
        b.sums.clear();
        b.sums.extend(run.iter().map(|v| v.merged.eps));
        b.active.clear();
        b.active.extend(run.iter().map(|v| v.merged.qps > 0.0 || v.merged.inflight > 0.0));
        clip_contributions(&mut b.sums, &b.active, p.sum_clip).min(qps).min(quorum_errors(run, qps))
    };
    b.sums.clear();
    b.sums.extend(run.iter().map(|v| v.merged.inflight));
    let inflight = split_sum(run, &mut b.sums, &mut b.active, in_flight, |t| t.inflight_on_consensus, table, p);
    for (v, counted) in run.iter_mut().zip(&b.sums) {
        if v.merged.inflight > 0.0 {
            v.inflight_factor *= counted / v.merged.inflight;
        }
    }
    let latency_us = principal_median(
        run.iter().filter_map(|v| v.merged.latency_us.map(|l| Vote { value: l, weight: v.merged.latency_votes })),
        majority,
        p,
        b,
    );
    let cpu_at = run.iter().filter_map(|v| v.merged.cpu.map(|c| c.at_us)).max().unwrap_or(0);
    let cpu = principal_median(
        run.iter().filter_map(|v| v.merged.cpu.map(|c| Vote { value: c.utilization, weight: v.merged.cpu_votes })),
        majority,
        p,
        b,
    )
    .map(|utilization| MergedCpu { utilization, source: CpuOrigin::Orca, at_us: cpu_at });
    // `reporters` and `served_age_ms` are set by `combine` (`counted_reporters`, `served_quorum`).
    Merged { qps, eps, inflight, latency_us, cpu, reporters: 0, latency_votes, cpu_votes, served_age_ms: None }
}

/// With two principals sending requests to an endpoint, the errors they count for together: at
/// most `qps x` the lower of their own error ratios, so that one of them cannot push the ratio
/// past what the other sees (ejection needs both). Otherwise unbounded (infinity).
fn quorum_errors(run: &[PrincipalView], qps: f64) -> f64 {
    let ratios = run.iter().filter(|v| v.merged.qps > 0.0).map(|v| (v.merged.eps / v.merged.qps).clamp(0.0, 1.0));
    let (senders, lowest) = ratios.fold((0, 1.0f64), |(n, lowest), r| (n + 1, lowest.min(r)));
    if senders >= 2 {
        lowest * qps
    } else {
        f64::INFINITY
    }
}

/// The principals' `votes` on a value: the median, one vote each, with three or more voters when
/// the majority decides; else the capped median of their weighted votes (`merge.rs`).
fn principal_median(
    votes: impl Iterator<Item = Vote>,
    majority: bool,
    p: &WeightParams,
    b: &mut Buffers,
) -> Option<f64> {
    b.votes.clear();
    b.votes.extend(votes);
    if majority && b.votes.len() >= 3 {
        b.values.clear();
        b.values.extend(b.votes.iter().map(|v| v.value));
        median(&mut b.values)
    } else {
        capped_median(&mut b.votes, p.vote_cap)
    }
}

#[cfg(test)]
mod tests;
