//! What one worker knows about one upstream endpoint: its own observations, what the other workers
//! of the same proxy saw (shared data), and the aggregator's view of all proxies.
//!
//! The per-request score uses only this proxy's own knowledge (its workers' in-flight counts and
//! latency samples). The aggregator's view is up to a report interval old and the same for every
//! proxy: scoring requests with its instantaneous in-flight counts or queueing latencies sends all
//! proxies to the same "idle" endpoints until the next view (the herd effect of stale shared load
//! information; measured in sim/README.md). It steers through the sampling weights instead.

use crate::health::{Health, HealthChange};
use crate::inflight::Inflight;
use crate::outcome::ResponseClass;
use crate::params::PickParams;
use crate::stamp_record::StampRecord;
use tailweight_math::ewma::{decay_weight, PeakEwma};
use tailweight_wire::orca::OrcaLoad;

/// Weight given to an endpoint whose aggregator weight is zero or missing in sampling.
const MIN_SAMPLING_WEIGHT: f64 = 1e-3;
/// A good answer within this factor of the endpoint's latency estimate is at normal latency.
pub const NORMAL_LATENCY_FACTOR: f64 = 1.5;

/// This proxy's own evidence outpaces the view when its fresh latency estimate of an endpoint is
/// below the view's latency of it by this factor (see `Endpoint::refresh_outpaced_view`).
pub const VIEW_OUTPACED_FACTOR: f64 = 2.0;

/// The time constant of the fade (`faded`) is `stale_after / EVIDENCE_FADES` (2 s by default): by
/// `stale_after`, where the prior takes over, an estimate's excess is down to exp(-2.5) = 8% of it.
/// Faster (5: 1 s, and faded scores with requests in flight too) brought slowed endpoints back no
/// sooner in the harness, whose aggregator weights took 4-5 s to follow them back, and doubled what
/// they got while slow (0.5% to 1.2% of requests; bench/results/slow-recover).
pub const EVIDENCE_FADES: f64 = 2.5;

/// What a latency estimate last sampled `age` ago says now (to a pick with nothing in flight, and
/// as the start of its next sample), given the cluster's prior (its typical
/// latency, see `Cluster::refresh_prior`):
///
/// `faded = prior + (estimate - prior) x exp(-age / (stale_after / EVIDENCE_FADES))` if
/// `estimate > prior`, else `estimate`
///
/// Evidence of slowness fades, evidence of speed stands (an endpoint that looks fast is picked,
/// which refreshes it). The pick compares expected waits, and with nothing in flight latencies
/// alone: without the fade an endpoint whose estimate stayed above the others' (one that was slow
/// and recovered, its first normal answers only pulling the slow estimate part of the way down) got
/// no picks, so no sample that could lower it. With it an avoided endpoint's excess halves every
/// `0.69 x stale_after / EVIDENCE_FADES` (1.4 s by default): one 1.5x slower than the typical latency
/// comes within 10% of it, a near tie (see `balancer::choice::two_choices`), after about `1.6 x
/// stale_after / EVIDENCE_FADES` (3.2 s) without a sample; one 4x slower only at `stale_after`,
/// as without the fade (each of its slow answers sets its estimate, and its age, again): the tail
/// pays about one request per `stale_after` per worker for it. A sample after a gap starts from
/// the faded value (`Endpoint::fade_latency`), so a recovered endpoint's first normal answer makes
/// it competitive at once.
fn faded(estimate_us: f64, age_us: u64, p: &PickParams, prior_us: f64) -> f64 {
    if estimate_us <= prior_us {
        return estimate_us;
    }
    prior_us + (estimate_us - prior_us) * decay_weight(age_us, p.stale_after_us as f64 / EVIDENCE_FADES)
}

/// An answer is at normal latency when `latency <= NORMAL_LATENCY_FACTOR x estimate` (or there is no
/// estimate yet).
fn is_normal_latency(estimate: Option<PeakEwma>, latency_us: u64) -> bool {
    estimate.is_none_or(|e| latency_us as f64 <= NORMAL_LATENCY_FACTOR * e.value_us())
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub address: String,
    pub local: LocalStats,
    pub siblings: SiblingStats,
    /// From the aggregator; only used while the cluster's view is fresh.
    pub global: Option<GlobalStats>,
    /// Whether it answers (failures, suspension, absence, ramps): see `health`.
    pub health: Health,
    /// Last time it answered a request well here (or a sibling worker saw it do so; its first
    /// contact until then): the only evidence that keeps it tracked. A view from the aggregator
    /// never refreshes it.
    pub last_success_us: u64,
    /// It answered well here, or a sibling saw it do so: only then is it a sighting for siblings.
    pub answered_well: bool,
    /// Last time any response here was attributed to it: reports carry endpoints with recent ones.
    pub last_response_us: u64,
    /// The latest server-side load stamp this worker got from it (see `stamp`).
    pub stamp: Option<StampRecord>,
    /// The last tick at which this proxy's own evidence outpaced the view (see
    /// `refresh_outpaced_view`).
    pub outpaced_view_us: Option<u64>,
    /// Whether the view's weight is overruled by own evidence as of the last tick.
    pub outpaces_view: bool,
}

/// Observations of this worker. Counters are cumulative (reports carry them as they are).
#[derive(Debug, Clone, Default)]
pub struct LocalStats {
    /// Requests waiting for their first response headers (see `inflight`).
    pub inflight: Inflight,
    pub requests: u64,
    pub errors: u64,
    pub latency_sum_us: u64,
    /// When the counters above started from zero (the endpoint's first contact here): reports say
    /// how long they have been counting (`EndpointReport::counted_ms`).
    pub counting_since_us: u64,
    /// Peak-EWMA of the time to first response headers of successful requests.
    pub latency: Option<PeakEwma>,
    /// ORCA utilisation and when it was received.
    pub cpu: Option<(f64, u64)>,
}

/// The other workers of this proxy, as of their last publication.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiblingStats {
    pub inflight: u32,
    /// Freshest sibling latency estimate and the time of its last sample.
    pub latency: Option<(f64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalStats {
    pub weight: f64,
    /// Requests in flight to it from all proxies as they last reported (with load stamps only:
    /// what a pick expects there when it has no fresh stamp; see `Endpoint::stamped_score`).
    pub inflight: f64,
    /// All proxies' mean latency: only a cluster-wide prior (see `Cluster::refresh_prior`).
    pub latency_us: f64,
    pub ejected: bool,
    /// When some caller's users last had a good answer from it, on this worker's clock: the view's
    /// `served_age_ms` before the reply was received (None: not said).
    pub served_us: Option<u64>,
}

/// A view's `served_age_ms` is as of the aggregator's last recompute, which may be up to about a
/// report interval older than the reply, and a reporter's good answer is placed at its latest
/// within the window that showed it: evidence must come this long after a suspension began to be
/// taken as after it.
pub const SERVED_EVIDENCE_MARGIN_US: u64 = 1_000_000;

impl Endpoint {
    /// An endpoint Envoy just sent a request to (see `Cluster::learn`).
    pub fn new(address: &str, now_us: u64) -> Self {
        Endpoint {
            address: address.to_string(),
            local: LocalStats { counting_since_us: now_us, ..LocalStats::default() },
            siblings: SiblingStats::default(),
            global: None,
            health: Health::default(),
            last_success_us: now_us,
            answered_well: false,
            last_response_us: now_us,
            stamp: None,
            outpaced_view_us: None,
            outpaces_view: false,
        }
    }

    /// Record a response this endpoint gave (or a failed attempt on it). Failures never enter the
    /// latency estimate: they count through the failure ratio (see `score`). A good answer is at
    /// normal latency when within `NORMAL_LATENCY_FACTOR` x its estimate before it (or it had none):
    /// strong evidence toward ending a recovery ramp (see `health`).
    pub fn record(
        &mut self,
        class: ResponseClass,
        latency_us: u64,
        load: Option<OrcaLoad>,
        now_us: u64,
        p: &PickParams,
    ) -> HealthChange {
        let l = &mut self.local;
        l.requests += 1;
        let normal = is_normal_latency(l.latency, latency_us);
        if class.is_success() {
            self.health.confirm();
            l.latency_sum_us = l.latency_sum_us.saturating_add(latency_us);
            match &mut l.latency {
                Some(ewma) => ewma.observe(latency_us as f64, now_us, p.latency_decay_us),
                None => l.latency = Some(PeakEwma::new(latency_us as f64, now_us)),
            }
            self.last_success_us = self.last_success_us.max(now_us);
            self.answered_well = true;
        } else {
            l.errors += 1;
        }
        if let Some(cpu) = load.and_then(|o| o.utilization()) {
            l.cpu = Some((cpu, now_us));
        }
        self.last_response_us = self.last_response_us.max(now_us);
        self.record_health(class, normal, now_us, p)
    }

    /// A health check's answer (see `health_check`): for its health what a user request's answer
    /// would be (a pass is a good answer, normal when within `NORMAL_LATENCY_FACTOR` x the latency
    /// estimate; else a failure), and a pass keeps it tracked like a good answer; its request counts
    /// and latency estimate are the users' requests' only (a check's path is not what they ask).
    pub fn record_health_check(
        &mut self,
        passed: bool,
        latency_us: u64,
        now_us: u64,
        p: &PickParams,
        back_off: bool,
    ) -> HealthChange {
        if !passed {
            return self.health.record_failed_check(now_us, &p.health_times(), back_off);
        }
        let normal = is_normal_latency(self.local.latency, latency_us);
        self.last_success_us = self.last_success_us.max(now_us);
        self.answered_well = true;
        let change = self.record_health(ResponseClass::Success, normal, now_us, p);
        if change == HealthChange::Recovered {
            self.health.recovered_by_check();
        }
        change
    }

    /// Did some caller's users get a good answer from it well after its suspension here began (the
    /// view's `served_age_ms`, as of `received_us`, less `SERVED_EVIDENCE_MARGIN_US`)? False unless
    /// suspended and in the view.
    pub fn served_since_suspension(&self) -> bool {
        match (self.health.suspended_since_us(), self.global.and_then(|g| g.served_us)) {
            (Some(since), Some(served)) => served > since.saturating_add(SERVED_EVIDENCE_MARGIN_US),
            _ => false,
        }
    }

    /// End its suspension on others' evidence (`served_since_suspension`): as a health check's pass
    /// does, with the recovery ramp, and unconfirmed until a user request here answers well (so a
    /// view that keeps readmitting an endpoint failing here costs ever fewer requests, as lying
    /// checks do).
    pub fn readmit_on_served_evidence(&mut self, now_us: u64, p: &PickParams) -> HealthChange {
        let change = self.record_health(ResponseClass::Success, false, now_us, p);
        if change == HealthChange::Recovered {
            self.health.recovered_by_check();
        }
        change
    }

    fn record_health(&mut self, class: ResponseClass, normal: bool, now_us: u64, p: &PickParams) -> HealthChange {
        let times = p.health_times();
        let change = self.health.record(class, now_us, &times);
        if !class.is_success() {
            return change;
        }
        match self.health.note_answer_latency(normal, now_us, &times) {
            HealthChange::None => change,
            cut => cut,
        }
    }

    /// Latency to expect: the freshest of this worker's and its siblings' estimates while fresh,
    /// else the cluster's prior.
    pub fn expected_latency_us(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        self.fresh_latency_us(now_us, p).unwrap_or(prior_us)
    }

    /// `expected_latency_us` with the freshest estimate `faded` by the age of its last sample: what
    /// a pick with nothing in flight compares (see `idle_score`).
    pub fn faded_latency_us(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        match self.freshest_latency(now_us, p) {
            Some((estimate_us, stamp_us)) => faded(estimate_us, now_us.saturating_sub(stamp_us), p, prior_us),
            None => prior_us,
        }
    }

    /// Before a good answer's sample enters this worker's estimate: the estimate becomes what
    /// `faded_latency_us` expects of it from its own evidence (faded toward `prior_us`), so a
    /// sample after a long gap corrects the faded value, not the one before the gap (a slow spell's
    /// last estimate, that a normal answer would only lower part of the way). Only right before
    /// `record`'s sample: the sample's time restarts the fade, so it is never applied twice.
    pub fn fade_latency(&mut self, now_us: u64, p: &PickParams, prior_us: f64) {
        if let Some(ewma) = &mut self.local.latency {
            let age_us = now_us.saturating_sub(ewma.stamp_us());
            let value_us =
                if age_us < p.stale_after_us { faded(ewma.value_us(), age_us, p, prior_us) } else { prior_us };
            *ewma = PeakEwma::new(value_us, ewma.stamp_us());
        }
    }

    /// Requests in flight from this proxy: this worker's and its siblings'.
    pub fn load(&self) -> f64 {
        f64::from(self.local.inflight.count()) + f64::from(self.siblings.inflight)
    }

    /// Expected cost of sending one more request here, lower is better:
    /// `(in flight + 1) x (latency + failure_latency x f) x (1 + error_penalty x f)`, with `f` the
    /// recent failure ratio (see `health`). A failure costs at least `failure_latency` of expected
    /// wait, so failing fast never looks fast, and the cost fades as the failures do.
    pub fn score(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        (self.load() + 1.0) * self.cost_of(self.expected_latency_us(now_us, p, prior_us), now_us, p)
    }

    /// `score` with nothing in flight here, from the `faded_latency_us` (see `two_choices`): with
    /// nothing in flight the scores are latencies alone, and evidence of slowness must fade there;
    /// with requests in flight an avoided endpoint's faded latency would beat busy fast ones
    /// (measured: twice the traffic to slowed endpoints while slow), so `score` keeps its own.
    pub fn idle_score(&self, now_us: u64, p: &PickParams, prior_us: f64) -> f64 {
        self.cost_of(self.faded_latency_us(now_us, p, prior_us), now_us, p)
    }

    /// `(latency + failure_latency x f) x (1 + error_penalty x f)`, `f` the recent failure ratio.
    fn cost_of(&self, latency_us: f64, now_us: u64, p: &PickParams) -> f64 {
        let f = self.health.failure_ratio(now_us, &p.health_times());
        (latency_us + p.failure_latency_us * f) * (1.0 + p.error_penalty * f)
    }

    /// With load stamps, the expected cost of one more request here, lower is better:
    /// `(q + 1) x u x (1 + error_penalty x f)` with `f` the recent failure ratio; `q` the requests at
    /// the endpoint: a fresh stamp's plus what this worker sent since, never below this proxy's own
    /// in flight there (`StampRecord::queue`), else (fresh view) the view's in-flight from all
    /// proxies, else this proxy's own; `u` the time one request holds it: 1 / its
    /// view weight (the weight is capacity relative to the cluster's mean) while the view is fresh,
    /// else its expected latency. A shared, second-old in-flight count only sets the bar a fresh
    /// stamp must beat: two endpoints are never ranked by it (that herds; see the module docs).
    pub fn stamped_score(&self, now_us: u64, p: &PickParams, view_fresh: bool, prior_us: f64) -> f64 {
        let f = self.health.failure_ratio(now_us, &p.health_times());
        let global = self.global.filter(|_| view_fresh);
        let stamped = self.stamp.filter(|s| s.fresh(now_us, p.load_stamp_max_age_us));
        let prior_q = match global {
            Some(g) => g.inflight.max(0.0),
            None => self.load(),
        };
        let q = stamped.map_or(prior_q, |s| s.queue(self.load()));
        let u = match global {
            Some(g) => 1.0 / g.weight.max(MIN_SAMPLING_WEIGHT),
            None if view_fresh => 1.0,
            None => self.expected_latency_us(now_us, p, prior_us),
        };
        (q + 1.0) * u * (1.0 + p.error_penalty * f)
    }

    /// Once per tick, with the cluster's prior: does this proxy's own evidence say the endpoint is
    /// faster than the view knows? The view is seconds behind (reports, then the weights' smoothing),
    /// and an endpoint that was slow and recovered kept the low weight of its slow spell for about
    /// 7 s after it was fast again (bench/results/slow-recover): drawn a quarter as often as the
    /// others, its share waited for the view. It outpaces the view at a tick where its fresh
    /// estimate x `VIEW_OUTPACED_FACTOR` < the view's latency of it while the view's weight of it is
    /// below half of `readmit_weight` (an average live endpoint's: only where the view ranks it far
    /// below the others, not a slower class of a mixed cluster), and keeps doing so for
    /// `stale_after` after the last such tick (the view's latency catches up before its weight
    /// does) while its estimate stays at normal latency (<= `NORMAL_LATENCY_FACTOR` x `prior_us`).
    /// Returns whether `outpaces_view` changed (the sampler's weights follow).
    pub fn refresh_outpaced_view(&mut self, now_us: u64, p: &PickParams, prior_us: f64, readmit_weight: f64) -> bool {
        let own_us = self.fresh_latency_us(now_us, p);
        if let (Some(own_us), Some(g)) = (own_us, self.global) {
            if own_us * VIEW_OUTPACED_FACTOR < g.latency_us && g.weight < readmit_weight / 2.0 {
                self.outpaced_view_us = Some(now_us);
            }
        }
        let recent = self.outpaced_view_us.is_some_and(|at| now_us.saturating_sub(at) < p.stale_after_us);
        let outpaces = recent && own_us.is_some_and(|l| l <= NORMAL_LATENCY_FACTOR * prior_us);
        let changed = outpaces != self.outpaces_view;
        self.outpaces_view = outpaces;
        changed
    }

    /// Its weight in the draw of candidates: the aggregator's while the view is fresh (an ejected
    /// endpoint 0, unless its last answer here was a good one: this worker's own evidence is newer
    /// than the view's, and it draws at least as an average live endpoint, `readmit_weight` (see
    /// `Cluster::readmit_weight`), since the view's weight of an ejected endpoint follows its dead
    /// capacity down to the floor: so the answers that readmit it at the aggregator come; one whose
    /// own evidence `outpaces_view` draws at least as an average live endpoint too), else 1; times
    /// its health's factor (0 while suspended or absent, a ramp's share).
    pub fn sampling_weight(&self, global_fresh: bool, readmit_weight: f64, now_us: u64) -> f64 {
        let base = match self.global {
            Some(g) if global_fresh => {
                if !g.ejected {
                    g.weight.max(if self.outpaces_view { readmit_weight } else { MIN_SAMPLING_WEIGHT })
                } else if self.last_success_us < self.last_response_us {
                    0.0
                } else {
                    g.weight.max(readmit_weight)
                }
            }
            _ => 1.0,
        };
        base * self.health.weight_factor(now_us)
    }

    /// The freshest of this worker's and its siblings' latency estimates, if sampled within
    /// `stale_after`.
    pub fn fresh_latency_us(&self, now_us: u64, p: &PickParams) -> Option<f64> {
        self.freshest_latency(now_us, p).map(|(v, _)| v)
    }

    /// When the latency estimate `expected_latency_us` starts from was last sampled (None: no fresh
    /// one, the prior stands in).
    pub fn latency_sampled_us(&self, now_us: u64, p: &PickParams) -> Option<u64> {
        self.freshest_latency(now_us, p).map(|(_, stamp)| stamp)
    }

    /// `fresh_latency_us` and the time of its last sample.
    fn freshest_latency(&self, now_us: u64, p: &PickParams) -> Option<(f64, u64)> {
        let local = self.local.latency.map(|e| (e.value_us(), e.stamp_us()));
        let freshest = match (local, self.siblings.latency) {
            (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
            (a, b) => a.or(b),
        };
        freshest.filter(|(_, stamp)| now_us.saturating_sub(*stamp) < p.stale_after_us)
    }
}

#[cfg(test)]
mod tests;
