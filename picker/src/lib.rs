//! tailweight-picker: the per-request endpoint pick. Each Envoy worker's `Balancer` keeps what it
//! saw of every endpoint (latency, failures, in flight, health, load stamps), picks each request's
//! endpoint from that and the aggregator's last view, and snapshots its counts for the report.
//!
//! What it implements, and where each idea comes from:
//! - the power of two choices (Mitzenmacher, "The Power of Two Choices in Randomized Load
//!   Balancing", IEEE TPDS 2001), drawn by weight (`balancer`, `cluster`);
//! - a score of expected wait, (in flight + 1) x latency, from a peak-sensitive moving average of
//!   latency (Finagle's Peak EWMA; Envoy's contrib `peak_ewma` policy) (`endpoint`);
//! - probing with server-reported load, comparing a draw with the freshest reported queues
//!   (Wydrowski et al., "Load is not what you should balance: Introducing Prequal", NSDI 2024)
//!   (`stamp_record`, `balancer::choice`);
//! - outlier suspension with probes and a recovery ramp (Envoy's outlier detection and slow start,
//!   done per request in the caller) (`health`, `health_check`);
//! - weights from the aggregator's view of every caller (`cluster::apply_view`).
//!
//! Who runs it: every sidecar, once per Envoy worker (through tailweight-sidecar), and the
//! simulator (tailweight-sim), one per simulated proxy. Pure: no host calls, no I/O, no clock
//! reads: time is an argument (microseconds), so tests and the simulator drive it exactly.
//!
//! The API is this file's re-exports; the modules are private.

mod balancer;
mod cluster;
mod endpoint;
mod health;
mod health_check;
mod inflight;
mod inspect;
mod outcome;
mod own_evidence;
mod params;
mod snapshot;
mod stamp_record;
mod steering;

pub use balancer::learned::LearnedEndpoint;
pub use balancer::{Balancer, Completion, HealthCheckScope, Pick, Settings, DEFAULT_INFLIGHT_BOUND_US};
pub use health::HealthChange;
pub use health_check::{
    check_share, grpc_check_verdict, http_check_verdict, CheckProtocol, CheckRound, CheckVerdict, DueHealthCheck,
    HealthCheckLedger, MAX_PENDING_HEALTH_CHECKS,
};
pub use inflight::Inflight;
pub use inspect::{EndpointInspection, EndpointState};
pub use outcome::{classify, RequestOutcome, ResponseClass};
pub use params::PickParams;
pub use snapshot::{merge as merge_snapshots, Part as SnapshotPart};
