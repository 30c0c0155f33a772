//! tailweight's proxy-wasm shell: the module Envoy loads in every sidecar (one VM per worker
//! thread). It binds the proxy-wasm ABI by hand (`abi`), implements the sidecar's host traits over
//! it (`host`), and routes Envoy's callbacks to one `tailweight_sidecar::Plugin` per root context
//! and its streams (`dispatch`, `contexts`). Every decision is tailweight-sidecar's and
//! tailweight-picker's; nothing here but the host.
//!
//! Natively only the host-free modules build (context bookkeeping, the environment, header pairs),
//! for their unit
//! tests (`make test-unit`); the host glue builds for wasm32 only.

// Natively only the host-free modules build, and nothing calls them there but their tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod contexts;
mod environ;
mod pairs;

// The host glue, for wasm32 only. One `cfg` per module, not a macro stating the list once:
// modules declared by a macro are invisible to rustfmt and to tools/rust_structure.py.
#[cfg(target_arch = "wasm32")]
mod abi;
#[cfg(target_arch = "wasm32")]
mod dispatch;
#[cfg(target_arch = "wasm32")]
mod host;

// No logger: the sidecar logs through `Host::log`; a panic's place and message reach Envoy's log
// through the hook `dispatch::_initialize` sets.
