//! Sends the balancer's due health checks (with `health_check_path` set; see
//! `tailweight_picker::health_check`) from the root context's tick: a GET of the path to the
//! endpoint's cluster with the override header naming the endpoint (Envoy's `override_host` policy
//! then sends it there), and hands each answer back to the balancer from `on_http_call_response`.

use crate::host;
use crate::metrics::{self, Metrics};
use tailweight_picker::config::HealthCheckConfig;
use tailweight_picker::health::HealthChange;
use tailweight_picker::health_check::{check_passed, DueHealthCheck, HealthCheckLedger, MAX_PENDING_HEALTH_CHECKS};
use tailweight_picker::Balancer;

pub struct HealthChecker {
    config: HealthCheckConfig,
    /// The override header (the filter's `header`).
    header: String,
    ledger: HealthCheckLedger,
    /// The checks due this tick (kept to reuse its allocation).
    due: Vec<DueHealthCheck>,
}

impl HealthChecker {
    pub fn new(config: HealthCheckConfig, header: &str) -> Self {
        HealthChecker { config, header: header.to_string(), ledger: HealthCheckLedger::default(), due: Vec::new() }
    }

    /// Send the checks due now (at most the room left in the ledger; one under way per endpoint).
    pub fn tick(&mut self, balancer: &mut Balancer, metrics: &Metrics, now_us: u64) {
        // The host answers every call by its timeout; an entry older than twice that was lost.
        self.ledger.forget_sent_before(now_us.saturating_sub(2_000 * self.config.timeout_ms));
        balancer.due_health_checks(now_us, MAX_PENDING_HEALTH_CHECKS.saturating_sub(self.ledger.len()), &mut self.due);
        for check in self.due.drain(..) {
            if !self.ledger.admits(&check) {
                continue;
            }
            let headers = [
                (":method", "GET"),
                (":path", self.config.path.as_str()),
                (":authority", check.authority.as_str()),
                (self.header.as_str(), check.address.as_str()),
            ];
            match host::http_call(&check.cluster, &headers, &[], self.config.timeout_ms) {
                Ok(token) => {
                    metrics::inc(metrics.health_checks_sent);
                    self.ledger.sent(token, check);
                }
                // Refused by the host (the cluster is gone): a failed check, the wait doubles.
                Err(_) => {
                    metrics::inc(metrics.health_checks_failed);
                    balancer.health_check_answered(&check, false, now_us);
                }
            }
        }
    }

    /// The answer to call `token`, if it is a health check's (false: not ours).
    pub fn on_response(&mut self, token: u32, balancer: &mut Balancer, metrics: &Metrics, now_us: u64) -> bool {
        let Some(check) = self.ledger.answered(token) else { return false };
        let status = host::call_response_header(":status").and_then(|s| s.parse().ok());
        let passed = check_passed(status);
        if !passed {
            metrics::inc(metrics.health_checks_failed);
        }
        if balancer.health_check_answered(&check, passed, now_us) == HealthChange::Recovered {
            metrics::inc(metrics.recoveries);
        }
        true
    }
}
