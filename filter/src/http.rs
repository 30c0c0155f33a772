//! Per request: pick in `on_http_request_headers` (write the override header), note the first
//! response headers in `on_http_response_headers` (the request no longer waits on the endpoint: a
//! stream's later messages do not count), and account the outcome in `on_log` (called once per
//! stream, also on resets, so in-flight counts cannot leak). With `load_stamp_max_age_ms` set, the
//! response headers' load stamp is removed before the response reaches the application, and read
//! for the balancer only if its cluster is one whose destinations write it (`load_stamp_clusters`:
//! their server-role filter, see `server`; any other destination could claim an empty queue);
//! without it the header is not looked at.
//!
//! gRPC requests (content-type `application/grpc...`) end with a grpc-status in the trailers or in
//! the headers of a trailers-only response; `on_log` reads it as Envoy's `response.grpc_status`
//! attribute and the ORCA report from the trailers, so no trailers callback is exported: HTTP/1.1
//! requests pay nothing for gRPC.

use crate::abi::LogLevel;
use crate::direction::check_direction_once;
use crate::host;
use crate::metrics;
use crate::state::{PluginState, Shared};
use crate::worker::Worker;
use tailweight_picker::config::is_override_value;
use tailweight_picker::health_check::CheckProtocol;
use tailweight_picker::outcome::classify;
use tailweight_picker::{Completion, Pick, RequestOutcome};
use tailweight_wire::orca::{self, OrcaLoad};
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

pub struct Request {
    state: Shared,
    /// Set when the request belongs to a cluster we track.
    cluster: Option<String>,
    /// The override header value written (first choice, then retry choices); empty if none.
    steered: String,
    /// The first choice is `steered[..len]` when we steered.
    chosen_len: Option<usize>,
    /// The in-flight epoch of the steered pick while it still counts as in flight.
    waiting_epoch: Option<u64>,
    grpc: bool,
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
        Request {
            state,
            cluster: None,
            steered: String::new(),
            chosen_len: None,
            waiting_epoch: None,
            grpc: false,
            started_us: 0,
            response: None,
        }
    }

    fn chosen(&self) -> Option<&str> {
        self.chosen_len.and_then(|n| self.steered.get(..n))
    }

    /// The steered request stops counting as in flight (first response headers, or its end).
    fn release(&mut self, w: &mut Worker) {
        let epoch = self.waiting_epoch.take();
        if let (Some(epoch), Some(cluster), Some(chosen)) = (epoch, &self.cluster, self.chosen()) {
            w.balancer.release(cluster, chosen, epoch);
        }
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

/// The ORCA report of a response: the TEXT/JSON header of HTTP backends, or the binary form gRPC
/// servers send (in the headers of a trailers-only answer).
fn orca_in_headers(grpc: bool) -> Option<OrcaLoad> {
    if grpc {
        host::response_header(orca::BIN_HEADER).and_then(|h| orca::parse_bin(&h).ok())
    } else {
        host::response_header(orca::HEADER).and_then(|h| orca::parse(&h).ok())
    }
}

impl Request {
    pub fn on_request_headers(&mut self) {
        let mut state = self.state.borrow_mut();
        let PluginState::Active(w) = &mut *state else { return };
        check_direction_once(&mut w.direction_checked, w.config.role);
        let header = w.config.header.as_str();
        let incoming = host::request_header(header);
        if let Some(value) = &incoming {
            if w.config.trust_incoming_header && is_override_value(value) {
                metrics::inc(w.metrics.incoming_header_trusted);
                return;
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
        if let Some(first) = pick.first_choice() {
            w.metrics.endpoint_pick(&cluster, first);
        }
        match pick {
            Pick::Steer { header: value, first_len, epoch } => {
                host::set_request_header(header, &value);
                metrics::inc(w.metrics.picks);
                self.steered = value;
                self.chosen_len = Some(first_len);
                self.waiting_epoch = Some(epoch);
            }
            Pick::Explore => metrics::inc(w.metrics.explorations),
            Pick::NoCandidate => metrics::inc(w.metrics.fallbacks),
            Pick::Untracked => metrics::inc(w.metrics.untracked),
            Pick::Paused => metrics::inc(w.metrics.paused),
        }
        if self.chosen_len.is_none() && incoming.is_some() {
            host::remove_request_header(header);
        }
        if !untracked {
            self.grpc = host::request_header("content-type").is_some_and(|t| t.starts_with("application/grpc"));
            let protocol = if self.grpc { CheckProtocol::Grpc } else { CheckProtocol::Http };
            w.balancer.note_user_request(&cluster, protocol, now, || host::request_header(":authority"));
            self.cluster = Some(cluster);
            self.started_us = now;
        }
    }

    pub fn on_response_headers(&mut self) {
        let Some(cluster) = &self.cluster else { return };
        let response = Response {
            at_us: host::now_us(),
            status: host::response_header(":status").and_then(|s| s.parse().ok()).unwrap_or(0),
            served: served_by(),
            load: orca_in_headers(self.grpc),
        };
        let state = self.state.clone();
        let mut state = state.borrow_mut();
        if let PluginState::Active(w) = &mut *state {
            if w.config.pick.load_stamp_max_age_us > 0 {
                read_stamp(w, cluster, response.served.as_deref(), response.at_us);
            }
            self.release(w);
        }
        self.response = Some(response);
    }

    pub fn on_log(&mut self) {
        if self.cluster.is_none() {
            return;
        }
        // No response headers: reset or timeout before any answer.
        let mut response = self.response.take().unwrap_or_else(|| Response {
            at_us: host::now_us(),
            status: host::property_u64(b"response\0code").map_or(0, |c| c as u16),
            served: served_by(),
            load: None,
        });
        let grpc_status = if self.grpc {
            if response.load.is_none() {
                response.load = host::response_trailer(orca::BIN_HEADER).and_then(|h| orca::parse_bin(&h).ok());
            }
            host::property_u64(b"response\0grpc_status").and_then(|c| u32::try_from(c).ok())
        } else {
            None
        };
        // Only when another endpoint served: did Envoy try ours and retry, or never try it?
        let attempts = match (self.chosen(), response.served.as_deref()) {
            (Some(chosen), Some(served)) if chosen != served => {
                host::property_u64(b"upstream\0request_attempt_count").map_or(0, |n| n.min(u64::from(u32::MAX)) as u32)
            }
            _ => 1,
        };
        let state = self.state.clone();
        let mut state = state.borrow_mut();
        let PluginState::Active(w) = &mut *state else { return };
        self.release(w);
        let outcome = RequestOutcome {
            served: response.served.as_deref(),
            attempts,
            latency_us: response.at_us.saturating_sub(self.started_us),
            class: classify(response.status, grpc_status, &w.config.grpc_failure_codes),
            load: response.load,
        };
        let Some(cluster) = self.cluster.take() else { return };
        let done = w.balancer.complete(&cluster, self.chosen(), &outcome, response.at_us);
        count(w, &outcome, &done, &cluster);
    }
}

/// The filter's counters for one finished request, and the one log line of a steering pause.
fn count(w: &Worker, outcome: &RequestOutcome, done: &Completion, cluster: &str) {
    let m = &w.metrics;
    match done.honoured {
        Some(true) => metrics::inc(m.honoured),
        Some(false) => metrics::inc(m.not_honoured),
        None => {}
    }
    if done.refused {
        metrics::inc(m.refused);
    }
    match outcome.class {
        tailweight_picker::ResponseClass::Success => {}
        tailweight_picker::ResponseClass::Failure => metrics::inc(m.failures),
        tailweight_picker::ResponseClass::Overload => metrics::inc(m.overloads),
    }
    // Envoy tried our choice and retried elsewhere: that attempt failed too (charged to the choice).
    if done.honoured == Some(false) && !done.refused {
        metrics::inc(m.failures);
    }
    if done.suspended {
        metrics::inc(m.suspensions);
    }
    if done.recovered {
        metrics::inc(m.recoveries);
    }
    if let Some(pause_us) = done.paused_for_us {
        metrics::inc(m.steering_pauses);
        host::log(
            LogLevel::Warn,
            &format!(
                "cluster {cluster}: Envoy did not use most endpoints picked for it (is its override_host \
                 EnvoyFilter patch missing, or is locality load balancing on?); leaving it to Envoy's load \
                 balancer for {} s, then trying again",
                pause_us / 1_000_000
            ),
        );
    }
}

/// Take the response's load stamp for the balancer if its cluster's stamps are read (else, or if
/// it cannot be read, it is counted and dropped), and remove it: it is for this proxy, not the
/// application.
fn read_stamp(w: &mut Worker, cluster: &str, served: Option<&str>, now_us: u64) {
    let Some(value) = host::response_header(LOAD_STAMP_HEADER) else { return };
    host::remove_response_header(LOAD_STAMP_HEADER);
    if !w.config.reads_stamps_of(cluster) {
        return metrics::inc(w.metrics.stamps_untrusted);
    }
    match LoadStamp::parse(&value) {
        Ok(stamp) => {
            if let Some(served) = served {
                w.balancer.note_stamp(cluster, served, stamp, now_us);
            }
            metrics::inc(w.metrics.stamps_read);
        }
        Err(_) => metrics::inc(w.metrics.stamps_invalid),
    }
}

/// Not steering: an override header from outside must not steer either.
fn clear(header: &str, present: bool) {
    if present {
        host::remove_request_header(header);
    }
}
