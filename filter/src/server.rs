//! The server role (`"role": "server"`, the destination's own sidecar, inbound): each response
//! leaves with `x-tailweight-load: 1;rif=<n>`, n the requests in flight at this endpoint right
//! after it (see `tailweight_wire::stamp`, and `tailweight_picker::server_inflight` for how the workers' counts are
//! combined). A request counts from its request headers until its response headers, or until
//! `on_log` (called once per stream, also on resets) when it got none. The role never steers and
//! never reports; a stamp header the application wrote itself is replaced, so only this sidecar
//! speaks for the endpoint.

use crate::host;
use crate::metrics::{self, StampMetrics};
use crate::root::{check_direction_once, PluginState, Shared};
use crate::shared;
use tailweight_picker::config::FilterRole;
use tailweight_picker::server_inflight::ServerInflight;
use tailweight_picker::FilterConfig;
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

/// A VM's published count older than this many ticks (and than `LIVE_MIN_US`) is a VM that went
/// away. A busy VM renews its count every tick; the floor keeps a tick delayed on a loaded machine
/// from hiding a live VM's requests, and a VM that really went away (a reconfiguration) counts a
/// little longer, which only makes stamps read high for that long.
const LIVE_TICKS: u64 = 3;
const LIVE_MIN_US: u64 = 1_000_000;

/// One server-role VM's state.
pub struct Stamper {
    tick_ms: u64,
    load: ServerInflight,
    metrics: StampMetrics,
    slot: Option<u64>,
    direction_checked: bool,
}

impl Stamper {
    pub fn new(config: &FilterConfig) -> Self {
        shared::init(host::random_u64());
        Stamper {
            tick_ms: config.sync_interval_ms,
            load: ServerInflight::new(config.inflight_bound_ms * 1_000),
            metrics: StampMetrics::define(),
            slot: None,
            direction_checked: false,
        }
    }

    /// Publish this VM's count when it changed; read the other VMs'.
    pub fn tick(&mut self, now_us: u64) {
        let slot = *self.slot.get_or_insert_with(|| shared::claim_slot().unwrap_or(u64::MAX));
        if slot == u64::MAX {
            return;
        }
        if let Some(count) = self.load.to_publish(now_us) {
            shared::publish_server_count(slot, count);
        }
        let others = (0..shared::slots_claimed()).filter(|n| *n != slot).filter_map(shared::read_server_count);
        self.load.set_others(others, now_us, (LIVE_TICKS * self.tick_ms * 1_000).max(LIVE_MIN_US));
    }
}

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
