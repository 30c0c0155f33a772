//! Sends the balancer's due health checks (with `health_check_path` or `health_check_grpc` set; see
//! `tailweight_picker::HealthCheckLedger` and the picker's health checks) from the root context's tick, to the endpoint's cluster with
//! the override header naming the endpoint (Envoy's `override_host` policy then sends it there): a
//! GET of the path for an HTTP cluster, a `grpc.health.v1.Health/Check` call for a gRPC one. Each
//! answer goes back to the balancer from `on_http_call_response`.
//!
//! The gRPC check is an HTTP/2 call carrying the gRPC framing (`tailweight_wire::grpc_health`)
//! rather than the host's gRPC call: the same call path, tokens and override as the HTTP check
//! (verified to reach the named endpoint), and no gRPC callbacks to export.

use crate::config::HealthCheckConfig;
use crate::host::{CallAnswer, CallToken, Host, OutgoingCall};
use crate::metrics::Metrics;
use tailweight_picker::{
    grpc_check_verdict, http_check_verdict, Balancer, CheckProtocol, CheckVerdict, DueHealthCheck, HealthChange,
    HealthCheckLedger, MAX_PENDING_HEALTH_CHECKS,
};
use tailweight_wire::grpc_health::{check_request, CHECK_PATH};

/// A check answer's body is read up to this many bytes (a `HealthCheckResponse` is 7).
const MAX_ANSWER_BYTES: usize = 64;

pub struct HealthChecker {
    config: HealthCheckConfig,
    /// The override header (the filter's `header`).
    header: String,
    /// The gRPC check's request body (with `health_check_grpc`), made once.
    grpc_request: Vec<u8>,
    ledger: HealthCheckLedger,
    /// The checks due this tick (kept to reuse its allocation).
    due: Vec<DueHealthCheck>,
}

impl HealthChecker {
    pub fn new(config: HealthCheckConfig, header: &str) -> Self {
        let grpc_request = config.grpc_service.as_deref().map(check_request).unwrap_or_default();
        HealthChecker {
            config,
            header: header.to_string(),
            grpc_request,
            ledger: HealthCheckLedger::default(),
            due: Vec::new(),
        }
    }

    /// Send the checks due now (at most the room left in the ledger; one under way per endpoint).
    #[inline(never)] // out of line: V8's compile memory follows the largest function (Makefile, WASM_OPT)
    pub fn tick(&mut self, host: &impl Host, balancer: &mut Balancer, metrics: &Metrics, now_us: u64) {
        // The host answers every call by its timeout; an entry older than twice that was lost.
        self.ledger.forget_sent_before(now_us.saturating_sub(2_000 * self.config.timeout_ms));
        let room = MAX_PENDING_HEALTH_CHECKS.saturating_sub(self.ledger.len());
        let round = balancer.due_health_checks(now_us, room, &mut self.due);
        metrics.health_checks_left_to_others.add(host, round.left_to_others.into());
        metrics.readmissions_on_evidence.add(host, round.readmitted_on_evidence.into());
        metrics.recoveries.add(host, round.readmitted_on_evidence.into());
        for check in self.due.drain(..) {
            if !self.ledger.admits(&check) {
                continue;
            }
            let call = |headers: &[(&str, &str)], body: &[u8]| {
                host.http_call(&OutgoingCall {
                    cluster: &check.cluster,
                    headers,
                    body,
                    timeout_ms: self.config.timeout_ms,
                })
            };
            let sent = match (check.protocol, &self.config.path) {
                (CheckProtocol::Http, Some(path)) => call(
                    &[
                        (":method", "GET"),
                        (":path", path),
                        (":authority", &check.authority),
                        (&self.header, &check.address),
                    ],
                    &[],
                ),
                // `te: trailers` as gRPC requires; no `grpc-accept-encoding`: the answer comes uncompressed.
                (CheckProtocol::Grpc, _) => call(
                    &[
                        (":method", "POST"),
                        (":path", CHECK_PATH),
                        (":authority", &check.authority),
                        ("content-type", "application/grpc"),
                        ("te", "trailers"),
                        (&self.header, &check.address),
                    ],
                    &self.grpc_request,
                ),
                // The balancer hands out only configured protocols' checks.
                (CheckProtocol::Http, None) => continue,
            };
            match sent {
                Ok(token) => {
                    metrics.health_checks_sent.inc(host);
                    self.ledger.sent(token, check);
                }
                // Refused by the host (the cluster is gone): a failed check, the wait doubles.
                Err(_) => {
                    metrics.health_checks_failed.inc(host);
                    balancer.health_check_answered(&check, CheckVerdict::Failed, now_us);
                }
            }
        }
    }

    /// The answer to call `token`, if it is a health check's (false: not ours).
    pub fn on_answer(
        &mut self,
        host: &impl Host,
        token: CallToken,
        answer: &impl CallAnswer,
        balancer: &mut Balancer,
        metrics: &Metrics,
        now_us: u64,
    ) -> bool {
        let Some(check) = self.ledger.answered(token) else { return false };
        let status = answer.header(":status").and_then(|s| s.parse().ok());
        let verdict = match check.protocol {
            CheckProtocol::Http => http_check_verdict(status),
            CheckProtocol::Grpc => {
                let grpc_status = answer.trailer("grpc-status").or_else(|| answer.header("grpc-status"));
                let body = answer.body(answer.body_size().min(MAX_ANSWER_BYTES));
                grpc_check_verdict(status, grpc_status.as_deref(), &body)
            }
        };
        match verdict {
            CheckVerdict::Passed => {}
            CheckVerdict::Failed => metrics.health_checks_failed.inc(host),
            CheckVerdict::Unanswerable => metrics.health_checks_unanswerable.inc(host),
        }
        if balancer.health_check_answered(&check, verdict, now_us) == HealthChange::Recovered {
            metrics.recoveries.inc(host);
        }
        true
    }
}
