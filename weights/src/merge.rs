//! Robust merges of what several reporters say about one endpoint. Two primitives, each bounding
//! what a single reporter can do when at least one other reporter speaks about the same endpoint
//! (a lone reporter is the only evidence there is, so it is taken as it is):
//!
//! - [`capped_median`]: a weighted median where each vote is capped at `cap` x (sum of the other
//!   votes). A single reporter then holds at most `cap / (1 + cap)` of the total vote, so wherever it
//!   puts its value the median stays between the honest reporters' weighted `(1 - cap) / 2` and
//!   `(1 + cap) / 2` quantiles (cap < 1 keeps it inside the honest range; honest agreement cannot be moved).
//! - [`clip_contributions`]: for sums (request rates, in flight), each contribution is clipped at
//!   `clip` x (the largest other contribution). A single reporter adds at most `clip` x the largest
//!   honest contribution, and can lower the sum only by withholding its own.
//!
//! [`merge_reporters`] applies them to one endpoint's reporters (step 1 of the recompute, within one
//! principal); `consensus.rs` combines principals; docs/weights.md works out what that bounds.

use crate::observation::Observation;
use crate::params::WeightParams;
use std::collections::HashMap;
use std::net::IpAddr;
use tailweight_math::hash::IdMap;

/// A value and its weight (e.g. a reporter's mean latency and the successes it was measured on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vote {
    pub value: f64,
    pub weight: f64,
}

/// Weighted median of `votes` after capping each weight `w_i` at
/// `max(cap x (sum of the other weights), the largest other weight)`.
/// The second term keeps the order of the weights: with two votes, `cap` x the other alone would
/// leave the larger vote below the smaller one, so the smaller would decide; with it both weigh the
/// smaller's weight, and the lower median takes the lower value. Non-finite values and non-positive
/// weights are ignored. Reorders `votes`.
pub fn capped_median(votes: &mut Vec<Vote>, cap: f64) -> Option<f64> {
    votes.retain(|v| v.value.is_finite() && v.weight.is_finite() && v.weight > 0.0);
    if votes.len() > 1 {
        let total: f64 = votes.iter().map(|v| v.weight).sum();
        // The two largest weights: the largest other is the first, except for the first itself.
        let (mut first, mut second) = (0.0f64, 0.0f64);
        for v in votes.iter() {
            if v.weight > first {
                second = first;
                first = v.weight;
            } else if v.weight > second {
                second = v.weight;
            }
        }
        let capped: Vec<f64> = votes
            .iter()
            .map(|v| {
                let largest_other = if v.weight == first { second } else { first };
                v.weight.min((cap * (total - v.weight)).max(largest_other))
            })
            .collect();
        for (v, w) in votes.iter_mut().zip(capped) {
            v.weight = w;
        }
        votes.retain(|v| v.weight > 0.0);
    }
    weighted_median(votes)
}

/// The lower weighted median: the smallest value whose cumulative weight reaches half the total.
fn weighted_median(votes: &mut [Vote]) -> Option<f64> {
    let total: f64 = votes.iter().map(|v| v.weight).sum();
    if votes.is_empty() || total <= 0.0 {
        return None;
    }
    votes.sort_unstable_by(|a, b| a.value.total_cmp(&b.value));
    let mut acc = 0.0;
    for v in votes.iter() {
        acc += v.weight;
        if acc >= total / 2.0 {
            return Some(v.value);
        }
    }
    votes.last().map(|v| v.value)
}

/// Clip each of `values` in place at `clip` x (the largest value among the OTHER entries that are
/// `active`), and return the clipped sum. An entry with no active other keeps its value (it is the
/// only evidence). Negative and non-finite values count as 0. `active` is aligned with `values`.
pub fn clip_contributions(values: &mut [f64], active: &[bool], clip: f64) -> f64 {
    for v in values.iter_mut() {
        if !v.is_finite() || *v < 0.0 {
            *v = 0.0;
        }
    }
    // The two largest active values: the largest other is the first, except for the first itself.
    let (mut first, mut second): (Option<(usize, f64)>, Option<f64>) = (None, None);
    for (i, (v, a)) in values.iter().zip(active).enumerate() {
        if !*a {
            continue;
        }
        match first {
            Some((_, f)) if *v <= f => second = Some(second.map_or(*v, |s| s.max(*v))),
            _ => {
                second = first.map(|(_, f)| f);
                first = Some((i, *v));
            }
        }
    }
    for (i, v) in values.iter_mut().enumerate() {
        let largest_other = match first {
            Some((at, _)) if at == i => second,
            Some((_, f)) => Some(f),
            None => None,
        };
        if let Some(other) = largest_other {
            *v = v.min(clip * other);
        }
    }
    values.iter().sum()
}

/// Where an endpoint's CPU utilisation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CpuOrigin {
    /// The endpoint's ORCA reports, as its reporters relayed them.
    Orca,
    /// The metrics store (`WeightBook::set_external_cpu`).
    Metrics,
}

impl CpuOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            CpuOrigin::Orca => "orca",
            CpuOrigin::Metrics => "metrics",
        }
    }
}

/// A merged CPU utilisation, its source, and when it was measured (the end of its window).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MergedCpu {
    pub utilization: f64,
    pub source: CpuOrigin,
    pub at_us: u64,
}

/// One endpoint's numbers merged over its live reporters (those of one principal, or all).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Merged {
    pub qps: f64,
    pub eps: f64,
    pub inflight: f64,
    pub latency_us: Option<f64>,
    pub cpu: Option<MergedCpu>,
    pub reporters: usize,
    /// The votes behind `latency_us` (successes, or one per peak-EWMA sample) and `cpu` (request
    /// rates, at least 1 each): what the principal weighs in with between two principals.
    pub latency_votes: f64,
    pub cpu_votes: f64,
    /// Time since the latest good answer to users any merged reporter's reports show (see
    /// `Observation::served_us`), in milliseconds; None: none shows one.
    pub served_age_ms: Option<u64>,
}

/// Reused buffers: merging allocates nothing in steady state.
#[derive(Debug, Default)]
pub(crate) struct MergeScratch {
    votes: Vec<Vote>,
    qps: Vec<f64>,
    eps: Vec<f64>,
    active: Vec<bool>,
    /// Each merged reporter's in-flight count as clipped, aligned with the `ids` merged.
    pub inflight: Vec<f64>,
}

/// Step 1, within one principal (or all reporters, when the book holds one principal): merge what
/// the live reporters `ids` say about one endpoint. Request, error and in-flight rates are
/// [`clip_contributions`] sums (errors at most the requests); a reporter is active when it sends
/// requests or holds some in flight. Latency is a [`capped_median`] of each reporter's mean over
/// its last window, voting with its successes (without successes there, its recent peak-EWMA with
/// one vote); ORCA CPU a capped median of the fresh samples voting with their request rate (at
/// least 1). Leaves each reporter's counted in-flight share in `s.inflight`.
pub(crate) fn merge_reporters(
    obs: &IdMap<Observation>,
    ids: &[u64],
    p: &WeightParams,
    s: &mut MergeScratch,
    now_us: u64,
) -> Merged {
    s.qps.clear();
    s.eps.clear();
    s.inflight.clear();
    s.active.clear();
    for o in ids.iter().filter_map(|id| obs.get(id)) {
        let (qps, eps) = o.rates(now_us);
        s.qps.push(qps);
        s.eps.push(eps);
        s.inflight.push(f64::from(o.inflight));
        s.active.push(qps > 0.0 || o.inflight > 0);
    }
    let reporters = s.qps.len();
    let qps = clip_contributions(&mut s.qps, &s.active, p.sum_clip);
    let eps = clip_contributions(&mut s.eps, &s.active, p.sum_clip).min(qps);
    let inflight = clip_contributions(&mut s.inflight, &s.active, p.sum_clip);
    s.votes.clear();
    for o in ids.iter().filter_map(|id| obs.get(id)) {
        match (o.mean_latency_us, o.ewma) {
            (Some(mean), _) if o.successes > 0 && o.window_until_us > now_us => {
                s.votes.push(Vote { value: mean, weight: o.successes as f64 })
            }
            (_, Some((ewma, at))) if now_us.saturating_sub(at) <= p.latency_sample_max_age_us => {
                s.votes.push(Vote { value: ewma, weight: 1.0 })
            }
            _ => {}
        }
    }
    let latency_votes = s.votes.iter().map(|v| v.weight).sum();
    let latency_us = capped_median(&mut s.votes, p.vote_cap);
    s.votes.clear();
    let mut orca_at = 0u64;
    let orca_max_age_us = p.orca_vote_max_age_us();
    for o in ids.iter().filter_map(|id| obs.get(id)) {
        if let Some((cpu, at)) = o.cpu {
            if now_us.saturating_sub(at) <= orca_max_age_us {
                s.votes.push(Vote { value: cpu, weight: o.rates(now_us).0.max(1.0) });
                orca_at = orca_at.max(at);
            }
        }
    }
    let cpu_votes = s.votes.iter().map(|v| v.weight).sum();
    let cpu = capped_median(&mut s.votes, p.vote_cap).map(|utilization| MergedCpu {
        utilization,
        source: CpuOrigin::Orca,
        at_us: orca_at,
    });
    let served_age_ms =
        ids.iter().filter_map(|id| obs.get(id)?.served_us).max().map(|at| now_us.saturating_sub(at) / 1_000);
    Merged { qps, eps, inflight, latency_us, cpu, reporters, latency_votes, cpu_votes, served_age_ms }
}

/// Of the merged ORCA value and the metrics store's value for the endpoint's IP, the fresher one
/// (a metrics-store value older than `cpu_max_age_us` does not count).
pub(crate) fn with_metrics_cpu(
    m: &mut Merged,
    ip: Option<IpAddr>,
    external_cpu: &HashMap<IpAddr, (f64, u64)>,
    p: &WeightParams,
    now_us: u64,
) {
    let external = ip
        .and_then(|ip| external_cpu.get(&ip).copied())
        .filter(|(_, at)| now_us.saturating_sub(*at) <= p.cpu_max_age_us)
        .map(|(utilization, at_us)| MergedCpu { utilization, source: CpuOrigin::Metrics, at_us });
    m.cpu = match (m.cpu, external) {
        (Some(o), Some(x)) => Some(if o.at_us >= x.at_us { o } else { x }),
        (o, x) => o.or(x),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(pairs: &[(f64, f64)]) -> Vec<Vote> {
        pairs.iter().map(|&(value, weight)| Vote { value, weight }).collect()
    }

    #[test]
    fn median_of_plain_votes() {
        assert_eq!(capped_median(&mut votes(&[(3.0, 1.0), (1.0, 1.0), (2.0, 1.0)]), 0.5), Some(2.0));
        assert_eq!(capped_median(&mut votes(&[]), 0.5), None);
        assert_eq!(capped_median(&mut votes(&[(7.0, 5.0)]), 0.5), Some(7.0), "a lone vote stands");
    }

    #[test]
    fn a_heavy_vote_is_capped_relative_to_the_others() {
        // Without the cap the 1000-weight liar decides; with cap 0.5 it holds a third of the vote.
        let mut v = votes(&[(1.0, 10.0), (1.2, 10.0), (1.1, 10.0), (99.0, 1000.0)]);
        let m = capped_median(&mut v, 0.5).unwrap();
        assert!((1.0..=1.2).contains(&m), "{m}");
    }

    #[test]
    fn of_two_votes_the_lighter_cannot_decide() {
        // One reporter with 50 answers at 10 ms against one with 5 at 1 s: capping each at
        // cap x the other alone left 25 against 5 -> 2.5 against 5, and the 1 s vote won.
        for cap in [0.25, 0.5, 0.9] {
            assert_eq!(capped_median(&mut votes(&[(10.0, 50.0), (1000.0, 5.0)]), cap), Some(10.0));
            assert_eq!(capped_median(&mut votes(&[(1000.0, 50.0), (10.0, 5.0)]), cap), Some(10.0), "a tie: the lower");
        }
    }

    #[test]
    fn honest_agreement_cannot_be_moved() {
        for liar in [0.0, 1e-9, 5.0, 1e12] {
            let mut v = votes(&[(4.0, 3.0), (4.0, 5.0), (liar, 1e9)]);
            assert_eq!(capped_median(&mut v, 0.5), Some(4.0));
        }
    }

    #[test]
    fn garbage_votes_are_ignored() {
        let mut v = votes(&[(f64::NAN, 1.0), (2.0, 1.0), (f64::INFINITY, 1.0), (5.0, -1.0), (9.0, 0.0)]);
        assert_eq!(capped_median(&mut v, 0.5), Some(2.0));
    }

    #[test]
    fn contributions_are_clipped_at_a_multiple_of_the_largest_active_other() {
        let mut v = [10.0, 12.0, 1e9];
        let sum = clip_contributions(&mut v, &[true; 3], 2.0);
        assert_eq!(v, [10.0, 12.0, 24.0]);
        assert_eq!(sum, 46.0);
        let mut lone = [1e9];
        assert_eq!(clip_contributions(&mut lone, &[true], 2.0), 1e9);
        // Active others that saw nothing clip a claim to nothing (e.g. errors nobody else sees).
        let mut bad = [f64::NAN, -3.0, 4.0];
        assert_eq!(clip_contributions(&mut bad, &[true; 3], 2.0), 0.0);
    }

    #[test]
    fn idle_reporters_do_not_clip_the_one_that_sends() {
        let mut v = [0.0, 0.0, 50.0];
        assert_eq!(clip_contributions(&mut v, &[false, false, true], 2.0), 50.0);
        let mut w = [5.0, 50.0];
        assert_eq!(clip_contributions(&mut w, &[false, true], 2.0), 55.0, "an inactive entry is still summed");
    }
}
