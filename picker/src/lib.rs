//! tailweight-picker: the per-request endpoint pick. Each Envoy worker's `Balancer` keeps what it
//! saw of every endpoint (latency, failures, in flight, health, load stamps), picks each request's
//! endpoint from that and the aggregator's last view, and snapshots its counts for the report.
//! Also the filter's own configuration (`config`), the records Envoy's VMs share (`slot`,
//! `server_inflight`) and the report period (`tick`).
//!
//! Who runs it: the sidecar's proxy-wasm filter (tailweight-filter), once per Envoy worker, and the
//! simulator (tailweight-sim), one per simulated proxy. Pure: no host calls, no I/O, no clock
//! reads: time is an argument (microseconds), so tests and the simulator drive it exactly.

pub mod balancer;
pub mod cluster;
pub mod config;
pub mod endpoint;
pub mod health;
pub mod health_check;
pub mod inflight;
pub mod inspect;
pub mod outcome;
pub mod served;
pub mod server_inflight;
pub mod slot;
pub mod snapshot;
pub mod stamp_record;
pub mod steering;
pub mod tick;

pub use balancer::{Balancer, Completion, Pick, Settings};
pub use config::FilterConfig;
pub use outcome::{RequestOutcome, ResponseClass};
