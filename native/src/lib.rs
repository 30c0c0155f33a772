//! tailweight-native: the native shell. The sidecar crate as an Envoy dynamic module, an HTTP filter
//! that picks each request's endpoint with the same code as the proxy-wasm shell and sets it as the
//! stream's upstream override host (no header, no `override_host` policy; Envoy's cluster manager
//! honours it before any load balancer runs, and falls back to the cluster's policy for a host it
//! no longer has), and a load-balancing policy that picks from what the filter learned.
//!
//! Envoy loads `libtailweight_native.so` once per process; the module binds the dynamic-module C
//! ABI by hand (`abi`, `lb_abi`, Envoy 1.40, "v0.2.0"). A filter config (`filter_state`) keeps one
//! plugin per worker, as the Wasm shell keeps one per worker VM; the workers share state in the
//! process's memory (`process_store`); ticks, reports, replies and health checks run on the main
//! thread, woken by the module's own thread (`ticker`, `tick_schedule`) and calling out through the
//! filter config (`callouts`); metrics are the filter config's (`config_metrics`). `hooks` are the
//! filter's exports, `lb_hooks` the policy's: a cluster whose policy is this module is learned from
//! by the filter, not steered (`lb_feed`), and each worker's policy instance chooses with
//! `lb_choice` from that worker's balancer and Envoy's requests in flight.

mod abi;
mod callouts;
mod config_metrics;
mod filter_state;
mod header_snapshot;
mod hooks;
mod host;
mod lb_abi;
mod lb_choice;
mod lb_feed;
mod lb_hooks;
mod process_store;
mod tick_schedule;
mod ticker;
mod unused_hooks;
