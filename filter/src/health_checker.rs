//! Sends the balancer's due health checks (with `health_check_path` or `health_check_grpc` set; see
//! `tailweight_picker::health_check`) from the root context's tick, to the endpoint's cluster with
//! the override header naming the endpoint (Envoy's `override_host` policy then sends it there): a
//! GET of the path for an HTTP cluster, a `grpc.health.v1.Health/Check` call for a gRPC one. Each
//! answer goes back to the balancer from `on_http_call_response`.
//!
//! The gRPC check is an HTTP/2 call carrying the gRPC framing (`tailweight_wire::grpc_health`)
//! rather than the host's gRPC call: the same call path, tokens and override as the HTTP check
//! (verified to reach the named endpoint), and no gRPC callbacks to export.

use crate::host;
use crate::metrics::{self, Metrics};
use tailweight_picker::config::HealthCheckConfig;
use tailweight_picker::health::HealthChange;
use tailweight_picker::health_check::{
    grpc_check_verdict, http_check_verdict, CheckProtocol, CheckVerdict, DueHealthCheck, HealthCheckLedger,
    MAX_PENDING_HEALTH_CHECKS,
};
use tailweight_picker::Balancer;
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
    pub fn tick(&mut self, balancer: &mut Balancer, metrics: &Metrics, now_us: u64) {
        // The host answers every call by its timeout; an entry older than twice that was lost.
        self.ledger.forget_sent_before(now_us.saturating_sub(2_000 * self.config.timeout_ms));
        let room = MAX_PENDING_HEALTH_CHECKS.saturating_sub(self.ledger.len());
        let round = balancer.due_health_checks(now_us, room, &mut self.due);
        metrics::add(metrics.health_checks_left_to_others, round.left_to_others);
        metrics::add(metrics.readmissions_on_evidence, round.readmitted_on_evidence);
        metrics::add(metrics.recoveries, round.readmitted_on_evidence);
        for check in self.due.drain(..) {
            if !self.ledger.admits(&check) {
                continue;
            }
            let sent = match (check.protocol, &self.config.path) {
                (CheckProtocol::Http, Some(path)) => host::http_call(
                    &check.cluster,
                    &[
                        (":method", "GET"),
                        (":path", path),
                        (":authority", &check.authority),
                        (&self.header, &check.address),
                    ],
                    &[],
                    self.config.timeout_ms,
                ),
                // `te: trailers` as gRPC requires; no `grpc-accept-encoding`: the answer comes uncompressed.
                (CheckProtocol::Grpc, _) => host::http_call(
                    &check.cluster,
                    &[
                        (":method", "POST"),
                        (":path", CHECK_PATH),
                        (":authority", &check.authority),
                        ("content-type", "application/grpc"),
                        ("te", "trailers"),
                        (&self.header, &check.address),
                    ],
                    &self.grpc_request,
                    self.config.timeout_ms,
                ),
                // The balancer hands out only configured protocols' checks.
                (CheckProtocol::Http, None) => continue,
            };
            match sent {
                Ok(token) => {
                    metrics::inc(metrics.health_checks_sent);
                    self.ledger.sent(token, check);
                }
                // Refused by the host (the cluster is gone): a failed check, the wait doubles.
                Err(_) => {
                    metrics::inc(metrics.health_checks_failed);
                    balancer.health_check_answered(&check, CheckVerdict::Failed, now_us);
                }
            }
        }
    }

    /// The answer to call `token` (with a body of `body_size` bytes), if it is a health check's
    /// (false: not ours).
    pub fn on_response(
        &mut self,
        token: u32,
        body_size: usize,
        balancer: &mut Balancer,
        metrics: &Metrics,
        now_us: u64,
    ) -> bool {
        let Some(check) = self.ledger.answered(token) else { return false };
        let status = host::call_response_header(":status").and_then(|s| s.parse().ok());
        let verdict = match check.protocol {
            CheckProtocol::Http => http_check_verdict(status),
            CheckProtocol::Grpc => {
                let grpc_status =
                    host::call_response_trailer("grpc-status").or_else(|| host::call_response_header("grpc-status"));
                let body = host::call_response_body(body_size.min(MAX_ANSWER_BYTES));
                grpc_check_verdict(status, grpc_status.as_deref(), &body)
            }
        };
        match verdict {
            CheckVerdict::Passed => {}
            CheckVerdict::Failed => metrics::inc(metrics.health_checks_failed),
            CheckVerdict::Unanswerable => metrics::inc(metrics.health_checks_unanswerable),
        }
        if balancer.health_check_answered(&check, verdict, now_us) == HealthChange::Recovered {
            metrics::inc(metrics.recoveries);
        }
        true
    }
}
