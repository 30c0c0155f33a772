//! tailweight-weights: the aggregator's weight book. What every reporter said about every
//! endpoint, merged into one capacity weight per endpoint, and the reply each reporter gets back.
//! Pure: time is an argument (microseconds), no I/O.
//!
//! Who runs it: the aggregator (tailweight-aggregator, the thin service around it), the simulator
//! (one simulated aggregator), the aggregator's load generator (its in-process timing) and the fuzz
//! targets. Never the sidecar.
//!
//! A reporter is a (principal, name, incarnation): the principal is the identity the caller vouches
//! for (`WeightBook::ingest_as`), and however many names and incarnations it uses it is one voice
//! (`consensus.rs`) holding at most `principal_share` of each cap and of `max_bytes` (`memory.rs`;
//! a report that would pass one is refused whole: `admission.rs`).
//! Each incarnation keeps its own counters, so processes sharing a name (a sidecar without a
//! usable node id) are counted apart, not differenced into each other. A new incarnation of a name
//! the principal uses cuts its other incarnations' ttl to one of their intervals (a restart's old
//! self fades once the new one has a window; a live twin renews itself by reporting). A reporter's rates
//! count for two of its intervals after their window closed (`observation.rs`): after that they are
//! unknown, never an old value paired with fresh CPU.
//!
//! [`WeightBook::recompute_cluster`] runs these steps for each endpoint of a cluster
//! (`recompute.rs`; reporters silent past their ttl no longer count):
//! 1. Merge the live reporters robustly, each principal's first (`merge.rs`): request, error and
//!    in-flight rates are sums whose contributions are clipped at `sum_clip` x the largest other
//!    active reporter's; latency and ORCA CPU are weighted medians whose votes are capped at
//!    `vote_cap` x the other votes. Once the cluster's endpoints attest what they served per
//!    source principal (`WeightBook::attest`, `evidence.rs`), only proven callers count, each up to
//!    what it was served (`callers.rs`). Then across principals (`consensus.rs`): with three or more,
//!    one vote each (medians, the consensus split); endpoints fewer than half of them report stay
//!    out of the cluster's normalisation in steps 3 and 4, and so do endpoints no reporter has
//!    sent a request to for `quiet_uncounted_us` (ones that left the cluster: `traffic.rs`).
//! 2. Learn the slow state from the merged numbers: the smoothed error ratio, which ejects the
//!    endpoint at `eject_ratio` and readmits it below half of that (`ejection.rs`); the service time
//!    and the concurrency of the latency path (`latency_model.rs`).
//! 3. Raw capacity in requests per second (`capacity.rs`):
//!    - CPU known (metrics store or ORCA, whichever is fresher) and traffic seen: Envoy's
//!      client-side WRR weight `qps / (cpu + error_penalty x eps / qps)`, throughput per unit of
//!      CPU with both measured over the same window (`rate_history.rs` for a metrics-store value).
//!    - Otherwise latency and Little's law: `k x success / (service + failure_cost x errors)`, with
//!      `k` the learned concurrency.
//!    - A standing queue is work already owed: `backlog / backlog_drain` requests per second come
//!      off the capacity so new requests go elsewhere until it drains.
//!
//!    A cluster uses one method for all endpoints (the one most endpoints with traffic support);
//!    an endpoint it cannot rate this time keeps its last capacity by that method for
//!    `capacity_hold_us`, or, while it is not failing (not ejected, error ratio below a quarter of
//!    `eject_ratio`), the last one it was rated with while it answered without errors, for
//!    `healthy_capacity_hold_us` (`held_capacity.rs`); then it gets the median target, as Envoy's
//!    CSWRR gives unweighted hosts.
//! 4. Target = raw / mean raw, at least `floor`, smoothed geometrically toward (`smoothing.rs`);
//!    then `normalize.rs`: mean 1, each weight within a factor `max_step` of its previous value,
//!    never below `floor`.
//! 5. Publish: the weights go into the decisions and the cluster's reply view (`published.rs`),
//!    whose in-flight counts are the reporters' last ones or their mean over the window
//!    (`view_inflight.rs`); each reply is planned from it under the book's lock and written after
//!    (`reply_plan.rs`).
//!
//! What lying reporters and principals can and cannot do to these numbers, and why:
//! docs/weights.md. Whatever is reported, each weight moves at most x`max_step` per recompute and
//! stays >= `floor`.

mod admission;
mod book;
mod callers;
mod capacity;
mod consensus;
mod decision;
mod ejection;
mod evidence;
mod expiry;
mod fair_room;
mod held_capacity;
mod ingest;
mod latency_model;
mod memory;
mod merge;
mod normalize;
mod observation;
mod params;
mod published;
mod rate_history;
mod recompute;
mod record;
mod rejection;
mod reply_plan;
mod route;
mod smoothing;
mod traffic;
mod view_inflight;

pub use book::{Counts, WeightBook, TRUSTED_PRINCIPAL};
pub use capacity::cswrr_weight;
pub use decision::{ClusterDecision, EndpointDecision, Method};
pub use merge::{capped_median, clip_contributions, Vote};
pub use params::{ParamsError, WeightParams};
pub use rejection::Rejection;
pub use reply_plan::ReplyPlan;
pub use view_inflight::{UnknownViewInflight, ViewInflight};

#[cfg(test)]
mod tests;
