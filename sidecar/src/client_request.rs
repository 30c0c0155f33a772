//! One request through a client-role worker: pick at its request headers (write the override
//! header), note the first response headers (the request no longer waits on the endpoint: a
//! stream's later messages do not count), and account the outcome when the stream is done (once
//! per stream, also on resets, so in-flight counts cannot leak). With `load_stamp_max_age_ms` set
//! and some `load_stamp_clusters` listed, the response headers' load stamp is removed before the response reaches the application, and
//! read for the balancer only if its cluster is one whose destinations write it
//! (`load_stamp_clusters`: their server-role filter, see `server_request`; any other destination
//! could claim an empty queue); without it the header is not looked at.
//!
//! gRPC requests (content-type `application/grpc...`) end with a grpc-status in the trailers or in
//! the headers of a trailers-only response; the end of the stream reads it as the
//! `response.grpc_status` attribute and the ORCA report from the trailers, so no trailers callback
//! is needed: HTTP/1.1 requests pay nothing for gRPC.

use crate::config::is_override_value;
use crate::direction::check_direction_once;
use crate::host::{Attribute, Exchange, HeaderMap, Host, LogLevel};
use crate::worker::Worker;
use tailweight_picker::{classify, CheckProtocol, Completion, Pick, RequestOutcome, ResponseClass};
use tailweight_wire::orca::{self, OrcaLoad};
use tailweight_wire::stamp::{LoadStamp, LOAD_STAMP_HEADER};

#[derive(Debug, Default)]
pub struct ClientRequest {
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
    response: Option<ResponseSeen>,
}

/// What the response headers said.
#[derive(Debug)]
struct ResponseSeen {
    at_us: u64,
    status: u16,
    served: Option<String>,
    load: Option<OrcaLoad>,
}

/// The ORCA report of a response: the TEXT/JSON header of HTTP backends, or the binary form gRPC
/// servers send (in the headers of a trailers-only answer).
fn orca_in_headers(exchange: &impl Exchange, grpc: bool) -> Option<OrcaLoad> {
    if grpc {
        exchange.header(HeaderMap::Response, orca::BIN_HEADER).and_then(|h| orca::parse_bin(&h).ok())
    } else {
        exchange.header(HeaderMap::Response, orca::HEADER).and_then(|h| orca::parse(&h).ok())
    }
}

impl ClientRequest {
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

    pub fn on_request_headers(&mut self, w: &mut Worker, host: &impl Host, exchange: &mut impl Exchange) {
        check_direction_once(&mut w.direction_checked, w.config.role, host, exchange);
        let header = w.config.header.as_str();
        let incoming = match exchange.header(HeaderMap::Request, header) {
            Some(value) if w.config.trust_incoming_header && is_override_value(&value) => {
                return w.metrics.incoming_header_trusted.inc(host);
            }
            Some(_) => {
                w.metrics.incoming_header_replaced.inc(host);
                true
            }
            None => false,
        };
        let cluster = match exchange.text_attribute(Attribute::ClusterName) {
            Some(c) if w.config.steers(&c) => c,
            Some(_) => return clear(exchange, header, incoming),
            None => {
                w.metrics.untracked.inc(host);
                return clear(exchange, header, incoming);
            }
        };
        let now = host.now_us();
        // The cluster's load balancer picks from what this worker learns: learn, do not steer.
        let pick = (!host.load_balancer_picks(&cluster)).then(|| w.balancer.pick(&cluster, now));
        let untracked = matches!(pick, Some(Pick::Untracked));
        if let Some(first) = pick.as_ref().and_then(Pick::first_choice) {
            w.metrics.endpoint_pick(host, &cluster, first);
        }
        match pick {
            Some(Pick::Steer { header: value, first_len, epoch }) => {
                exchange.steer(header, &value);
                w.metrics.picks.inc(host);
                self.steered = value;
                self.chosen_len = Some(first_len);
                self.waiting_epoch = Some(epoch);
            }
            Some(Pick::Explore) => w.metrics.explorations.inc(host),
            Some(Pick::NoCandidate) => w.metrics.fallbacks.inc(host),
            Some(Pick::Untracked) => w.metrics.untracked.inc(host),
            Some(Pick::Paused) => w.metrics.paused.inc(host),
            None => {}
        }
        if self.chosen_len.is_none() && incoming {
            exchange.remove_header(HeaderMap::Request, header);
        }
        if !untracked {
            self.grpc =
                exchange.header(HeaderMap::Request, "content-type").is_some_and(|t| t.starts_with("application/grpc"));
            let protocol = if self.grpc { CheckProtocol::Grpc } else { CheckProtocol::Http };
            w.balancer.note_user_request(&cluster, protocol, now, || {
                exchange.header(HeaderMap::Request, ":authority").map(String::from)
            });
            self.cluster = Some(cluster);
            self.started_us = now;
        }
    }

    pub fn on_response_headers(&mut self, w: &mut Worker, host: &impl Host, exchange: &mut impl Exchange) {
        let Some(cluster) = &self.cluster else { return };
        let response = ResponseSeen {
            at_us: host.now_us(),
            status: exchange.header(HeaderMap::Response, ":status").and_then(|s| s.parse().ok()).unwrap_or(0),
            served: exchange.text_attribute(Attribute::UpstreamAddress),
            load: orca_in_headers(exchange, self.grpc),
        };
        if w.config.reads_stamps() {
            read_stamp(w, host, exchange, cluster, response.served.as_deref(), response.at_us);
        }
        self.release(w);
        self.response = Some(response);
    }

    /// Once per stream, after its last other callback (also on resets).
    pub fn on_stream_done(&mut self, w: &mut Worker, host: &impl Host, exchange: &impl Exchange) {
        if self.cluster.is_none() {
            return;
        }
        // No response headers: reset or timeout before any answer.
        let mut response = self.response.take().unwrap_or_else(|| ResponseSeen {
            at_us: host.now_us(),
            status: exchange.number_attribute(Attribute::ResponseCode).map_or(0, |c| c as u16),
            served: exchange.text_attribute(Attribute::UpstreamAddress),
            load: None,
        });
        let grpc_status = if self.grpc {
            if response.load.is_none() {
                response.load = exchange
                    .header(HeaderMap::ResponseTrailers, orca::BIN_HEADER)
                    .and_then(|h| orca::parse_bin(&h).ok());
            }
            exchange.number_attribute(Attribute::GrpcStatus).and_then(|c| u32::try_from(c).ok())
        } else {
            None
        };
        // Only when another endpoint served: did Envoy try ours and retry, or never try it?
        let attempts = match (self.chosen(), response.served.as_deref()) {
            (Some(chosen), Some(served)) if chosen != served => {
                exchange.number_attribute(Attribute::UpstreamAttempts).map_or(0, |n| n.min(u64::from(u32::MAX)) as u32)
            }
            _ => 1,
        };
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
        count(w, host, &outcome, &done, &cluster);
    }
}

/// The counters for one finished request, and the one log line of a steering pause.
fn count(w: &Worker, host: &impl Host, outcome: &RequestOutcome, done: &Completion, cluster: &str) {
    let m = &w.metrics;
    match done.honoured {
        Some(true) => m.honoured.inc(host),
        Some(false) => m.not_honoured.inc(host),
        None => {}
    }
    if done.refused {
        m.refused.inc(host);
    }
    match outcome.class {
        ResponseClass::Success => {}
        ResponseClass::Failure => m.failures.inc(host),
        ResponseClass::Overload => m.overloads.inc(host),
    }
    // Envoy tried our choice and retried elsewhere: that attempt failed too (charged to the choice).
    if done.honoured == Some(false) && !done.refused {
        m.failures.inc(host);
    }
    if done.suspended {
        m.suspensions.inc(host);
    }
    if done.recovered {
        m.recoveries.inc(host);
    }
    if let Some(pause_us) = done.paused_for_us {
        m.steering_pauses.inc(host);
        host.log(
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
fn read_stamp(
    w: &mut Worker,
    host: &impl Host,
    exchange: &mut impl Exchange,
    cluster: &str,
    served: Option<&str>,
    now_us: u64,
) {
    let Some(parsed) = exchange.header(HeaderMap::Response, LOAD_STAMP_HEADER).map(|v| LoadStamp::parse(&v)) else {
        return;
    };
    exchange.remove_header(HeaderMap::Response, LOAD_STAMP_HEADER);
    if !w.config.reads_stamps_of(cluster) {
        return w.metrics.stamps_untrusted.inc(host);
    }
    match parsed {
        Ok(stamp) => {
            if let Some(served) = served {
                w.balancer.note_stamp(cluster, served, stamp, now_us);
            }
            w.metrics.stamps_read.inc(host);
        }
        Err(_) => w.metrics.stamps_invalid.inc(host),
    }
}

/// Not steering: an override header from outside must not steer either.
fn clear(exchange: &mut impl Exchange, header: &str, present: bool) {
    if present {
        exchange.remove_header(HeaderMap::Request, header);
    }
}
