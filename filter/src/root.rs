//! The root context of one VM: configuration (fail-open on errors), the tick, aggregator replies,
//! and the HTTP contexts, which share the VM's state through `Shared`.

use crate::abi::LogLevel;
use crate::host;
use crate::http::Request;
use crate::metrics;
use crate::server::{StampedRequest, Stamper};
use crate::worker::Worker;
use std::cell::RefCell;
use std::rc::Rc;
use tailweight_picker::config::FilterRole;
use tailweight_picker::FilterConfig;

#[derive(Default)]
pub enum PluginState {
    #[default]
    Unconfigured,
    /// Invalid configuration: every request passes untouched.
    Disabled,
    /// Client role: steers, reports, reads load stamps.
    Active(Box<Worker>),
    /// Server role: stamps responses (see `server`).
    Stamping(Box<Stamper>),
}

/// One VM is single-threaded: the root and its HTTP contexts share state without locks.
pub type Shared = Rc<RefCell<PluginState>>;

#[derive(Default)]
pub struct Root {
    state: Shared,
}

/// One HTTP stream's context, by the role its root was configured with when the stream began.
pub enum HttpStream {
    Client(Request),
    Server(StampedRequest),
}

impl HttpStream {
    pub fn on_request_headers(&mut self) {
        match self {
            HttpStream::Client(r) => r.on_request_headers(),
            HttpStream::Server(r) => r.on_request_headers(),
        }
    }

    pub fn on_response_headers(&mut self) {
        match self {
            HttpStream::Client(r) => r.on_response_headers(),
            HttpStream::Server(r) => r.on_response_headers(),
        }
    }

    pub fn on_log(&mut self) {
        match self {
            HttpStream::Client(r) => r.on_log(),
            HttpStream::Server(r) => r.on_log(),
        }
    }
}

impl Root {
    pub fn on_http_call_response(&mut self, token: u32, body_size: usize) {
        if let PluginState::Active(w) = &mut *self.state.borrow_mut() {
            let Worker { reporter, metrics, .. } = &mut **w;
            if let Some(reporter) = reporter {
                reporter.on_response(token, body_size, metrics, host::now_us());
            }
        }
    }

    /// Always accepts (the caller answers the host `true`): a configuration error must not take the
    /// listener (and its traffic) down.
    pub fn on_configure(&mut self, configuration_size: usize) {
        let bytes = host::plugin_configuration(configuration_size);
        let state = match FilterConfig::parse(&bytes) {
            Ok(config) => {
                host::set_tick_period_ms(config.sync_interval_ms);
                match config.role {
                    FilterRole::Client => PluginState::Active(Box::new(Worker::new(config))),
                    FilterRole::Server => PluginState::Stamping(Box::new(Stamper::new(&config))),
                }
            }
            Err(reason) => {
                host::log(
                    LogLevel::Error,
                    &format!("invalid plugin configuration: {reason}; passing traffic through untouched"),
                );
                metrics::inc(host::define_counter("tailweight.config_errors"));
                PluginState::Disabled
            }
        };
        *self.state.borrow_mut() = state;
    }

    pub fn on_tick(&mut self) {
        match &mut *self.state.borrow_mut() {
            PluginState::Active(w) => {
                if let Some(period_ms) = w.tick(host::now_us()) {
                    host::set_tick_period_ms(period_ms);
                }
            }
            PluginState::Stamping(s) => s.tick(host::now_us()),
            PluginState::Unconfigured | PluginState::Disabled => {}
        }
    }

    pub fn new_stream(&self) -> HttpStream {
        if matches!(&*self.state.borrow(), PluginState::Stamping(_)) {
            return HttpStream::Server(StampedRequest::new(self.state.clone()));
        }
        HttpStream::Client(Request::new(self.state.clone()))
    }
}

/// On a VM's first request (`checked` false; then set): warn when Envoy's listener direction
/// contradicts the configured role. The role stays as configured: a plain Envoy's listeners have no
/// direction, and the configuration is the operator's word.
pub fn check_direction_once(checked: &mut bool, role: FilterRole) {
    if std::mem::replace(checked, true) {
        return;
    }
    // Envoy 1.40 serves it as `xds.listener_direction`; older hosts as `listener_direction`.
    let direction =
        host::property_u64(b"xds\0listener_direction").or_else(|| host::property_u64(b"listener_direction"));
    let Some(direction) = direction else { return };
    if role.contradicted_by(direction) {
        let listener = if direction == 1 { "an inbound" } else { "an outbound" };
        host::log(
            LogLevel::Warn,
            &format!(
                "role \"{}\" runs on {listener} listener (is the WasmPlugin's `match` mode right?); keeping the \
                 configured role",
                role.name()
            ),
        );
    }
}
