//! tailweight proxy-wasm HTTP filter: picks the upstream endpoint of every request and writes it
//! into the header Envoy's `override_host` LB policy reads. The decisions are `tailweight_core`'s;
//! this crate is the glue to the host: contexts, configuration, shared data, metrics, reports.
//! With `"role": "server"` the same module runs in the destination's sidecar and stamps each
//! response with the endpoint's load instead (see `server`).

mod host;
mod http;
mod metrics;
mod reporter;
mod root;
mod server;
mod shared;
mod worker;

// No `proxy_wasm::set_log_level`: the filter logs through `host::log`, and a panic's message already
// reaches Envoy's log (std's hook writes it to stderr, which Envoy logs at error level as
// "wasm log tailweight: ... panicked at <file:line>"); the SDK's logger and panic hook cost 2.5 KB.
proxy_wasm::main! {{
    proxy_wasm::set_root_context(|context_id| Box::new(root::Root::new(context_id)));
}}
