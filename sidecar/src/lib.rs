//! tailweight-sidecar: what a tailweight sidecar does between host calls. The plugin configuration
//! (`config`); the state the workers of one proxy share, its format and each worker's slot in it
//! (`shared`, `shared_layout`, `slot`); the worker's tick (`worker`: publish, fold in siblings and
//! views, elect the reporter); the request life cycle of both roles (`client_request`,
//! `server_request`); reports and the aggregator's replies (`reporter`); out-of-band health checks
//! (`health_checker`); attestations (`attester`, `served_ports`, `served`); the server role's in-flight count
//! (`stamper`, `server_inflight`); metrics.
//!
//! Written against the host traits of `host` and holding no host calls itself: a shell (the
//! proxy-wasm filter, tailweight-filter; a native Envoy dynamic module) implements them and forwards
//! its callbacks to a `Plugin` per worker. Time is read from the host once per callback and passed
//! down as an argument, so the test host (`test_host`, feature `test-host`) drives every state
//! machine deterministically: several workers of one proxy, reconfigurations, lost and late answers.
//!
//! The pick itself is tailweight-picker's.

pub mod config;
pub mod host;
mod plugin;
#[cfg(feature = "test-host")]
pub mod test_host;

mod attester;
mod client_request;
mod digest;
mod direction;
mod health_checker;
mod metrics;
mod reporter;
mod served;
mod served_ports;
mod server_inflight;
mod server_request;
mod shared;
mod shared_layout;
pub mod shared_store;
mod slot;
mod stamper;
mod tick;
mod worker;

pub use config::{ConfigError, FilterConfig, FilterRole};
pub use metrics::PICKS_COUNTER;
pub use plugin::{Plugin, Stream};
pub use slot::{Slot, SlotError, StoredView};
pub use tick::report_period_ms;
pub use worker::SlotHold;
