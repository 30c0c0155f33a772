//! The server role (`"role": "server"`, the destination's own sidecar, inbound): each response
//! leaves with `x-tailweight-load: 1;rif=<n>`, n the requests in flight at this endpoint right
//! after it (see `tailweight_wire::stamp`, and `stamper` and `server_inflight` for how the workers'
//! counts are combined). A request counts from its request headers until its response headers, or
//! until its stream ends (also on resets) when it got none. With `attest_clusters`, each finished
//! request is counted for its source principal and attested (`attester`). The role never steers
//! and never reports; a stamp header the application wrote itself is replaced, so only this
//! sidecar speaks for the endpoint.

use crate::attester::ServedRequest;
use crate::config::FilterRole;
use crate::direction::check_direction_once;
use crate::host::{Attribute, Exchange, HeaderMap, Host};
use crate::stamper::Stamper;
use tailweight_picker::classify;
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

/// One request through a server-role worker.
#[derive(Debug, Default)]
pub struct ServerRequest {
    /// The in-flight epoch of the request while it counts.
    entered: Option<u64>,
    /// Its source principal and local address, when attesting.
    served: ServedRequest,
}

impl ServerRequest {
    fn leave(&mut self, stamper: &mut Stamper, now_us: u64) {
        if let Some(epoch) = self.entered.take() {
            stamper.load.leave(epoch, now_us);
        }
    }

    pub fn on_request_headers(&mut self, s: &mut Stamper, host: &impl Host, exchange: &impl Exchange) {
        check_direction_once(&mut s.direction_checked, FilterRole::Server, host, exchange);
        self.entered = Some(s.load.enter(host.now_us()));
        if let Some(attester) = &s.attester {
            self.served = attester.served_request(exchange);
        }
    }

    pub fn on_response_headers(&mut self, s: &mut Stamper, host: &impl Host, exchange: &mut impl Exchange) {
        self.leave(s, host.now_us());
        if exchange.header(HeaderMap::Response, LOAD_STAMP_HEADER).is_some() {
            s.metrics.replaced.inc(host);
        }
        // Replaces every value the application may have set.
        let stamp = LoadStamp { rif: s.load.requests_in_flight() };
        exchange.set_header(HeaderMap::Response, LOAD_STAMP_HEADER, &stamp.header_value());
        s.metrics.written.inc(host);
    }

    /// Once per stream: it stops counting as in flight (if it got no response headers), and the
    /// attester counts it for its source, failed by the client role's rule (`classify`).
    pub fn on_stream_done(&mut self, s: &mut Stamper, host: &impl Host, exchange: &impl Exchange) {
        self.leave(s, host.now_us());
        if let Some(attester) = &mut s.attester {
            let status = exchange.number_attribute(Attribute::ResponseCode).map_or(0, |c| c.min(999) as u16);
            let grpc = exchange.number_attribute(Attribute::GrpcStatus).and_then(|c| u32::try_from(c).ok());
            let failed = !classify(status, grpc, &attester.grpc_failure_codes).is_success();
            attester.count(host, &self.served, failed, host.now_us());
        }
    }
}
