//! The root context of one VM: configuration (fail-open on errors), the tick, aggregator replies,
//! and the HTTP contexts, which share the VM's state through `Shared`.

use crate::host;
use crate::http::Request;
use crate::metrics;
use crate::server::{StampedRequest, Stamper};
use crate::worker::Worker;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tailweight_core::config::FilterRole;
use tailweight_core::FilterConfig;

pub enum PluginState {
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

pub struct Root {
    state: Shared,
}

impl Root {
    pub fn new(_context_id: u32) -> Self {
        Root { state: Rc::new(RefCell::new(PluginState::Unconfigured)) }
    }
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        if let PluginState::Active(w) = &mut *self.state.borrow_mut() {
            let Worker { reporter, metrics, .. } = &mut **w;
            if let Some(reporter) = reporter {
                reporter.on_response(token, body_size, metrics, host::now_us());
            }
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _: usize) -> bool {
        let bytes =
            hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX).ok().flatten().unwrap_or_default();
        let state = match FilterConfig::parse(&bytes) {
            Ok(config) => {
                let _ = hostcalls::set_tick_period(Duration::from_millis(config.sync_interval_ms));
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
        // Always accept: a configuration error must not take the listener (and its traffic) down.
        true
    }

    fn on_tick(&mut self) {
        match &mut *self.state.borrow_mut() {
            PluginState::Active(w) => {
                if let Some(period_ms) = w.tick(host::now_us()) {
                    let _ = hostcalls::set_tick_period(Duration::from_millis(period_ms));
                }
            }
            PluginState::Stamping(s) => s.tick(host::now_us()),
            PluginState::Unconfigured | PluginState::Disabled => {}
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        if matches!(&*self.state.borrow(), PluginState::Stamping(_)) {
            return Some(Box::new(StampedRequest::new(self.state.clone())));
        }
        Some(Box::new(Request::new(self.state.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
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
