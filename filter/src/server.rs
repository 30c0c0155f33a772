//! The server role (`"role": "server"`, the destination's own sidecar, inbound): each response
//! leaves with `x-tailweight-load: 1;rif=<n>`, n the requests in flight at this endpoint right
//! after it (see `tailweight_wire::stamp`, and `stamper` and `tailweight_picker::server_inflight`
//! for how the workers' counts are combined). A request counts from its request headers until its response headers, or until
//! `on_log` (called once per stream, also on resets) when it got none. With `attest_clusters`, each
//! finished request is counted for its source principal and attested (`attester`). The role never
//! steers and never reports; a stamp header the application wrote itself is replaced, so only this sidecar
//! speaks for the endpoint.

use crate::direction::check_direction_once;
use crate::host;
use crate::metrics;
use crate::stamper::Stamper;
use crate::state::{PluginState, Shared};
use tailweight_picker::config::FilterRole;
use tailweight_picker::outcome::classify;
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

/// One request through a server-role filter.
pub struct StampedRequest {
    state: Shared,
    /// The in-flight epoch of the request while it counts.
    entered: Option<u64>,
    /// Its source principal, when attesting (None: none known).
    source: Option<String>,
}

impl StampedRequest {
    pub fn new(state: Shared) -> Self {
        StampedRequest { state, entered: None, source: None }
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
            self.source = s.attester.as_mut().and_then(|a| a.source_of_request());
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

    /// Once per stream: it stops counting as in flight (if it got no response headers), and the
    /// attester counts it for its source, failed by the client role's rule (`outcome::classify`).
    pub fn on_log(&mut self) {
        let state = self.state.clone();
        let mut state = state.borrow_mut();
        let PluginState::Stamping(s) = &mut *state else { return };
        self.leave(s, host::now_us());
        if let Some(attester) = &mut s.attester {
            let status = host::property_u64(b"response\0code").map_or(0, |c| c.min(999) as u16);
            let grpc = host::property_u64(b"response\0grpc_status").and_then(|c| u32::try_from(c).ok());
            let failed = !classify(status, grpc, &attester.grpc_failure_codes).is_success();
            attester.counts.count(self.source.as_deref(), failed);
        }
    }
}
