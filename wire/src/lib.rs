//! tailweight-wire: every format that crosses a process boundary, and nothing else.
//!
//! - `report`: what a filter tells the aggregator (written by the filter, `report::write`; read by
//!   the aggregator, `report::read`);
//! - `reply`: the aggregator's view back to the filter (written by the aggregator, `reply::write`;
//!   read by the filter, `reply::read`);
//! - `attest`: what a destination's server-role filter tells the aggregator it served, per source
//!   principal (written by the filter, `attest::write`; read by the aggregator, `attest::read`);
//! - `protocol`: the protocol's version, path, headers, value bounds and caps, and the shard
//!   authority; `validate`: the checks both messages share;
//! - `stamp`: the load stamp a server-side filter writes into responses and the client-side one
//!   reads; `orca`: the ORCA load reports backends send;
//! - `address`: the syntax of an endpoint address; `json` and `fields`: the small hand-written JSON
//!   reader and writer the filter uses instead of serde (for its module's size).
//!
//! Who runs it: the sidecar's filter (report writer, reply reader, stamps, ORCA), the aggregator
//! (report reader and reply writer, behind the `serde` feature), the backend emulator (stamps and
//! ORCA), the simulator and the aggregator's load generator. Pure: no host calls, no I/O.

pub mod address;
pub mod attest;
pub mod fields;
pub mod grpc_health;
pub mod json;
pub mod orca;
pub mod protobuf;
pub mod protocol;
pub mod reply;
pub mod report;
pub mod stamp;
pub mod validate;

// Only the round-trip property tests use it, and they read with the aggregator's `serde` side.
#[cfg(all(test, feature = "serde"))]
mod test_support;
