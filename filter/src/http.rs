//! Per request: pick in `on_http_request_headers` (write the override header), note what came back
//! in `on_http_response_headers`, account the outcome in `on_log` (called once per stream, also on
//! resets, so in-flight counts cannot leak).

use crate::host;
use crate::metrics;
use crate::root::{PluginState, Shared};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use tailweight_core::config::is_override_value;
use tailweight_core::orca::{self, OrcaLoad};
use tailweight_core::{Pick, RequestOutcome};

pub struct Request {
    state: Shared,
    /// Set when the request belongs to a cluster we track.
    cluster: Option<String>,
    /// The override header value written (first choice, then retry choices); empty if none.
    steered: String,
    /// The first choice is `steered[..len]` when we steered.
    chosen_len: Option<usize>,
    started_us: u64,
    response: Option<Response>,
}

struct Response {
    at_us: u64,
    status: u16,
    served: Option<String>,
    load: Option<OrcaLoad>,
}

impl Request {
    pub fn new(state: Shared) -> Self {
        Request { state, cluster: None, steered: String::new(), chosen_len: None, started_us: 0, response: None }
    }
}

/// The route's cluster (resolved before our filter runs on the request headers).
fn cluster_name() -> Option<String> {
    let utf8 = |b: Vec<u8>| String::from_utf8(b).ok();
    host::property_at(b"xds\0cluster_name")
        .and_then(utf8)
        .or_else(|| host::property_at(b"cluster_name").and_then(utf8))
        .filter(|c| !c.is_empty())
}

fn served_by() -> Option<String> {
    host::property_str(b"upstream\0address")
}

impl Context for Request {}

impl HttpContext for Request {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        let mut state = self.state.borrow_mut();
        let PluginState::Active(w) = &mut *state else { return Action::Continue };
        let header = w.config.header.as_str();
        let incoming = host::request_header(header);
        if let Some(value) = &incoming {
            if w.config.trust_incoming_header && is_override_value(value) {
                metrics::inc(w.metrics.incoming_header_trusted);
                return Action::Continue;
            }
            metrics::inc(w.metrics.incoming_header_replaced);
        }
        let cluster = match cluster_name() {
            Some(c) if w.config.steers(&c) => c,
            Some(_) => return clear(header, incoming.is_some()),
            None => {
                metrics::inc(w.metrics.untracked);
                return clear(header, incoming.is_some());
            }
        };
        let now = host::now_us();
        let pick = w.balancer.pick(&cluster, now);
        let untracked = matches!(pick, Pick::Untracked);
        match pick {
            Pick::Steer { header: value, first_len } => {
                host::set_request_header(header, &value);
                metrics::inc(w.metrics.picks);
                w.metrics.endpoint_pick(&value[..first_len]);
                self.steered = value;
                self.chosen_len = Some(first_len);
            }
            Pick::Explore => metrics::inc(w.metrics.explorations),
            Pick::NoCandidate => metrics::inc(w.metrics.fallbacks),
            Pick::Untracked => metrics::inc(w.metrics.untracked),
        }
        if self.chosen_len.is_none() && incoming.is_some() {
            host::remove_request_header(header);
        }
        if !untracked {
            self.cluster = Some(cluster);
            self.started_us = now;
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        if self.cluster.is_some() {
            self.response = Some(Response {
                at_us: host::now_us(),
                status: host::response_header(":status").and_then(|s| s.parse().ok()).unwrap_or(0),
                served: served_by(),
                load: host::response_header(orca::HEADER).and_then(|h| orca::parse(&h).ok()),
            });
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        let Some(cluster) = self.cluster.take() else { return };
        // No response headers: reset or timeout before any answer.
        let response = self.response.take().unwrap_or_else(|| Response {
            at_us: host::now_us(),
            status: host::property_u64(b"response\0code").map_or(0, |c| c as u16),
            served: served_by(),
            load: None,
        });
        let outcome = RequestOutcome {
            served: response.served.as_deref(),
            latency_us: response.at_us.saturating_sub(self.started_us),
            failed: response.status == 0 || response.status >= 500,
            load: response.load,
        };
        let mut state = self.state.borrow_mut();
        let PluginState::Active(w) = &mut *state else { return };
        let chosen = self.chosen_len.map(|n| &self.steered[..n]);
        let done = w.balancer.complete(&cluster, chosen, &outcome, response.at_us);
        match done.honoured {
            Some(true) => metrics::inc(w.metrics.honoured),
            Some(false) => metrics::inc(w.metrics.not_honoured),
            None => {}
        }
    }
}

/// Not steering: an override header from outside must not steer either.
fn clear(header: &str, present: bool) -> Action {
    if present {
        host::remove_request_header(header);
    }
    Action::Continue
}
