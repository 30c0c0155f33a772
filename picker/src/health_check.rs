//! Out-of-band health checks of suspended endpoints (with `health_check_path` set). Without them a
//! suspended endpoint whose probe is due is given one user's request (see `health`); with them it
//! gets no user request at all: at its probe time the balancer hands out a check instead (a GET of
//! the configured path, sent by the filter from its root context with the override header naming the
//! endpoint), and the check's answer does what the probe's would. The wait between checks is the
//! probe's (`probe_interval` doubling after each failed check, see `health`).
//!
//! This module holds what a check is, what answer passes, and the ledger of checks under way: the
//! host's call tokens mapped back to the check, bounded in number (a check that finds the ledger
//! full is not sent: its endpoint waits for its next due time).

/// Checks under way per worker at most.
pub const MAX_PENDING_HEALTH_CHECKS: usize = 64;

/// One check to send: GET the path on `address` of `cluster`, with `:authority` `authority` (the one
/// last seen on a user's request to that cluster, else the address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueHealthCheck {
    pub cluster: String,
    pub address: String,
    pub authority: String,
    pub sent_us: u64,
}

/// A check passes with a 2xx status (`status` None: no response headers within the timeout, a
/// reset, or no upstream: failed).
pub fn check_passed(status: Option<u16>) -> bool {
    status.is_some_and(|s| (200..300).contains(&s))
}

/// The checks under way, by the host's call token.
#[derive(Debug, Clone, Default)]
pub struct HealthCheckLedger {
    pending: Vec<(u32, DueHealthCheck)>,
}

impl HealthCheckLedger {
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// May `check` be sent now? Not while the ledger is full, nor while a check of the same endpoint
    /// is still under way (one at a time per endpoint: a timeout longer than the wait between checks
    /// must not stack them up).
    pub fn admits(&self, check: &DueHealthCheck) -> bool {
        self.pending.len() < MAX_PENDING_HEALTH_CHECKS
            && !self.pending.iter().any(|(_, c)| c.cluster == check.cluster && c.address == check.address)
    }

    /// `check` went out as call `token` (call only after `admits`; a full ledger drops it).
    pub fn sent(&mut self, token: u32, check: DueHealthCheck) {
        if self.pending.len() < MAX_PENDING_HEALTH_CHECKS {
            self.pending.push((token, check));
        }
    }

    /// The check of call `token`, no longer under way (None: not a health check's token).
    pub fn answered(&mut self, token: u32) -> Option<DueHealthCheck> {
        let at = self.pending.iter().position(|(t, _)| *t == token)?;
        Some(self.pending.swap_remove(at).1)
    }

    /// Forget checks sent before `before_us` whose answer never came (the host answers every call,
    /// if only with a timeout: this only guards against one it lost). Returns how many.
    pub fn forget_sent_before(&mut self, before_us: u64) -> usize {
        let n = self.pending.len();
        self.pending.retain(|(_, c)| c.sent_us >= before_us);
        n - self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(address: &str, sent_us: u64) -> DueHealthCheck {
        DueHealthCheck { cluster: "c".into(), address: address.into(), authority: "svc".into(), sent_us }
    }

    #[test]
    fn only_a_2xx_passes() {
        assert!(check_passed(Some(200)) && check_passed(Some(204)) && check_passed(Some(299)));
        for status in [None, Some(0), Some(199), Some(301), Some(404), Some(429), Some(503)] {
            assert!(!check_passed(status), "{status:?}");
        }
    }

    #[test]
    fn the_ledger_maps_tokens_back_one_check_per_endpoint_and_is_bounded() {
        let mut ledger = HealthCheckLedger::default();
        let a = check("10.0.0.1:80", 5);
        assert!(ledger.admits(&a));
        ledger.sent(7, a.clone());
        assert!(!ledger.admits(&check("10.0.0.1:80", 9)), "one under way per endpoint");
        assert_eq!(ledger.answered(8), None, "not a check's token");
        assert_eq!(ledger.answered(7), Some(a));
        assert_eq!(ledger.answered(7), None, "answered once");
        for i in 0..MAX_PENDING_HEALTH_CHECKS as u32 {
            let c = check(&format!("10.0.1.{i}:80"), u64::from(i));
            assert!(ledger.admits(&c));
            ledger.sent(i, c);
        }
        assert!(!ledger.admits(&check("10.0.2.1:80", 0)), "full");
        ledger.sent(999, check("10.0.2.1:80", 0));
        assert_eq!(ledger.len(), MAX_PENDING_HEALTH_CHECKS);
        assert_eq!(ledger.forget_sent_before(10), 10);
        assert!(ledger.admits(&check("10.0.2.1:80", 0)));
    }
}
