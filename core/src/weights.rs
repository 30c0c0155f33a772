//! The aggregator's weight book: what every reporter said about every endpoint, merged into one
//! capacity weight per endpoint. Pure: time is an argument (microseconds), no I/O. Used by the
//! aggregator service and the simulator.
//!
//! A reporter is a (name, incarnation): each keeps its own counters, so processes sharing a name (a
//! sidecar without a usable node id) are counted apart, not differenced into each other. A new
//! incarnation of a known name cuts the others' ttl to one of their intervals (a restart's old self
//! fades once the new one has a window; a live twin renews itself by reporting). A reporter's rates
//! count for two of its intervals after their window closed: after that they are unknown, never an
//! old value paired with fresh CPU.
//!
//! Per recompute, for each endpoint (reporters silent past their ttl no longer count):
//! 1. Merge reporters robustly (see [`merge`]): request, error and in-flight rates are sums whose
//!    contributions are clipped at `sum_clip` x the largest other active reporter's; latency and ORCA
//!    CPU are weighted medians whose votes are capped at `vote_cap` x the other votes.
//! 2. Raw capacity, in requests per second:
//!    - CPU known (metrics store or ORCA, whichever is fresher) and traffic seen: the shape of Envoy's
//!      client-side WRR, `qps / (cpu + error_penalty x eps / qps)`: throughput per unit of CPU, with
//!      both measured over the same window. ORCA utilisation covers about the reporters' last
//!      interval, like their request windows; a metrics-store value averages over `cpu_window_us`
//!      (`rate(...[1m])`), so it is divided into the request and error rates over that window
//!      ending when it was set (from a short history of merged counts), never into the last second's.
//!    - Otherwise latency and Little's law: `concurrency / service_time`. The service time is a
//!      "valley follower" of the merged mean latency (drops at once, rises with `service_rise_us`):
//!      queueing only ever adds latency, so the low envelope estimates the work per request while the
//!      mean at high load would mostly measure queueing, which the picker already scores per request
//!      from in-flight counts. The concurrency comes from Little's law: while the endpoint queues
//!      (mean latency > `saturation_factor` x service time) it serves at capacity, so
//!      throughput x service time = requests in service = its concurrency; endpoints never seen
//!      saturated get the cluster's median learned concurrency (else 1). Errors cost twice: the
//!      capacity counts successes only, and each failure adds `failure_cost_us` to the time per
//!      request, so failing fast never looks fast: `k x success / (service + failure_cost x errors)`.
//!
//!    - A standing queue is work already owed: `backlog` = merged in flight - concurrency (learned,
//!      else the median, else 1); `backlog / backlog_drain` requests per second come off the
//!      capacity (down to 1% of it) so new requests go elsewhere until it drains. Capacity alone
//!      keeps feeding a queue that built up (cold start, a slowdown) at the full rate, and it then
//!      drains only at the spare rate: at 1,000 proxies x 1,000 endpoints and 90% load in the
//!      simulator, ~30 s of seconds-long requests after the start.
//!
//!    A cluster uses one method for all endpoints (the one most endpoints support); an endpoint it
//!    cannot rate this time keeps its last capacity by that method for `capacity_hold_us` (a slow
//!    endpoint the picker steers around may see no request in a window: that is no reason to send
//!    it the median share), then gets the median target, as Envoy's CSWRR gives unweighted hosts.
//! 3. Target = raw / mean raw, at least `floor`; smoothed geometrically toward it
//!    (log w moves 1 - exp(-dt / smoothing_us) of the way); then [`normalize`]: mean 1, each weight
//!    within a factor `max_step` of its previous value, never below `floor`.
//! 4. Ejected when the smoothed error ratio reaches `eject_ratio` over at least `eject_min_requests`;
//!    readmitted below half of it; without traffic the ratio fades (`error_fade_us`) so it gets probed.
//!
//! Lying-reporter bound. About an endpoint on which at least one other live reporter is active
//! (sending requests or holding some in flight), one reporter, whatever it reports:
//! - raises a sum (request rate, error rate, in flight) by at most `sum_clip` x the largest honest
//!   contribution: sum <= S_h + sum_clip x c_max, with S_h the honest reporters' own sum. With n equal
//!   honest reporters: at most x(1 + sum_clip / n) (x3 with one, default sum_clip 2), and so for the
//!   CPU-path capacity qps / (cpu + ...) when the CPU comes from elsewhere or honest ORCA agrees;
//!   through the in-flight sum it lowers the capacity a weight comes from by at most
//!   sum_clip x c_max / backlog_drain requests per second (the backlog);
//! - lowers a sum only by withholding its own share when two or more honest reporters are active;
//!   with exactly one, a tiny positive claim can clip that one's contribution down to
//!   sum_clip x the claim (the price of having no majority to compare with);
//! - cannot push the error ratio above zero when the honest reporters see no errors (its errors are
//!   clipped at sum_clip x theirs): it cannot eject a healthy endpoint;
//! - moves the merged latency and ORCA CPU only within the honest reporters' weighted
//!   (1 - vote_cap)/2 .. (1 + vote_cap)/2 quantiles (0.25 .. 0.75 by default), since its vote is
//!   capped at vote_cap x the others': when the honest reporters agree, the latency path and the
//!   ORCA value do not move at all.
//!
//! "One reporter" is one (name, incarnation): a liar that varies its incarnation is as many liars
//! (as one that varies its name always was), each counted against `max_reporters`. Reporting under an
//! honest reporter's name with another incarnation no longer disturbs that reporter's windows.
//!
//! An endpoint only one reporter speaks about has no other evidence and gets no protection. Whatever
//! is reported, each weight moves at most x`max_step` per recompute and stays >= `floor`.

mod merge;
mod normalize;

pub use merge::{capped_median, clip_contributions, Vote};

use crate::hash::IdMap;
use crate::stats::median;
use crate::wire::{self, ClusterView, EndpointView, Reply, Report};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Tuning and caps of the weight book. Times in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightParams {
    /// A reporter (and what it said) expires after this many of its own intervals without a report...
    pub reporter_ttl_intervals: f64,
    /// ...but never sooner than this.
    pub min_reporter_ttl_us: u64,
    /// The reply's ttl: this many of the asking reporter's intervals (bounded below by `min_view_ttl_us`).
    pub view_ttl_intervals: f64,
    pub min_view_ttl_us: u64,
    /// Time constant of the geometric smoothing of weights toward their targets.
    pub smoothing_us: f64,
    /// Largest factor a weight may move by in one recompute (> 1).
    pub max_step: f64,
    /// Smallest weight, relative to the mean of 1: slow endpoints keep getting probes.
    pub floor: f64,
    /// Eject at this smoothed error ratio (0..1], readmit below half of it.
    pub eject_ratio: f64,
    /// Requests needed in a recompute window before its error ratio counts.
    pub eject_min_requests: f64,
    /// Time constant of the smoothed error ratio while requests arrive, and of its fading without.
    pub error_decay_us: f64,
    pub error_fade_us: f64,
    /// How fast the service-time estimate rises toward higher latencies (it drops at once).
    pub service_rise_us: f64,
    /// Mean latency above this multiple of the service time means the endpoint queues (saturated).
    pub saturation_factor: f64,
    /// Time constant of the learned concurrency.
    pub concurrency_decay_us: f64,
    /// A CPU value older than this is not used.
    pub cpu_max_age_us: u64,
    /// The window a metrics-store CPU value averages over (the `[1m]` of `rate(...[1m])`). The CPU
    /// path divides it into the request rate over that same window, ending when the value was
    /// set: a 1 s request rate against a 60 s CPU average is off by the whole change in between.
    pub cpu_window_us: u64,
    /// CPU below this is treated as unknown (the formula divides by it).
    pub min_cpu: f64,
    /// Latency path: time one failure costs, added per request at the error ratio.
    pub failure_cost_us: f64,
    /// Requests per second needed for the CPU formula.
    pub min_qps_for_cpu: f64,
    /// An endpoint the cluster's method cannot rate this time (e.g. hardly any requests in the last
    /// window, as the picker steers around a slow endpoint) keeps its last capacity of that method
    /// for this long before it falls back to the median.
    pub capacity_hold_us: u64,
    /// Envoy CSWRR's error_utilization_penalty: qps / (cpu + penalty x eps / qps).
    pub error_penalty: f64,
    /// A standing queue (in flight beyond the endpoint's concurrency) should drain within this
    /// time: that rate comes off its capacity until it has (0 = off).
    pub backlog_drain_us: f64,
    /// A reporter's latency sample without requests in its last window counts if younger than this.
    pub latency_sample_max_age_us: u64,
    /// Lying-reporter guards: each vote <= vote_cap x the other votes (< 1); each contribution to a
    /// sum <= sum_clip x the largest other active contribution (>= 1).
    pub vote_cap: f64,
    pub sum_clip: f64,
    /// Caps; a report that would exceed one is rejected whole.
    pub max_reporters: usize,
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
    /// Reporter x endpoint observations in all (bounds memory under churn).
    pub max_observations: usize,
    /// IPs whose CPU the metrics store may tell (new IPs beyond it are ignored).
    pub max_cpu_entries: usize,
}

impl Default for WeightParams {
    fn default() -> Self {
        WeightParams {
            reporter_ttl_intervals: 3.0,
            min_reporter_ttl_us: 3_000_000,
            view_ttl_intervals: 3.0,
            min_view_ttl_us: 3_000_000,
            smoothing_us: 2_000_000.0,
            max_step: 1.5,
            floor: 0.05,
            eject_ratio: 0.5,
            eject_min_requests: 10.0,
            error_decay_us: 2_000_000.0,
            error_fade_us: 10_000_000.0,
            service_rise_us: 30_000_000.0,
            saturation_factor: 2.0,
            concurrency_decay_us: 10_000_000.0,
            cpu_max_age_us: 60_000_000,
            cpu_window_us: 60_000_000,
            min_cpu: 0.01,
            failure_cost_us: 100_000.0,
            min_qps_for_cpu: 1.0,
            capacity_hold_us: 10_000_000,
            error_penalty: 1.0,
            backlog_drain_us: 5_000_000.0,
            latency_sample_max_age_us: 10_000_000,
            vote_cap: 0.5,
            sum_clip: 2.0,
            max_reporters: 50_000,
            max_clusters: 4_096,
            max_endpoints_per_cluster: 2_048,
            max_observations: 2_000_000,
            max_cpu_entries: 100_000,
        }
    }
}

impl WeightParams {
    /// One line naming the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("reporter_ttl_intervals", self.reporter_ttl_intervals),
            ("view_ttl_intervals", self.view_ttl_intervals),
            ("smoothing_us", self.smoothing_us),
            ("error_decay_us", self.error_decay_us),
            ("error_fade_us", self.error_fade_us),
            ("service_rise_us", self.service_rise_us),
            ("concurrency_decay_us", self.concurrency_decay_us),
            ("min_cpu", self.min_cpu),
            ("eject_ratio", self.eject_ratio),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name}: {v} must be a positive number"));
            }
        }
        let checks = [
            (self.max_step > 1.0 && self.max_step <= 100.0, "max_step must be in (1, 100]"),
            (self.floor >= 0.0 && self.floor <= 1.0 - 1.0 / self.max_step, "floor must be in [0, 1 - 1/max_step]"),
            (self.eject_ratio <= 1.0, "eject_ratio must be at most 1"),
            (self.eject_min_requests >= 0.0 && self.eject_min_requests.is_finite(), "eject_min_requests must be >= 0"),
            (self.saturation_factor > 1.0 && self.saturation_factor.is_finite(), "saturation_factor must be > 1"),
            (self.min_qps_for_cpu >= 0.0 && self.min_qps_for_cpu.is_finite(), "min_qps_for_cpu must be >= 0"),
            (self.failure_cost_us >= 0.0 && self.failure_cost_us.is_finite(), "failure_cost_us must be >= 0"),
            (self.error_penalty >= 0.0 && self.error_penalty.is_finite(), "error_penalty must be >= 0"),
            (self.backlog_drain_us >= 0.0 && self.backlog_drain_us.is_finite(), "backlog_drain_us must be >= 0"),
            (self.vote_cap > 0.0 && self.vote_cap < 1.0, "vote_cap must be in (0, 1)"),
            (self.sum_clip >= 1.0 && self.sum_clip.is_finite(), "sum_clip must be >= 1"),
            (self.max_reporters > 0 && self.max_clusters > 0, "max_reporters and max_clusters must be > 0"),
            (self.max_endpoints_per_cluster > 0 && self.max_observations > 0, "endpoint caps must be > 0"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err((*why).to_string()),
            None => Ok(()),
        }
    }
}

/// Why a report was refused (countable; see `as_str`). A refused report changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    TooManyReporters,
    TooManyClusters,
    TooManyEndpoints,
    TooManyObservations,
}

impl Rejection {
    pub const ALL: [Rejection; 4] = [
        Rejection::TooManyReporters,
        Rejection::TooManyClusters,
        Rejection::TooManyEndpoints,
        Rejection::TooManyObservations,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::TooManyReporters => "too_many_reporters",
            Rejection::TooManyClusters => "too_many_clusters",
            Rejection::TooManyEndpoints => "too_many_endpoints",
            Rejection::TooManyObservations => "too_many_observations",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            Rejection::TooManyReporters => "the reporter limit is reached",
            Rejection::TooManyClusters => "the cluster limit is reached",
            Rejection::TooManyEndpoints => "the per-cluster endpoint limit is reached",
            Rejection::TooManyObservations => "the reporter x endpoint limit is reached",
        };
        f.write_str(what)
    }
}

/// Sizes of the book, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub reporters: usize,
    pub clusters: usize,
    pub endpoints: usize,
    pub observations: usize,
    pub cpu_entries: usize,
}

/// How an endpoint's capacity was estimated in the last recompute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Cpu,
    Latency,
    /// No usable data: the median target.
    #[default]
    Median,
}

/// Everything behind one endpoint's weight, for `GET /v1/weights`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointDecision {
    pub address: String,
    pub weight: f64,
    pub method: Method,
    /// Raw capacity (requests per second) and the target it gave before smoothing and bounds.
    pub capacity: Option<f64>,
    /// Requests in flight beyond the endpoint's concurrency (a standing queue; see `drained`).
    pub backlog: f64,
    pub target: f64,
    pub qps: f64,
    pub eps: f64,
    pub inflight: f64,
    pub latency_us: u64,
    pub service_time_us: Option<f64>,
    pub concurrency: Option<f64>,
    pub cpu: Option<f64>,
    pub cpu_source: Option<&'static str>,
    pub error_ratio: f64,
    pub ejected: bool,
    pub reporters: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterDecision {
    pub name: String,
    /// Recomputes of this cluster so far (the view's version).
    pub generation: u64,
    pub computed_at_us: u64,
    pub endpoints: Vec<EndpointDecision>,
}

#[derive(Debug, Clone)]
struct Reporter {
    id: u64,
    incarnation: u64,
    interval_us: u64,
    expires_us: u64,
    /// Where its last report's endpoints are, per cluster in report order.
    routes: Vec<Route>,
}

/// Where one cluster's endpoints of a reporter's last report are in the cluster's list, with their
/// addresses back to back in report order. The next report naming the same endpoints in the same
/// order (the usual case) finds them by comparing bytes in this one buffer instead of hashing each
/// address and chasing the index, a key and the endpoint through memory (cache misses dominated
/// `ingest` in a large book). Valid while the cluster's `layout` is the one recorded.
#[derive(Debug, Clone, Default)]
struct Route {
    layout: u64,
    index: Vec<u32>,
    addresses: Vec<u8>,
    /// `addresses[ends[i - 1]..ends[i]]` is the i-th address.
    ends: Vec<u32>,
}

impl Route {
    /// The list index of the i-th endpoint of the report if the route says `address` is there.
    fn lookup(&self, layout: u64, i: usize, address: &str) -> Option<usize> {
        if self.layout != layout {
            return None;
        }
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        (self.addresses.get(start..end) == Some(address.as_bytes())).then(|| self.index[i] as usize)
    }

    fn rebuild<'a>(&mut self, layout: u64, endpoints: &Endpoints, addresses: impl Iterator<Item = &'a str>) {
        self.layout = layout;
        self.index.clear();
        self.addresses.clear();
        self.ends.clear();
        for a in addresses {
            let Some(&i) = endpoints.index.get(a) else {
                // Cannot happen (ingest inserted them all); an empty route only costs a slow lookup.
                self.layout = 0;
                return;
            };
            self.index.push(i as u32);
            self.addresses.extend_from_slice(a.as_bytes());
            self.ends.push(self.addresses.len() as u32);
        }
    }
}

/// What one reporter last said about one endpoint.
#[derive(Debug, Clone)]
struct Observation {
    incarnation: u64,
    /// Cumulative counters at the start of the current window.
    requests: u64,
    errors: u64,
    latency_sum_us: u64,
    window_start_us: u64,
    /// Over the last completed window, which counts until `window_until_us` (two of the reporter's
    /// intervals after it closed): without a new window since (resets, or no report), the rates
    /// are unknown, never an old value paired with fresh CPU or in-flight numbers.
    window_until_us: u64,
    qps: f64,
    eps: f64,
    successes: u64,
    mean_latency_us: Option<f64>,
    inflight: u32,
    /// Its peak-EWMA latency and when it was sampled (fallback when the window has no success).
    ewma: Option<(f64, u64)>,
    cpu: Option<(f64, u64)>,
    expires_us: u64,
    /// Its clipped in-flight contribution at the last recompute (subtracted for peer_inflight).
    counted_inflight: f64,
}

#[derive(Debug, Clone)]
struct Endpoint {
    address: String,
    ip: Option<IpAddr>,
    obs: IdMap<Observation>,
    service_us: Option<f64>,
    concurrency: Option<f64>,
    error_ratio: f64,
    ejected: bool,
    weight: Option<f64>,
    /// The last raw capacity it was rated with, by which method, and when (see `capacity_hold_us`).
    last_raw: Option<(f64, Method, u64)>,
    decision: Option<EndpointDecision>,
    /// Merged requests and errors counted up over recomputes, as (time, requests, errors), spaced at
    /// least `cpu_window_us / 32` apart and reaching one window back: the rates over the window of a
    /// metrics-store CPU value. Kept only while the endpoint's IP has one (at most 34 entries).
    history: std::collections::VecDeque<(u64, f64, f64)>,
    /// The endpoint's reply JSON around `peer_inflight` (the only per-asker value), made at recompute:
    /// `json[..json_split]` goes before it, the rest after (one buffer: one cache miss per reply).
    json: Vec<u8>,
    json_split: usize,
}

/// A cluster's endpoints: a vector (recomputes walk it in order) with an index by address (a hash
/// lookup touches far less memory than a B-tree of heap strings, which dominated `ingest`).
#[derive(Debug, Clone, Default)]
struct Endpoints {
    list: Vec<Endpoint>,
    index: HashMap<String, usize>,
}

impl Endpoints {
    fn len(&self) -> usize {
        self.list.len()
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn get(&self, address: &str) -> Option<&Endpoint> {
        self.index.get(address).and_then(|i| self.list.get(*i))
    }

    /// Look up `id`'s observation of each endpoint at `indices` and drop the answer: the lookups
    /// are independent, so their cache misses overlap here instead of queueing up one endpoint at
    /// a time behind the work of `ingest` (the misses were most of its time in a large book).
    fn warm(&self, indices: &[u32], id: u64) {
        let mut sum = 0u64;
        for i in indices {
            if let Some(o) = self.list.get(*i as usize).and_then(|e| e.obs.get(&id)) {
                sum = sum.wrapping_add(o.requests);
            }
        }
        std::hint::black_box(sum);
    }

    fn at(&mut self, i: usize) -> &mut Endpoint {
        &mut self.list[i]
    }

    fn get_or_insert(&mut self, address: &str) -> &mut Endpoint {
        let i = match self.index.get(address) {
            Some(i) => *i,
            None => {
                self.list.push(Endpoint::new(address));
                self.index.insert(address.to_string(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        &mut self.list[i]
    }

    fn iter(&self) -> std::slice::Iter<'_, Endpoint> {
        self.list.iter()
    }

    fn iter_mut(&mut self) -> std::slice::IterMut<'_, Endpoint> {
        self.list.iter_mut()
    }

    /// Keep the endpoints `keep` says to; true if any went (indices moved).
    fn retain(&mut self, keep: impl FnMut(&mut Endpoint) -> bool) -> bool {
        let before = self.list.len();
        self.list.retain_mut(keep);
        if self.list.len() != before {
            self.index = self.list.iter().enumerate().map(|(i, e)| (e.address.clone(), i)).collect();
            return true;
        }
        false
    }
}

#[derive(Debug, Clone, Default)]
struct Cluster {
    endpoints: Endpoints,
    /// Changes whenever endpoint indices move (and differs between clusters): see `Route`.
    layout: u64,
    generation: u64,
    computed_at_us: Option<u64>,
}

/// Reused buffers: a recompute allocates nothing in steady state.
#[derive(Debug, Default)]
struct Scratch {
    votes: Vec<Vote>,
    qps: Vec<f64>,
    eps: Vec<f64>,
    inflight: Vec<f64>,
    active: Vec<bool>,
    ids: Vec<u64>,
    raw: Vec<Option<f64>>,
    cpu_raw: Vec<Option<f64>>,
    desired: Vec<f64>,
    lo_hi: Vec<(f64, f64)>,
    out: Vec<f64>,
    sorted: Vec<f64>,
}

#[derive(Debug)]
pub struct WeightBook {
    params: WeightParams,
    clusters: HashMap<String, Cluster>,
    /// By name; each name's live incarnations, the one that reported last first (usually just one:
    /// more when a reporter restarted within its ttl, or when several processes share a name).
    reporters: HashMap<String, Vec<Reporter>>,
    /// Live incarnations in all (what `max_reporters` bounds).
    reporter_count: usize,
    next_reporter_id: u64,
    next_layout: u64,
    external_cpu: HashMap<IpAddr, (f64, u64)>,
    observations: usize,
    scratch: Scratch,
}

impl WeightBook {
    pub fn new(params: WeightParams) -> Self {
        WeightBook {
            params,
            clusters: HashMap::new(),
            reporters: HashMap::new(),
            reporter_count: 0,
            next_reporter_id: 0,
            next_layout: 1,
            external_cpu: HashMap::new(),
            observations: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn params(&self) -> &WeightParams {
        &self.params
    }

    pub fn counts(&self) -> Counts {
        Counts {
            reporters: self.reporter_count,
            clusters: self.clusters.len(),
            endpoints: self.clusters.values().map(|c| c.endpoints.len()).sum(),
            observations: self.observations,
            cpu_entries: self.external_cpu.len(),
        }
    }

    /// Merge one already-validated report received at `now_us`. Err = refused by a cap; a refused
    /// report changes nothing. O(endpoints in the report).
    pub fn ingest(&mut self, report: &Report, now_us: u64) -> Result<(), Rejection> {
        self.admit(report)?;
        let p = &self.params;
        let interval_us = u64::from(report.interval_ms) * 1_000;
        let ttl_us = ((interval_us as f64 * p.reporter_ttl_intervals) as u64).max(p.min_reporter_ttl_us);
        let expires_us = now_us.saturating_add(ttl_us);
        let incarnations = match self.reporters.get_mut(&report.reporter) {
            Some(list) => list,
            None => self.reporters.entry(report.reporter.clone()).or_default(),
        };
        // A reporter is a (name, incarnation): a new incarnation is a restart, or another process
        // under the same name. Its counters are its own either way (taking differences across
        // processes would reset every window). The other incarnations stop counting after one more
        // of their intervals unless they report again: a restarted reporter's old self fades once its
        // successor has a window, while a live twin renews itself with its next report.
        let mut superseded = None;
        let id = match incarnations.iter().position(|r| r.incarnation == report.incarnation) {
            Some(i) => {
                incarnations.swap(0, i);
                let r = &mut incarnations[0];
                (r.interval_us, r.expires_us) = (interval_us, expires_us);
                r.id
            }
            None => {
                let id = self.next_reporter_id;
                self.next_reporter_id += 1;
                if !incarnations.is_empty() {
                    for r in incarnations.iter_mut() {
                        r.expires_us = r.expires_us.min(now_us.saturating_add(r.interval_us));
                    }
                    superseded = Some(incarnations.iter().map(|r| (r.id, r.expires_us)).collect::<Vec<_>>());
                }
                incarnations.push(Reporter {
                    id,
                    incarnation: report.incarnation,
                    interval_us,
                    expires_us,
                    routes: Vec::new(),
                });
                let last = incarnations.len() - 1;
                incarnations.swap(0, last);
                self.reporter_count += 1;
                id
            }
        };
        let mut routes = std::mem::take(&mut incarnations[0].routes);
        routes.resize_with(report.clusters.len(), Route::default);
        for (c, route) in report.clusters.iter().zip(routes.iter_mut()) {
            let cluster = match self.clusters.get_mut(&c.name) {
                Some(cluster) => cluster,
                None => {
                    let layout = self.next_layout;
                    self.next_layout += 1;
                    self.clusters.entry(c.name.clone()).or_insert(Cluster { layout, ..Cluster::default() })
                }
            };
            let mut stale = route.index.len() != c.endpoints.len();
            if !stale && route.layout == cluster.layout {
                cluster.endpoints.warm(&route.index, id);
            }
            for (i, e) in c.endpoints.iter().enumerate() {
                let endpoint =
                    match route.lookup(cluster.layout, i, &e.address).filter(|at| *at < cluster.endpoints.len()) {
                        Some(at) => {
                            let endpoint = cluster.endpoints.at(at);
                            debug_assert_eq!(endpoint.address, e.address, "a route outlived its layout");
                            endpoint
                        }
                        None => {
                            stale = true;
                            cluster.endpoints.get_or_insert(&e.address)
                        }
                    };
                for (other, until) in superseded.iter().flatten() {
                    if let Some(o) = endpoint.obs.get_mut(other) {
                        o.expires_us = o.expires_us.min(*until);
                    }
                }
                match endpoint.obs.get_mut(&id) {
                    Some(o) => o.update(e, report.incarnation, interval_us, expires_us, now_us),
                    None => {
                        endpoint.obs.insert(id, Observation::first(e, report.incarnation, expires_us, now_us));
                        self.observations += 1;
                    }
                }
            }
            if stale {
                route.rebuild(cluster.layout, &cluster.endpoints, c.endpoints.iter().map(|e| e.address.as_str()));
            }
        }
        if let Some(r) = self.reporters.get_mut(&report.reporter).and_then(|list| list.first_mut()) {
            r.routes = routes;
        }
        Ok(())
    }

    /// Check the caps before touching anything. Exact counting only when a cap is within reach.
    fn admit(&self, report: &Report) -> Result<(), Rejection> {
        let p = &self.params;
        let known = self.reporter(&report.reporter, Some(report.incarnation));
        if known.is_none() && self.reporter_count >= p.max_reporters {
            return Err(Rejection::TooManyReporters);
        }
        let in_report: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
        if self.clusters.len() + report.clusters.len() > p.max_clusters {
            let new = report.clusters.iter().filter(|c| !self.clusters.contains_key(&c.name)).count();
            if self.clusters.len() + new > p.max_clusters {
                return Err(Rejection::TooManyClusters);
            }
        }
        let mut new_obs = 0usize;
        let near_obs_cap = self.observations + in_report > p.max_observations;
        for c in &report.clusters {
            let cluster = self.clusters.get(&c.name);
            let existing = cluster.map_or(0, |cl| cl.endpoints.len());
            if existing + c.endpoints.len() <= p.max_endpoints_per_cluster && !near_obs_cap {
                continue;
            }
            let mut new_endpoints = 0usize;
            for e in &c.endpoints {
                match cluster.and_then(|cl| cl.endpoints.get(&e.address)) {
                    None => {
                        new_endpoints += 1;
                        new_obs += 1;
                    }
                    Some(endpoint) => {
                        if known.is_none_or(|r| !endpoint.obs.contains_key(&r.id)) {
                            new_obs += 1;
                        }
                    }
                }
            }
            if existing + new_endpoints > p.max_endpoints_per_cluster {
                return Err(Rejection::TooManyEndpoints);
            }
        }
        if near_obs_cap && self.observations + new_obs > p.max_observations {
            return Err(Rejection::TooManyObservations);
        }
        Ok(())
    }

    /// CPU utilisation of an endpoint IP from the metrics store (applies to every port of that IP).
    /// Non-finite or negative values are ignored; new IPs beyond `max_cpu_entries` are ignored.
    pub fn set_external_cpu(&mut self, ip: IpAddr, cpu: f64, now_us: u64) {
        if !cpu.is_finite() || !(0.0..=wire::MAX_CPU).contains(&cpu) {
            return;
        }
        if self.external_cpu.len() >= self.params.max_cpu_entries && !self.external_cpu.contains_key(&ip) {
            return;
        }
        self.external_cpu.insert(ip, (cpu, now_us));
    }

    /// The external CPU of an IP and when it was set.
    pub fn external_cpu(&self, ip: IpAddr) -> Option<(f64, u64)> {
        self.external_cpu.get(&ip).copied()
    }

    /// Names of the clusters, so a caller may recompute them one at a time (and yield between).
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    /// Recompute weights of every cluster.
    pub fn recompute(&mut self, now_us: u64) {
        let names: Vec<String> = self.cluster_names();
        for name in names {
            self.recompute_cluster(&name, now_us);
        }
    }

    /// Recompute the weights of one cluster (no-op if unknown). O(observations of the cluster).
    pub fn recompute_cluster(&mut self, name: &str, now_us: u64) {
        let WeightBook { params: p, clusters, external_cpu, scratch: s, .. } = self;
        let Some(cluster) = clusters.get_mut(name) else { return };
        let dt_us = cluster.computed_at_us.map_or(f64::INFINITY, |t| now_us.saturating_sub(t) as f64);
        s.raw.clear();
        s.cpu_raw.clear();
        let (mut by_cpu_count, mut rated_count) = (0usize, 0usize);
        for endpoint in cluster.endpoints.iter_mut() {
            let m = merge_endpoint(endpoint, p, s, external_cpu, now_us);
            endpoint.learn(&m, p, dt_us);
            let has_external = endpoint.ip.is_some_and(|ip| external_cpu.contains_key(&ip));
            endpoint.record_rates(has_external, &m, p, dt_us, now_us);
            // ORCA utilisation is the endpoint's over about the last report interval, like the
            // reporters' windows; a metrics-store value averages over `cpu_window_us`: divide it
            // into the rates over that same window.
            let by_cpu = m
                .cpu
                .map(|(cpu, source, at)| match source {
                    "metrics" => {
                        (cpu, endpoint.rates_over(at.saturating_sub(p.cpu_window_us), at).unwrap_or((m.qps, m.eps)))
                    }
                    _ => (cpu, (m.qps, m.eps)),
                })
                .filter(|(cpu, (qps, _))| *cpu >= p.min_cpu && *qps > 0.0 && *qps >= p.min_qps_for_cpu)
                .map(|(cpu, (qps, eps))| qps / (cpu + p.error_penalty * eps / qps))
                .filter(|v| v.is_finite() && *v > 0.0);
            by_cpu_count += by_cpu.is_some() as usize;
            rated_count += (by_cpu.is_some() || endpoint.service_us.is_some()) as usize;
            s.cpu_raw.push(by_cpu);
            endpoint.decision = Some(m.into_decision(endpoint));
        }
        // One method per cluster (raw capacities in different units must not be compared): CPU when
        // at least half of the endpoints that can be rated at all can be rated by CPU.
        let use_cpu = by_cpu_count > 0 && by_cpu_count * 2 >= rated_count;
        let median_concurrency = {
            s.sorted.clear();
            s.sorted.extend(cluster.endpoints.iter().filter_map(|e| e.concurrency));
            median(&mut s.sorted).unwrap_or(1.0)
        };
        for (endpoint, by_cpu) in cluster.endpoints.iter_mut().zip(&s.cpu_raw) {
            let (raw, method) = if use_cpu {
                (*by_cpu, Method::Cpu)
            } else {
                let k = endpoint.concurrency.unwrap_or(median_concurrency);
                let errors = endpoint.error_ratio.clamp(0.0, 1.0);
                let per_request_us = |s_us: f64| s_us + p.failure_cost_us * errors;
                (
                    endpoint
                        .service_us
                        .filter(|s| *s > 0.0)
                        .map(|s_us| k * 1e6 * (1.0 - errors) / per_request_us(s_us)),
                    Method::Latency,
                )
            };
            let raw = raw.filter(|v| v.is_finite() && *v > 0.0);
            let raw = match raw {
                Some(r) => {
                    endpoint.last_raw = Some((r, method, now_us));
                    Some(r)
                }
                None => endpoint
                    .last_raw
                    .filter(|(_, m, at)| *m == method && now_us.saturating_sub(*at) <= p.capacity_hold_us)
                    .map(|(r, _, _)| r),
            };
            let k = endpoint.concurrency.unwrap_or(median_concurrency);
            let backlog = endpoint.decision.as_ref().map_or(0.0, |d| (d.inflight - k).max(0.0));
            s.raw.push(raw.map(|r| drained(r, backlog, p)));
            if let Some(d) = endpoint.decision.as_mut() {
                d.capacity = raw;
                d.method = if raw.is_some() { method } else { Method::Median };
                d.backlog = backlog;
            }
        }
        // Targets: raw / mean raw, at least the floor; endpoints without a raw get the median target.
        let known = s.raw.iter().flatten().count();
        let mean_raw = if known == 0 { 1.0 } else { s.raw.iter().flatten().sum::<f64>() / known as f64 };
        s.sorted.clear();
        s.sorted.extend(s.raw.iter().flatten().map(|r| (r / mean_raw).max(p.floor)));
        let median_target = median(&mut s.sorted).unwrap_or(1.0);
        let alpha = if dt_us.is_finite() { 1.0 - (-dt_us / p.smoothing_us).exp() } else { 1.0 };
        s.desired.clear();
        s.lo_hi.clear();
        for (endpoint, raw) in cluster.endpoints.iter_mut().zip(&s.raw) {
            let target = raw.map_or(median_target, |r| (r / mean_raw).max(p.floor)).max(f64::MIN_POSITIVE);
            if let Some(d) = endpoint.decision.as_mut() {
                d.target = target;
            }
            // Geometric smoothing: log w moves a share alpha of the way to log target.
            let desired = match endpoint.weight {
                Some(w) if w > 0.0 && w.is_finite() => (w.ln() * (1.0 - alpha) + target.ln() * alpha).exp(),
                _ => target,
            };
            s.desired.push(if desired.is_finite() && desired > 0.0 { desired } else { 1.0 });
            s.lo_hi.push(normalize::bounds(endpoint.weight, p.max_step, p.floor));
        }
        normalize::normalize(&s.desired, &s.lo_hi, &mut s.out);
        for (endpoint, w) in cluster.endpoints.iter_mut().zip(&s.out) {
            let w = if w.is_finite() && *w >= 0.0 { w.min(wire::MAX_WEIGHT) } else { 1.0 };
            endpoint.weight = Some(w);
            if let Some(d) = endpoint.decision.as_mut() {
                d.weight = w;
            }
            endpoint.prepare_json();
        }
        cluster.generation += 1;
        cluster.computed_at_us = Some(now_us);
    }

    /// The view of `clusters` as seen by `reporter`, i.e. its incarnation that reported last (call
    /// right after `ingest`; peer_inflight excludes that incarnation's own in-flight); unknown clusters are omitted, and so are endpoints not yet recomputed.
    pub fn reply<'a>(&self, reporter: &str, clusters: impl IntoIterator<Item = &'a str>, now_us: u64) -> Reply {
        let asking = self.reporter(reporter, None);
        let mut views = Vec::new();
        for name in clusters {
            let Some(cluster) = self.clusters.get(name) else { continue };
            let endpoints = cluster
                .endpoints
                .iter()
                .filter_map(|e| {
                    let d = e.decision.as_ref()?;
                    Some(EndpointView {
                        address: e.address.clone(),
                        weight: d.weight,
                        inflight: d.inflight,
                        peer_inflight: (d.inflight - e.own_inflight(asking, now_us)).max(0.0),
                        latency_us: d.latency_us,
                        cpu: d.cpu,
                        ejected: d.ejected,
                    })
                })
                .collect();
            views.push(ClusterView { name: name.to_string(), endpoints });
        }
        Reply { version: wire::VERSION, ttl_ms: self.view_ttl_ms(asking), clusters: views }
    }

    /// `serde_json::to_vec(&self.reply(..))`, byte for byte, without building the reply: each
    /// endpoint's JSON was prepared at recompute except `peer_inflight`. The service's hot path.
    pub fn reply_json<'a>(
        &self,
        reporter: &str,
        clusters: impl IntoIterator<Item = &'a str>,
        now_us: u64,
        out: &mut Vec<u8>,
    ) {
        let asking = self.reporter(reporter, None);
        out.extend_from_slice(b"{\"version\":");
        write_json(out, &wire::VERSION);
        out.extend_from_slice(b",\"ttl_ms\":");
        write_json(out, &self.view_ttl_ms(asking));
        out.extend_from_slice(b",\"clusters\":[");
        let mut first_cluster = true;
        for name in clusters {
            let Some(cluster) = self.clusters.get(name) else { continue };
            if !std::mem::take(&mut first_cluster) {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            write_json(out, &name);
            out.extend_from_slice(b",\"endpoints\":[");
            let mut first = true;
            for e in cluster.endpoints.iter() {
                let Some(d) = e.decision.as_ref() else { continue };
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                let (head, tail) = e.json.split_at(e.json_split);
                out.extend_from_slice(head);
                write_json(out, &(d.inflight - e.own_inflight(asking, now_us)).max(0.0));
                out.extend_from_slice(tail);
            }
            out.extend_from_slice(b"]}");
        }
        out.extend_from_slice(b"]}");
    }

    /// A live incarnation of `name`: `incarnation`'s, or (None) the one that reported last.
    fn reporter(&self, name: &str, incarnation: Option<u64>) -> Option<&Reporter> {
        let list = self.reporters.get(name)?;
        match incarnation {
            Some(i) => list.iter().find(|r| r.incarnation == i),
            None => list.first(),
        }
    }

    fn view_ttl_ms(&self, asking: Option<&Reporter>) -> u32 {
        let p = &self.params;
        let interval_us = asking.map_or(1_000_000, |r| r.interval_us);
        let ttl_us = ((interval_us as f64 * p.view_ttl_intervals) as u64).max(p.min_view_ttl_us);
        (ttl_us / 1_000).min(u64::from(u32::MAX)) as u32
    }

    /// What the last recompute decided, for all clusters or one (sorted by name).
    pub fn decisions(&self, cluster: Option<&str>) -> Vec<ClusterDecision> {
        let mut out: Vec<ClusterDecision> = self
            .clusters
            .iter()
            .filter(|(name, _)| cluster.is_none_or(|c| c == name.as_str()))
            .map(|(name, c)| ClusterDecision {
                name: name.clone(),
                generation: c.generation,
                computed_at_us: c.computed_at_us.unwrap_or(0),
                endpoints: {
                    let mut d: Vec<EndpointDecision> = c.endpoints.iter().filter_map(|e| e.decision.clone()).collect();
                    d.sort_by(|a, b| a.address.cmp(&b.address));
                    d
                },
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Drop reporters silent for longer than their ttl, what they said, endpoints nobody reports,
    /// empty clusters, and CPU values too old to be used.
    pub fn expire(&mut self, now_us: u64) {
        for name in self.cluster_names() {
            self.expire_cluster(&name, now_us);
        }
        self.expire_reporters(now_us);
    }

    /// Expire what was said about one cluster (and the cluster if nothing is left), so a caller can
    /// spread the work of `expire` like that of `recompute`.
    pub fn expire_cluster(&mut self, name: &str, now_us: u64) {
        let Some(cluster) = self.clusters.get_mut(name) else { return };
        let mut removed = 0usize;
        let moved = cluster.endpoints.retain(|e| {
            let before = e.obs.len();
            e.obs.retain(|_, o| o.expires_us > now_us);
            removed += before - e.obs.len();
            if e.obs.capacity() > 4 * e.obs.len().max(4) {
                e.obs.shrink_to_fit();
            }
            !e.obs.is_empty()
        });
        if moved {
            cluster.layout = self.next_layout;
            self.next_layout += 1;
        }
        if cluster.endpoints.is_empty() {
            self.clusters.remove(name);
        }
        self.observations -= removed.min(self.observations);
    }

    /// The rest of `expire`: silent reporters and old CPU values (O(reporters + CPU entries)).
    pub fn expire_reporters(&mut self, now_us: u64) {
        let mut count = 0usize;
        self.reporters.retain(|_, list| {
            list.retain(|r| r.expires_us > now_us);
            count += list.len();
            !list.is_empty()
        });
        self.reporter_count = count;
        let max_age = self.params.cpu_max_age_us;
        self.external_cpu.retain(|_, (_, at)| now_us.saturating_sub(*at) <= max_age);
        if self.reporters.capacity() > 4 * self.reporters.len().max(64) {
            self.reporters.shrink_to_fit();
        }
        if self.clusters.capacity() > 4 * self.clusters.len().max(64) {
            self.clusters.shrink_to_fit();
        }
        if self.external_cpu.capacity() > 4 * self.external_cpu.len().max(64) {
            self.external_cpu.shrink_to_fit();
        }
    }
}

/// Append `value` as JSON (serde_json's own formatting, so replies match `to_vec(&reply)` exactly).
fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing numbers and strings into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

impl Endpoint {
    /// The asking reporter's counted in-flight requests here (0 if it has none or is not live).
    fn own_inflight(&self, asking: Option<&Reporter>, now_us: u64) -> f64 {
        asking.and_then(|r| self.obs.get(&r.id)).filter(|o| o.expires_us > now_us).map_or(0.0, |o| o.counted_inflight)
    }

    /// Render this endpoint's reply JSON except `peer_inflight`, in `EndpointView`'s field order.
    fn prepare_json(&mut self) {
        let Some(d) = &self.decision else { return };
        let json = &mut self.json;
        json.clear();
        json.extend_from_slice(b"{\"address\":");
        write_json(json, &self.address);
        json.extend_from_slice(b",\"weight\":");
        write_json(json, &d.weight);
        json.extend_from_slice(b",\"inflight\":");
        write_json(json, &d.inflight);
        json.extend_from_slice(b",\"peer_inflight\":");
        self.json_split = json.len();
        let tail = json;
        tail.extend_from_slice(b",\"latency_us\":");
        write_json(tail, &d.latency_us);
        if let Some(cpu) = d.cpu {
            tail.extend_from_slice(b",\"cpu\":");
            write_json(tail, &cpu);
        }
        tail.extend_from_slice(b",\"ejected\":");
        write_json(tail, &d.ejected);
        tail.push(b'}');
    }

    fn new(address: &str) -> Self {
        Endpoint {
            address: address.to_string(),
            ip: address.parse::<SocketAddr>().ok().map(|a| a.ip()),
            obs: IdMap::default(),
            service_us: None,
            concurrency: None,
            error_ratio: 0.0,
            ejected: false,
            weight: None,
            last_raw: None,
            decision: None,
            history: std::collections::VecDeque::new(),
            json: Vec::new(),
            json_split: 0,
        }
    }

    /// Count this recompute's merged rates into `history` (cleared while no metrics-store CPU).
    fn record_rates(&mut self, keep: bool, m: &Merged, p: &WeightParams, dt_us: f64, now_us: u64) {
        if !keep {
            if !self.history.is_empty() {
                self.history = std::collections::VecDeque::new();
            }
            return;
        }
        let (requests, errors) = match self.history.back() {
            // The merged rates cover about the last interval; a long gap counts as that gap.
            Some(&(_, r, e)) if dt_us.is_finite() => (r + m.qps * dt_us / 1e6, e + m.eps.min(m.qps) * dt_us / 1e6),
            Some(&(_, r, e)) => (r, e),
            None => (0.0, 0.0),
        };
        let spacing = p.cpu_window_us / 32;
        let n = self.history.len();
        if n >= 2 && now_us.saturating_sub(self.history[n - 2].0) < spacing {
            self.history[n - 1] = (now_us, requests, errors);
        } else {
            self.history.push_back((now_us, requests, errors));
        }
        // Keep one entry at or before a window ago.
        let horizon = now_us.saturating_sub(p.cpu_window_us);
        while self.history.len() > 2 && self.history[1].0 <= horizon {
            self.history.pop_front();
        }
    }

    /// Requests and errors per second over [from, to] (clipped to the history; None if it covers
    /// less than a second of it).
    fn rates_over(&self, from_us: u64, to_us: u64) -> Option<(f64, f64)> {
        let (first, last) = (self.history.front()?, self.history.back()?);
        let (from, to) = (from_us.max(first.0), to_us.min(last.0));
        if to < from.saturating_add(1_000_000) {
            return None;
        }
        let at = |t: u64| -> (f64, f64) {
            let i = self.history.partition_point(|h| h.0 < t);
            match (i.checked_sub(1).and_then(|j| self.history.get(j)), self.history.get(i)) {
                (Some(a), Some(b)) if b.0 > a.0 => {
                    let f = (t - a.0) as f64 / (b.0 - a.0) as f64;
                    (a.1 + (b.1 - a.1) * f, a.2 + (b.2 - a.2) * f)
                }
                (_, Some(b)) => (b.1, b.2),
                (Some(a), None) => (a.1, a.2),
                (None, None) => (0.0, 0.0),
            }
        };
        let ((r0, e0), (r1, e1)) = (at(from), at(to));
        let secs = (to - from) as f64 / 1e6;
        Some(((r1 - r0) / secs, (e1 - e0) / secs))
    }

    /// Fold one recompute's merged numbers into the slow state: error ratio and ejection, service
    /// time, concurrency.
    fn learn(&mut self, m: &Merged, p: &WeightParams, dt_us: f64) {
        let dt = if dt_us.is_finite() { dt_us } else { 1_000_000.0 };
        let window_requests = m.qps * dt / 1e6;
        if window_requests >= p.eject_min_requests && m.qps > 0.0 {
            let a = (-dt / p.error_decay_us).exp();
            let sample = (m.eps / m.qps).clamp(0.0, 1.0);
            self.error_ratio = if self.weight.is_none() { sample } else { self.error_ratio * a + sample * (1.0 - a) };
        } else if m.qps == 0.0 {
            self.error_ratio *= (-dt / p.error_fade_us).exp();
        }
        if self.error_ratio >= p.eject_ratio {
            self.ejected = true;
        } else if self.error_ratio < p.eject_ratio / 2.0 {
            self.ejected = false;
        }
        if let Some(latency) = m.latency_us.filter(|l| *l > 0.0) {
            let s = match self.service_us {
                Some(s) if latency > s => s + (latency - s) * (1.0 - (-dt / p.service_rise_us).exp()),
                _ => latency,
            };
            self.service_us = Some(s);
            // Little's law while queueing: requests in service = throughput x service time.
            if latency > p.saturation_factor * s && m.qps > 0.0 {
                let k = (m.qps * s / 1e6).max(1.0);
                let a = (-dt / p.concurrency_decay_us).exp();
                self.concurrency = Some(match self.concurrency {
                    Some(old) => old * a + k * (1.0 - a),
                    None => k,
                });
            }
        }
    }
}

/// Capacity left for new requests while `backlog` requests wait: the rate that clears them within
/// `backlog_drain` comes off, down to 1% of the capacity (why: the module docs, step 2). The
/// in-flight sum is seconds old: it acts through the smoothed, step-bounded weights, never on
/// single requests.
fn drained(capacity: f64, backlog: f64, p: &WeightParams) -> f64 {
    if p.backlog_drain_us <= 0.0 {
        return capacity;
    }
    (capacity - backlog * 1e6 / p.backlog_drain_us).max(0.01 * capacity)
}

/// One endpoint's numbers merged over its live reporters.
struct Merged {
    qps: f64,
    eps: f64,
    inflight: f64,
    latency_us: Option<f64>,
    /// Utilisation, its source, and when it was measured (the end of its window).
    cpu: Option<(f64, &'static str, u64)>,
    reporters: usize,
}

impl Merged {
    fn into_decision(self, e: &Endpoint) -> EndpointDecision {
        EndpointDecision {
            address: e.address.clone(),
            weight: e.weight.unwrap_or(1.0),
            method: Method::Median,
            capacity: None,
            backlog: 0.0,
            target: 1.0,
            qps: self.qps,
            eps: self.eps,
            inflight: self.inflight,
            latency_us: self.latency_us.map_or(0, |l| l.round().min(wire::MAX_LATENCY_US as f64) as u64),
            service_time_us: e.service_us,
            concurrency: e.concurrency,
            cpu: self.cpu.map(|(c, _, _)| c),
            cpu_source: self.cpu.map(|(_, s, _)| s),
            error_ratio: e.error_ratio,
            ejected: e.ejected,
            reporters: self.reporters,
        }
    }
}

fn merge_endpoint(
    e: &mut Endpoint,
    p: &WeightParams,
    s: &mut Scratch,
    external_cpu: &HashMap<IpAddr, (f64, u64)>,
    now_us: u64,
) -> Merged {
    s.qps.clear();
    s.eps.clear();
    s.inflight.clear();
    s.active.clear();
    s.ids.clear();
    for (id, o) in &e.obs {
        if o.expires_us <= now_us {
            continue;
        }
        let (qps, eps) = if o.window_until_us > now_us { (o.qps, o.eps) } else { (0.0, 0.0) };
        s.ids.push(*id);
        s.qps.push(qps);
        s.eps.push(eps);
        s.inflight.push(f64::from(o.inflight));
        s.active.push(qps > 0.0 || o.inflight > 0);
    }
    let reporters = s.ids.len();
    let qps = clip_contributions(&mut s.qps, &s.active, p.sum_clip);
    let eps = clip_contributions(&mut s.eps, &s.active, p.sum_clip).min(qps);
    let inflight = clip_contributions(&mut s.inflight, &s.active, p.sum_clip);
    for (id, counted) in s.ids.iter().zip(&s.inflight) {
        if let Some(o) = e.obs.get_mut(id) {
            o.counted_inflight = *counted;
        }
    }
    // Latency: each reporter's mean over its last window, voting with its successes; without
    // successes there, its recent peak-EWMA with one vote.
    s.votes.clear();
    for o in e.obs.values().filter(|o| o.expires_us > now_us) {
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
    let latency_us = capped_median(&mut s.votes, p.vote_cap);
    // ORCA CPU: fresh samples vote with their request rate (at least 1); the freshest stamp dates it.
    s.votes.clear();
    let mut orca_at = 0u64;
    for o in e.obs.values().filter(|o| o.expires_us > now_us) {
        if let Some((cpu, at)) = o.cpu {
            if now_us.saturating_sub(at) <= p.cpu_max_age_us {
                let qps = if o.window_until_us > now_us { o.qps } else { 0.0 };
                s.votes.push(Vote { value: cpu, weight: qps.max(1.0) });
                orca_at = orca_at.max(at);
            }
        }
    }
    let orca = capped_median(&mut s.votes, p.vote_cap).map(|c| (c, orca_at));
    let external =
        e.ip.and_then(|ip| external_cpu.get(&ip).copied())
            .filter(|(_, at)| now_us.saturating_sub(*at) <= p.cpu_max_age_us);
    let cpu = match (orca, external) {
        (Some((o, oat)), Some((x, xat))) => Some(if oat >= xat { (o, "orca", oat) } else { (x, "metrics", xat) }),
        (Some((o, oat)), None) => Some((o, "orca", oat)),
        (None, Some((x, xat))) => Some((x, "metrics", xat)),
        (None, None) => None,
    };
    Merged { qps, eps, inflight, latency_us, cpu, reporters }
}

impl Observation {
    fn first(e: &wire::EndpointReport, incarnation: u64, expires_us: u64, now_us: u64) -> Self {
        let mut o = Observation {
            incarnation,
            requests: e.requests,
            errors: e.errors,
            latency_sum_us: e.latency_sum_us,
            window_start_us: now_us,
            window_until_us: 0,
            qps: 0.0,
            eps: 0.0,
            successes: 0,
            mean_latency_us: None,
            inflight: 0,
            ewma: None,
            cpu: None,
            expires_us,
            counted_inflight: 0.0,
        };
        o.instant(e, expires_us, now_us);
        o
    }

    /// Take the differences since the window started (if it is long enough), or start again after
    /// a reset (new incarnation, or a counter that went down).
    fn update(&mut self, e: &wire::EndpointReport, incarnation: u64, interval_us: u64, expires_us: u64, now_us: u64) {
        let reset = incarnation != self.incarnation
            || e.requests < self.requests
            || e.errors < self.errors
            || e.latency_sum_us < self.latency_sum_us;
        let elapsed = now_us.saturating_sub(self.window_start_us);
        if reset {
            self.incarnation = incarnation;
            self.restart(e, now_us);
        } else if elapsed >= interval_us / 2 && elapsed > 0 {
            let dt_s = elapsed as f64 / 1e6;
            let d_requests = e.requests - self.requests;
            let d_errors = e.errors - self.errors;
            let d_successes = d_requests.saturating_sub(d_errors);
            let d_latency = e.latency_sum_us - self.latency_sum_us;
            self.qps = d_requests as f64 / dt_s;
            self.eps = d_errors as f64 / dt_s;
            self.successes = d_successes;
            self.mean_latency_us =
                (d_successes > 0).then(|| (d_latency as f64 / d_successes as f64).min(wire::MAX_LATENCY_US as f64));
            self.window_until_us = now_us.saturating_add(interval_us.saturating_mul(2));
            self.restart(e, now_us);
        }
        // else: too soon after the last window (a duplicate or a burst): keep accumulating.
        self.instant(e, expires_us, now_us);
    }

    fn restart(&mut self, e: &wire::EndpointReport, now_us: u64) {
        (self.requests, self.errors, self.latency_sum_us, self.window_start_us) =
            (e.requests, e.errors, e.latency_sum_us, now_us);
    }

    /// The values that are not counters: in flight now, latency estimate, ORCA CPU.
    fn instant(&mut self, e: &wire::EndpointReport, expires_us: u64, now_us: u64) {
        self.inflight = e.inflight;
        self.expires_us = expires_us;
        self.ewma = (e.latency_ewma_us > 0)
            .then(|| (e.latency_ewma_us as f64, now_us.saturating_sub(e.latency_age_ms.saturating_mul(1_000))));
        self.cpu = match (e.cpu, e.cpu_age_ms) {
            (Some(cpu), age) if cpu.is_finite() && cpu >= 0.0 => {
                Some((cpu, now_us.saturating_sub(age.unwrap_or(0).saturating_mul(1_000))))
            }
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests;
