//! The simulated health checks of the tailweight policies (with `health_check_path` in the filter
//! configuration): each tick hands the due checks out (`Balancer::due_health_checks`) and answers
//! them at once with the server's status when sent (Up passes; Failing and Stopped fail): a real
//! check's answer takes a round trip. What they cost is counted here.

use super::Ctx;
use crate::server::Status;
use std::collections::HashMap;
use tailweight_picker::{Balancer, CheckVerdict, DueHealthCheck, MAX_PENDING_HEALTH_CHECKS};

/// The health checks of a run: sent, of them to endpoints not up, readmissions on others' evidence,
/// due checks left to others, and the checks each endpoint got in each second (to find the peak).
#[derive(Debug, Clone, Default)]
pub struct HealthCheckCount {
    pub sent: u64,
    pub to_down: u64,
    pub readmitted_on_evidence: u64,
    pub left_to_others: u64,
    per_endpoint_second: HashMap<(u32, u64), u32>,
}

impl HealthCheckCount {
    /// The most checks one endpoint got in one second, and the mean over the endpoint-seconds that
    /// had any.
    pub fn peak_and_mean_per_endpoint_s(&self) -> (u32, f64) {
        let n = self.per_endpoint_second.len().max(1) as f64;
        let sum: u64 = self.per_endpoint_second.values().map(|c| u64::from(*c)).sum();
        (self.per_endpoint_second.values().copied().max().unwrap_or(0), sum as f64 / n)
    }
}

impl HealthCheckCount {
    /// Send `balancer`'s due checks now (`due` is scratch) and answer each at once, counting them;
    /// `endpoint_of` maps a check's address to its server.
    pub(crate) fn run_due(
        &mut self,
        balancer: &mut Balancer,
        due: &mut Vec<DueHealthCheck>,
        ctx: &Ctx,
        endpoint_of: impl Fn(&str) -> Option<u32>,
    ) {
        let now_us = ctx.now_ns / 1_000;
        let round = balancer.due_health_checks(now_us, MAX_PENDING_HEALTH_CHECKS, due);
        self.readmitted_on_evidence += u64::from(round.readmitted_on_evidence);
        self.left_to_others += u64::from(round.left_to_others);
        for check in due.drain(..) {
            let Some(endpoint) = endpoint_of(&check.address).filter(|e| (*e as usize) < ctx.servers.len()) else {
                continue;
            };
            let up = ctx.servers[endpoint as usize].status == Status::Up;
            self.sent += 1;
            self.to_down += u64::from(!up);
            *self.per_endpoint_second.entry((endpoint, ctx.now_ns / 1_000_000_000)).or_default() += 1;
            let verdict = if up { CheckVerdict::Passed } else { CheckVerdict::Failed };
            balancer.health_check_answered(&check, verdict, now_us);
        }
    }
}
