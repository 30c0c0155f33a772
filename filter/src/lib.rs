//! tailweight proxy-wasm HTTP filter: picks the upstream endpoint of every request and writes it
//! into the header Envoy's `override_host` LB policy reads. The decisions are `tailweight_picker`'s;
//! this crate is the glue to the host: contexts, configuration, shared data, metrics, reports.
//! With `"role": "server"` the same module runs in the destination's sidecar and stamps each
//! response with the endpoint's load instead (see `server`), and with `attest_clusters` attests what
//! it served per source principal (see `attester`).
//!
//! Who runs it: Envoy, in every sidecar (one VM per worker thread). The host-free parts (context
//! bookkeeping, header pairs, the shared-data layout, the report digest) also build natively, for
//! their unit tests (`make test-unit`); the host glue builds for wasm32 only.

// Natively only the host-free modules build, and nothing calls them there but their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod contexts;
mod digest;
mod pairs;
mod shared_layout;

// The host glue, for wasm32 only. One `cfg` per module, not a macro stating the list once:
// modules declared by a macro are invisible to rustfmt and to tools/rust_structure.py.
#[cfg(target_arch = "wasm32")]
mod abi;
#[cfg(target_arch = "wasm32")]
mod attester;
#[cfg(target_arch = "wasm32")]
mod direction;
#[cfg(target_arch = "wasm32")]
mod dispatch;
#[cfg(target_arch = "wasm32")]
mod health_checker;
#[cfg(target_arch = "wasm32")]
mod host;
#[cfg(target_arch = "wasm32")]
mod http;
#[cfg(target_arch = "wasm32")]
mod metrics;
#[cfg(target_arch = "wasm32")]
mod probe;
#[cfg(target_arch = "wasm32")]
mod reporter;
#[cfg(target_arch = "wasm32")]
mod root;
#[cfg(target_arch = "wasm32")]
mod server;
#[cfg(target_arch = "wasm32")]
mod shared;
#[cfg(target_arch = "wasm32")]
mod stamper;
#[cfg(target_arch = "wasm32")]
mod state;
#[cfg(target_arch = "wasm32")]
mod worker;

// No logger and no panic hook: the filter logs through `host::log`, and a panic's message already
// reaches Envoy's log (std's hook writes it to stderr, which Envoy logs at error level as
// "wasm log tailweight: ... panicked at <file:line>").
