//! The server role (`"role": "server"`, the destination's own sidecar, inbound): each response
//! leaves with `x-tailweight-load: 1;rif=<n>`, n the requests in flight at this endpoint right
//! after it (see `tailweight_wire::stamp`, and `stamper` and `tailweight_picker::server_inflight`
//! for how the workers' counts are combined). A request counts from its request headers until its response headers, or until
//! `on_log` (called once per stream, also on resets) when it got none. The role never steers and
//! never reports; a stamp header the application wrote itself is replaced, so only this sidecar
//! speaks for the endpoint.

use crate::direction::check_direction_once;
use crate::host;
use crate::metrics;
use crate::stamper::Stamper;
use crate::state::{PluginState, Shared};
use tailweight_picker::config::FilterRole;
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

/// One request through a server-role filter.
pub struct StampedRequest {
    state: Shared,
    /// The in-flight epoch of the request while it counts.
    entered: Option<u64>,
}

impl StampedRequest {
    pub fn new(state: Shared) -> Self {
        StampedRequest { state, entered: None }
    }

    fn leave(&mut self, stamper: &mut Stamper, now_us: u64) {
        if let Some(epoch) = self.entered.take() {
            stamper.load.leave(epoch, now_us);
        }
    }

    pub fn on_request_headers(&mut self) {
        if let PluginState::Stamping(s) = &mut *self.state.borrow_mut() {
            check_direction_once(&mut s.direction_checked, FilterRole::Server);
            self.entered = Some(s.load.enter(host::now_us()));
        }
    }

    pub fn on_response_headers(&mut self) {
        let state = self.state.clone();
        let mut state = state.borrow_mut();
        let PluginState::Stamping(s) = &mut *state else { return };
        self.leave(s, host::now_us());
        if host::response_header(LOAD_STAMP_HEADER).is_some() {
            metrics::inc(s.metrics.replaced);
        }
        // Replaces every value the application may have set (Envoy's setCopy removes them first).
        let stamp = LoadStamp { rif: s.load.requests_in_flight() };
        host::set_response_header(LOAD_STAMP_HEADER, &stamp.header_value());
        metrics::inc(s.metrics.written);
    }

    pub fn on_log(&mut self) {
        if self.entered.is_some() {
            let state = self.state.clone();
            let mut state = state.borrow_mut();
            if let PluginState::Stamping(s) = &mut *state {
                self.leave(s, host::now_us());
            }
        }
    }
}
