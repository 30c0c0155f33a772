//! tailweight core: pure balancing logic and wire types. No host calls, no I/O, no clock reads:
//! time is an argument (microseconds), so tests and the simulator drive it exactly.
//! Compiled into the proxy-wasm filter, the aggregator and the simulator alike.

pub mod address;
pub mod balancer;
pub mod cluster;
pub mod config;
pub mod endpoint;
pub mod ewma;
pub mod filter_wire;
pub mod hash;
pub mod health;
pub mod inflight;
pub mod json;
pub mod orca;
pub mod outcome;
pub mod rng;
pub mod server_inflight;
pub mod slot;
pub mod snapshot;
pub mod stamp;
pub mod stats;
pub mod steering;
pub mod tick;
pub mod weights;
pub mod wire;

pub use balancer::{Balancer, Completion, Pick, Settings};
pub use config::FilterConfig;
pub use outcome::{RequestOutcome, ResponseClass};
