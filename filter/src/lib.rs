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

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|context_id| Box::new(root::Root::new(context_id)));
}}
