//! tailweight-sim: a deterministic discrete-event simulator of client proxies, backends and the
//! aggregator, running tailweight's picker and weight book unchanged next to reference implementations
//! of the peers and the ideal central-queue bound. See sim/README.md.

pub mod arrivals;
pub mod cswrr_periods;
pub mod dist;
pub mod engine;
pub mod histogram;
pub mod policy;
pub mod queue;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod server;
pub mod settle;
pub mod setup;
pub mod steady;
pub mod variant;
