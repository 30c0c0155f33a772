//! How a pick chooses, one strategy per function (the steps of the `balancer` module docs):
//! exploration of the view's suggestions or Envoy's own choice (`explore`), a suspended endpoint's
//! due probe, the weighted power of two choices by expected wait (`two_choices`), and with load
//! stamps the draw against the freshest stamped queues (`stamped_choice`); then the header of the
//! first choice and the retry choices (`steer_header`).

use super::settings::Settings;
use crate::cluster::{Candidate, Cluster};
use crate::endpoint::{Endpoint, EVIDENCE_FADES};
use crate::params::PickParams;
use tailweight_math::rng::Rng;

/// Why a pick leaves the request to Envoy's load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeftToEnvoy {
    /// On purpose: exploration found no suggestion to try.
    Explore,
    /// Nothing pickable.
    NoCandidate,
}

/// The first choice of a pick, or why the request is left to Envoy's load balancer.
pub(super) fn first_choice(
    cluster: &mut Cluster,
    settings: &Settings,
    rng: &mut Rng,
    now_us: u64,
) -> Result<Candidate, LeftToEnvoy> {
    let p = &settings.pick;
    let stamps = reads_stamps(cluster, p);
    if rng.chance(p.explore_ratio.max(cluster.novelty() / 2.0)) {
        return explore(cluster, rng, now_us, p, stamps);
    }
    if !settings.checks_out_of_band(cluster, now_us) {
        if let Some(probe) = cluster.take_due_probe(now_us, p) {
            return Ok(Candidate::Known(probe));
        }
    }
    let a = cluster.sample_candidate(rng, now_us, true).ok_or(LeftToEnvoy::NoCandidate)?;
    Ok(if stamps { stamped_choice(cluster, a, now_us, p) } else { two_choices(cluster, rng, now_us, p, a) })
}

/// Do stamps decide this cluster's picks? Only with `load_stamp_max_age_us` > 0, once its
/// responses have brought a stamp (a cluster whose destinations write none, or whose stamps are
/// not read, keeps the two-choice pick), and while at most `load_stamp_max_fresh_share` of its
/// endpoints (known here or listed by a fresh view) have a fresh latency estimate of this proxy's own.
fn reads_stamps(cluster: &Cluster, p: &PickParams) -> bool {
    p.load_stamp_max_age_us > 0
        && !cluster.stamped().is_empty()
        && cluster.own_fresh_share() <= p.load_stamp_max_fresh_share
}

/// Step 2: a trial of an endpoint the view suggests, else Envoy's own choice (see `cluster`). With
/// load stamps the trial, too, yields to an endpoint freshly known to be less loaded.
fn explore(
    cluster: &mut Cluster,
    rng: &mut Rng,
    now_us: u64,
    p: &PickParams,
    stamps: bool,
) -> Result<Candidate, LeftToEnvoy> {
    match cluster.sample_suggestion(rng, now_us) {
        Some(at) if stamps => Ok(stamped_choice(cluster, Candidate::Suggested(at), now_us, p)),
        Some(at) => Ok(Candidate::Suggested(at)),
        None => Err(LeftToEnvoy::Explore),
    }
}

/// Two known endpoints whose scores are within this factor of each other are a near tie (see
/// `two_choices`): less than latency estimates' own noise (a peak EWMA sits at recent peaks).
pub const NEAR_TIE: f64 = 1.1;

/// Step 4: `a` against a second distinct weighted draw; the lower `Endpoint::score` wins (`a` on
/// ties, or when no second candidate turns up in 8 draws). When neither of two known endpoints has
/// a request in flight from this proxy the scores are latencies alone, and the lower would win
/// every time: an endpoint whose estimate stayed a hair above another's, less than estimates' own
/// noise, got no picks and no sample that could lower it (one that was slow and recovered). Then
/// they are compared by `Endpoint::idle_score` (evidence of slowness fades with its age), and a
/// near tie (within `NEAR_TIE`, neither ramping: a ramp sets its own share, see `health`) is the
/// weighted draw's, `a`, unless `b`'s latency evidence is older than `a`'s and at least
/// `stale_after / EVIDENCE_FADES` old (2 s by default): then `b`, which refreshes it. A suggestion
/// has no requests here and no samples: the cluster's prior latency is all there is.
fn two_choices(cluster: &mut Cluster, rng: &mut Rng, now_us: u64, p: &PickParams, a: Candidate) -> Candidate {
    let b = (0..8).filter_map(|_| cluster.sample_candidate(rng, now_us, true)).find(|c| *c != a);
    let prior = cluster.prior_latency_us();
    let Some(b) = b else { return a };
    if let (Candidate::Known(x), Candidate::Known(y)) = (a, b) {
        let (ex, ey) = (&cluster.endpoints()[x], &cluster.endpoints()[y]);
        if ex.load() == 0.0 && ey.load() == 0.0 {
            let (sa, sb) = (ex.idle_score(now_us, p, prior), ey.idle_score(now_us, p, prior));
            if sa.max(sb) <= NEAR_TIE * sa.min(sb) && ex.health.ramp().is_none() && ey.health.ramp().is_none() {
                let sampled = |e: &Endpoint| e.latency_sampled_us(now_us, p).unwrap_or(0);
                let age_us = now_us.saturating_sub(sampled(ey)) as f64;
                let old = sampled(ey) < sampled(ex) && age_us >= p.stale_after_us as f64 / EVIDENCE_FADES;
                return if old { b } else { a };
            }
            return if sb < sa { b } else { a };
        }
    }
    let score = |c: Candidate| match c {
        Candidate::Known(slot) => cluster.endpoints()[slot].score(now_us, p, prior),
        Candidate::Suggested(_) => prior,
    };
    if score(b) < score(a) {
        b
    } else {
        a
    }
}

/// The override header: the first choice, then up to `retry_choices` distinct known endpoints
/// drawn by weight (`chosen` keeps the slots, to reuse its allocation). Returns the header and the
/// first choice's length in it.
pub(super) fn steer_header(
    cluster: &mut Cluster,
    rng: &mut Rng,
    now_us: u64,
    first: Candidate,
    retry_choices: usize,
    chosen: &mut Vec<usize>,
) -> (String, usize) {
    chosen.clear();
    let mut header = String::with_capacity((retry_choices + 1) * 22);
    match first {
        Candidate::Known(slot) => {
            chosen.push(slot);
            header.push_str(&cluster.endpoints()[slot].address);
        }
        Candidate::Suggested(at) => header.push_str(cluster.suggestion(at)),
    }
    let first_len = header.len();
    let known_first = usize::from(matches!(first, Candidate::Known(_)));
    while chosen.len() < retry_choices + known_first {
        match draw_distinct(cluster, rng, now_us, chosen) {
            Some(slot) => chosen.push(slot),
            None => break,
        }
    }
    for slot in &chosen[known_first..] {
        header.push(',');
        header.push_str(&cluster.endpoints()[*slot].address);
    }
    (header, first_len)
}

/// Step 4 with load stamps: the weighted draw `drawn` against the endpoints of this worker's
/// freshest stamps that may be drawn at all (sampling weight > 0), the lowest
/// `Endpoint::stamped_score` wins (the draw on ties). A suggestion scores as a known endpoint
/// without a stamp would: by its view in-flight and weight.
fn stamped_choice(cluster: &Cluster, drawn: Candidate, now_us: u64, p: &PickParams) -> Candidate {
    let fresh = cluster.view_fresh(now_us);
    let prior = cluster.prior_latency_us();
    let score = |c: Candidate| match c {
        Candidate::Known(slot) => cluster.endpoints()[slot].stamped_score(now_us, p, fresh, prior),
        Candidate::Suggested(at) => {
            let (weight, inflight) = cluster.suggestion_view(at);
            (inflight.max(0.0) + 1.0) / weight.max(1e-3)
        }
    };
    let mut best = (score(drawn), drawn);
    for &slot in cluster.stamped() {
        let e = &cluster.endpoints()[slot];
        if Candidate::Known(slot) == drawn
            || !e.stamp.is_some_and(|s| s.fresh(now_us, p.load_stamp_max_age_us))
            || e.sampling_weight(fresh, cluster.readmit_weight(), now_us) <= 0.0
        {
            continue;
        }
        let s = score(Candidate::Known(slot));
        if s < best.0 {
            best = (s, Candidate::Known(slot));
        }
    }
    best.1
}

/// A slot not in `taken`, drawn by weight; None when no such slot turns up in a few draws.
fn draw_distinct(cluster: &mut Cluster, rng: &mut Rng, now_us: u64, taken: &[usize]) -> Option<usize> {
    if cluster.len() <= taken.len() {
        return None;
    }
    (0..8).filter_map(|_| cluster.sample(rng, now_us)).find(|slot| !taken.contains(slot))
}
