//! The root context of one VM: configuration (fail-open on errors), the tick, aggregator replies,
//! and the HTTP contexts, which share the VM's state (`state`).

use crate::abi::LogLevel;
use crate::host;
use crate::http::Request;
use crate::metrics;
use crate::server::StampedRequest;
use crate::stamper::Stamper;
use crate::state::{PluginState, Shared};
use crate::worker::Worker;
use tailweight_picker::config::FilterRole;
use tailweight_picker::FilterConfig;

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
        match &mut *self.state.borrow_mut() {
            PluginState::Active(w) => {
                let Worker { reporter, metrics, health_checker, balancer, .. } = &mut **w;
                let now_us = host::now_us();
                if health_checker.as_mut().is_some_and(|c| c.on_response(token, body_size, balancer, metrics, now_us)) {
                    return;
                }
                if let Some(reporter) = reporter {
                    reporter.on_response(token, body_size, metrics, now_us);
                }
            }
            PluginState::Stamping(s) => {
                if let Some(attester) = &mut s.attester {
                    attester.on_response(token);
                }
            }
            PluginState::Unconfigured | PluginState::Disabled => {}
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
