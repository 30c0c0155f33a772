//! A server-role worker's attestations (with `aggregator` and `attest_clusters` configured): what
//! each port of this endpoint served each recent source principal (`served_ports`), sent every
//! report interval to the aggregator, one call per port and cluster it serves, under that
//! cluster's shard authority (like reports, so the replica that owns the cluster gets it). A port
//! attests under its own local address as the host reports it, never another. The aggregator's
//! answer is counted and otherwise ignored: attesting can never fail or slow a request.

use crate::config::{AggregatorConfig, FilterConfig};
use crate::host::{Attribute, CallAnswer, CallToken, Exchange, HeaderMap, Host, LogLevel, OutgoingCall};
use crate::metrics::Counter;
use crate::served::Uncounted;
use crate::served_ports::{ServedPorts, CALLER_WINDOW_INTERVALS};
use tailweight_wire::attest::write::write_attestation;
use tailweight_wire::protocol::{self, ATTEST_PATH};

pub struct Attester {
    aggregator: AggregatorConfig,
    clusters: Vec<String>,
    source_header: Option<String>,
    pub grpc_failure_codes: Vec<u32>,
    served: ServedPorts,
    incarnation: u64,
    next_send_us: u64,
    /// Calls under way (their answers are only counted).
    pending: Vec<CallToken>,
    sent: Counter,
    failed: Counter,
    /// Requests not counted because a port's callers or the ports were full.
    overflow: Counter,
    failures: u64,
}

/// Who made a request, and on which local address (`ip:port`) it arrived.
#[derive(Debug, Default)]
pub struct ServedRequest {
    pub local: Option<String>,
    pub source: Option<String>,
}

impl Attester {
    /// An attester if the configuration asks for one.
    pub fn of(config: &FilterConfig, host: &impl Host) -> Option<Attester> {
        let aggregator = config.aggregator.clone().filter(|_| !config.attest_clusters.is_empty())?;
        Some(Attester {
            aggregator,
            clusters: config.attest_clusters.clone(),
            source_header: config.attest_source_header.clone(),
            grpc_failure_codes: config.grpc_failure_codes.clone(),
            served: ServedPorts::default(),
            incarnation: host.random_u64(),
            next_send_us: 0,
            pending: Vec::new(),
            sent: Counter::define(host, "tailweight.attestations_sent"),
            failed: Counter::define(host, "tailweight.attestations_failed"),
            overflow: Counter::define(host, "tailweight.attest_overflow"),
            failures: 0,
        })
    }

    /// At a request's headers: its source principal and the local address it arrived on.
    pub fn served_request(&self, exchange: &impl Exchange) -> ServedRequest {
        let source = match &self.source_header {
            Some(header) => exchange.header(HeaderMap::Request, header).map(String::from),
            None => exchange.text_attribute(Attribute::PeerPrincipal),
        };
        ServedRequest { local: exchange.text_attribute(Attribute::LocalAddress), source }
    }

    /// Count a finished request (`failed` or not) at `now_us`; one that overflows the bounds is
    /// counted in `tailweight.attest_overflow`.
    pub fn count(&mut self, host: &impl Host, request: &ServedRequest, failed: bool, now_us: u64) {
        let counted = self.served.count(request.local.as_deref(), request.source.as_deref(), failed, now_us);
        if let Err(Uncounted::CallersFull | Uncounted::PortsFull) = counted {
            self.overflow.inc(host);
        }
    }

    /// Send this interval's attestations when one is due.
    pub fn tick(&mut self, host: &impl Host, now_us: u64) {
        if now_us < self.next_send_us {
            return;
        }
        let interval_us = self.aggregator.report_interval_ms.saturating_mul(1_000);
        self.next_send_us = now_us.saturating_add(interval_us);
        self.served.expire(now_us, interval_us.saturating_mul(CALLER_WINDOW_INTERVALS));
        if self.pending.len() > 4 * self.clusters.len() * self.served.len().max(1) {
            self.pending.clear();
        }
        let interval_ms = u32::try_from(self.aggregator.report_interval_ms).unwrap_or(u32::MAX);
        let mut refused = None;
        let attestations =
            self.clusters.iter().flat_map(|c| self.served.attestations(c, self.incarnation, interval_ms));
        for attestation in attestations {
            let cluster = &attestation.cluster;
            let body = write_attestation(&attestation);
            let authority = protocol::shard_authority(cluster, &self.aggregator.authority);
            let headers = [
                (":method", "POST"),
                (":path", ATTEST_PATH),
                (":authority", authority.as_str()),
                ("content-type", "application/json"),
                (self.aggregator.shard_header.as_str(), cluster.as_str()),
            ];
            let call = OutgoingCall {
                cluster: &self.aggregator.cluster,
                headers: &headers,
                body: &body,
                timeout_ms: self.aggregator.timeout_ms,
            };
            match host.http_call(&call) {
                Ok(token) => {
                    self.pending.push(token);
                    self.sent.inc(host);
                }
                Err(status) => refused = Some(status),
            }
        }
        if let Some(status) = refused {
            self.fail(host, &format!("cannot call aggregator cluster for attestations: {status}"));
        }
    }

    /// The aggregator's answer to call `token` (204 when accepted), if it is an attestation's.
    pub fn on_answer(&mut self, host: &impl Host, token: CallToken, answer: &impl CallAnswer) -> bool {
        let Some(at) = self.pending.iter().position(|t| *t == token) else { return false };
        self.pending.swap_remove(at);
        match answer.header(":status").as_deref() {
            Some("204") => {}
            Some(code) => self.fail(host, &format!("aggregator answered {code} to an attestation")),
            None => self.fail(host, "attestation call failed or timed out"),
        }
        true
    }

    fn fail(&mut self, host: &impl Host, message: &str) {
        self.failed.inc(host);
        if self.failures % 100 == 0 {
            host.log(LogLevel::Warn, message);
        }
        self.failures += 1;
    }
}
