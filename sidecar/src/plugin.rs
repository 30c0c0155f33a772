//! One worker's plugin: what its configuration made of it, and every callback a shell forwards to
//! it. A shell keeps one `Plugin` per worker (a proxy-wasm root context; a dynamic module's
//! per-worker state) and one `Stream` per HTTP stream, made by the plugin when the stream begins
//! and handed back with each of the stream's callbacks.

use crate::client_request::ClientRequest;
use crate::config::{FilterConfig, FilterRole};
use crate::host::{CallAnswer, CallToken, Exchange, Host, LogLevel};
use crate::metrics::{Counter, CONFIG_ERRORS};
use crate::server_request::ServerRequest;
use crate::stamper::Stamper;
use crate::worker::Worker;

/// What a worker's configuration made of it.
#[derive(Default)]
pub enum Plugin {
    #[default]
    Unconfigured,
    /// Invalid configuration: every request passes untouched.
    Disabled,
    /// Client role: steers, reports, reads load stamps.
    Client(Box<Worker>),
    /// Server role: stamps responses (see `server_request`), attests.
    Server(Box<Stamper>),
}

/// One HTTP stream, by the role its plugin had when the stream began (a stream of another role
/// than the plugin's now, after a reconfiguration, is passed through).
#[derive(Debug)]
pub enum Stream {
    Client(ClientRequest),
    Server(ServerRequest),
}

impl Plugin {
    /// Configure from the plugin configuration's bytes. Always accepts: a configuration error must
    /// not take the listener (and its traffic) down; it is logged and counted, and every request
    /// then passes untouched.
    pub fn configure(&mut self, host: &impl Host, configuration: &[u8]) {
        *self = match FilterConfig::parse(configuration) {
            Ok(config) => {
                host.set_tick_period_ms(config.sync_interval_ms);
                match config.role {
                    FilterRole::Client => Plugin::Client(Box::new(Worker::new(config, host))),
                    FilterRole::Server => Plugin::Server(Box::new(Stamper::new(&config, host))),
                }
            }
            Err(reason) => {
                host.log(
                    LogLevel::Error,
                    &format!("invalid plugin configuration: {reason}; passing traffic through untouched"),
                );
                Counter::define(host, CONFIG_ERRORS).inc(host);
                Plugin::Disabled
            }
        };
    }

    pub fn tick(&mut self, host: &impl Host) {
        match self {
            Plugin::Client(w) => {
                if let Some(period_ms) = w.tick(host, host.now_us()) {
                    host.set_tick_period_ms(period_ms);
                }
            }
            Plugin::Server(s) => s.tick(host, host.now_us()),
            Plugin::Unconfigured | Plugin::Disabled => {}
        }
    }

    /// The answer to call `token` (a health check's, a report's or an attestation's).
    pub fn on_call_answer(&mut self, host: &impl Host, token: CallToken, answer: &impl CallAnswer) {
        match self {
            Plugin::Client(w) => {
                let Worker { reporter, metrics, health_checker, balancer, .. } = &mut **w;
                let now_us = host.now_us();
                if health_checker.as_mut().is_some_and(|c| c.on_answer(host, token, answer, balancer, metrics, now_us))
                {
                    return;
                }
                if let Some(reporter) = reporter {
                    reporter.on_answer(host, token, answer, metrics);
                }
            }
            Plugin::Server(s) => {
                if let Some(attester) = &mut s.attester {
                    attester.on_answer(host, token, answer);
                }
            }
            Plugin::Unconfigured | Plugin::Disabled => {}
        }
    }

    /// A client worker's balancer: what a load balancer of the shell's own picks from (the native
    /// shell's load-balancing policy).
    pub fn balancer(&self) -> Option<&tailweight_picker::Balancer> {
        match self {
            Plugin::Client(w) => Some(&w.balancer),
            Plugin::Server(_) | Plugin::Unconfigured | Plugin::Disabled => None,
        }
    }

    pub fn new_stream(&self) -> Stream {
        match self {
            Plugin::Server(_) => Stream::Server(ServerRequest::default()),
            Plugin::Client(_) | Plugin::Unconfigured | Plugin::Disabled => Stream::Client(ClientRequest::default()),
        }
    }

    pub fn on_request_headers(&mut self, stream: &mut Stream, host: &impl Host, exchange: &mut impl Exchange) {
        match (self, stream) {
            (Plugin::Client(w), Stream::Client(r)) => r.on_request_headers(w, host, exchange),
            (Plugin::Server(s), Stream::Server(r)) => r.on_request_headers(s, host, exchange),
            _ => {}
        }
    }

    pub fn on_response_headers(&mut self, stream: &mut Stream, host: &impl Host, exchange: &mut impl Exchange) {
        match (self, stream) {
            (Plugin::Client(w), Stream::Client(r)) => r.on_response_headers(w, host, exchange),
            (Plugin::Server(s), Stream::Server(r)) => r.on_response_headers(s, host, exchange),
            _ => {}
        }
    }

    /// Once per stream, after its last other callback (also on resets).
    pub fn on_stream_done(&mut self, stream: &mut Stream, host: &impl Host, exchange: &impl Exchange) {
        match (self, stream) {
            (Plugin::Client(w), Stream::Client(r)) => r.on_stream_done(w, host, exchange),
            (Plugin::Server(s), Stream::Server(r)) => r.on_stream_done(s, host, exchange),
            _ => {}
        }
    }
}
