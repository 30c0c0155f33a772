//! tailweight proxy-wasm HTTP filter: picks the upstream endpoint of every request and writes it
//! into the header Envoy's `override_host` LB policy reads. The decisions are `tailweight_core`'s;
//! this crate is the glue to the host: contexts, configuration, shared data, metrics, reports.
//! With `"role": "server"` the same module runs in the destination's sidecar and stamps each
//! response with the endpoint's load instead (see `server`).

mod abi;
mod host;
mod http;
mod metrics;
mod probe;
mod reporter;
mod root;
mod server;
mod shared;
mod worker;

// No logger and no panic hook: the filter logs through `host::log`, and a panic's message already
// reaches Envoy's log (std's hook writes it to stderr, which Envoy logs at error level as
// "wasm log tailweight: ... panicked at <file:line>").
