//! Out-of-band health checks of suspended endpoints (with `health_check_path` or `health_check_grpc`
//! set). Without them a suspended endpoint whose probe is due is given one user's request (see
//! `health`); with them it gets no user request at all: at its probe time the balancer hands out a
//! check instead, sent by the filter from its root context with the override header naming the
//! endpoint, and the check's answer does what the probe's would. The wait between checks is the
//! probe's (`probe_interval` doubling after each failed check, see `health`).
//!
//! A check speaks its cluster's protocol, the one its users' latest request spoke: a GET of the
//! configured path for HTTP, `grpc.health.v1.Health/Check` for gRPC. A cluster whose protocol has no
//! check configured keeps probing with users' requests.
//!
//! This module holds what a check is, what answer passes, what a cluster's checks are sent with, and
//! the ledger of checks under way: the host's call tokens mapped back to the check, bounded in number
//! (a check that finds the ledger full is not sent: its endpoint waits for its next due time).

use tailweight_wire::grpc_health::{read_check_response, ServingStatus};

/// Checks under way per worker at most.
pub const MAX_PENDING_HEALTH_CHECKS: usize = 64;

/// Longest `:authority` kept for health checks (a DNS name is at most 253 bytes, with a port 259).
const MAX_AUTHORITY_BYTES: usize = 259;
/// A cluster's `:authority` is read from a user's request at most this often (a host call the other
/// requests skip; it changes with the service's name, not per request).
pub const AUTHORITY_REFRESH_US: u64 = 1_000_000;
/// After an unanswerable check (`CheckVerdict::Unanswerable`) a cluster's suspended endpoints are
/// probed with users' requests for this long, then checks are tried again (a rollout may bring the
/// check, or a policy change allow it).
pub const UNANSWERABLE_PAUSE_US: u64 = 60_000_000;

/// The protocol of a cluster's users' requests, and so of its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckProtocol {
    Http,
    Grpc,
}

/// What a cluster's checks are sent with, learned from its users' requests.
#[derive(Debug, Clone, Default)]
pub struct CheckTarget {
    /// The latest usable `:authority` (empty: none seen).
    authority: String,
    /// When it was last read (see `AUTHORITY_REFRESH_US`).
    read_us: Option<u64>,
    /// The latest request's protocol (None: no request seen).
    protocol: Option<CheckProtocol>,
    /// Checks are paused until then (see `UNANSWERABLE_PAUSE_US`).
    paused_until_us: u64,
}

impl CheckTarget {
    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn protocol(&self) -> Option<CheckProtocol> {
        self.protocol
    }

    /// Are checks paused at `now_us`?
    pub fn checks_paused(&self, now_us: u64) -> bool {
        now_us < self.paused_until_us
    }

    /// A check's answer at `now_us` was unanswerable: pause the checks for `UNANSWERABLE_PAUSE_US`.
    pub fn pause_checks(&mut self, now_us: u64) {
        self.paused_until_us = now_us.saturating_add(UNANSWERABLE_PAUSE_US);
    }

    /// A user request at `now_us` spoke `protocol`; `read_authority` reads its `:authority`, called
    /// only if the last read is `AUTHORITY_REFRESH_US` old or more. An authority is kept unless empty,
    /// longer than `MAX_AUTHORITY_BYTES` or not visible ASCII.
    pub fn note(&mut self, protocol: CheckProtocol, now_us: u64, read_authority: impl FnOnce() -> Option<String>) {
        self.protocol = Some(protocol);
        if self.read_us.is_some_and(|at| now_us.saturating_sub(at) < AUTHORITY_REFRESH_US) {
            return;
        }
        self.read_us = Some(now_us);
        let Some(authority) = read_authority() else { return };
        let usable = !authority.is_empty()
            && authority.len() <= MAX_AUTHORITY_BYTES
            && authority.bytes().all(|b| b.is_ascii_graphic());
        if usable {
            self.authority = authority;
        }
    }
}

/// One check to send to `address` of `cluster` in `protocol`, with `:authority` `authority` (the one
/// last seen on a user's request to that cluster, else the address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueHealthCheck {
    pub cluster: String,
    pub address: String,
    pub authority: String,
    pub protocol: CheckProtocol,
    pub sent_us: u64,
    /// Does a failure double the wait to the next check? Not when the callers' checks together are
    /// held to a rate (see `check_share`).
    pub back_off: bool,
}

/// What a round of due checks did besides handing out checks (for the filter's counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckRound {
    /// Suspensions ended by others' evidence in the view (`crate::endpoint::Endpoint::served_since_suspension`).
    pub readmitted_on_evidence: u32,
    /// Due checks left to other callers (`check_share`).
    pub left_to_others: u32,
}

/// The share of due checks a worker sends while a fresh view says `reporters` callers (proxies)
/// report the cluster: `min(1, fleet_rate x wait / reporters)`, `wait` being the time to the
/// endpoint's next due check. Each caller's worker at each due time checks with this chance and
/// otherwise leaves the check to the others, so a suspended endpoint gets about `fleet_rate` checks
/// per second per worker thread of its callers together at any number of callers (each proxy's
/// workers draw apart), not one per wait from each of them. What one caller's passed check shows
/// reaches the others through the aggregator (`Endpoint::served_since_suspension`).
pub fn check_share(fleet_rate_per_s: f64, wait_us: u64, reporters: u32) -> f64 {
    (fleet_rate_per_s * wait_us as f64 / 1e6 / f64::from(reporters.max(1))).min(1.0)
}

/// What a check's answer says of its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckVerdict {
    Passed,
    Failed,
    /// The destination does not answer this check for us: no such path or service, or not for
    /// this caller (HTTP 401, 403, 404, 405; gRPC UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND,
    /// UNIMPLEMENTED). Nothing about the endpoint's health; its cluster's checks pause (see
    /// `CheckTarget::pause_checks`), so that a destination without the check, or an authorization
    /// policy that denies it, never leaves suspended endpoints to checks that cannot pass.
    Unanswerable,
}

/// HTTP statuses saying the check itself is not served to us.
const UNANSWERABLE_HTTP: [u16; 4] = [401, 403, 404, 405];
/// gRPC statuses saying the same: NOT_FOUND (an unknown service), PERMISSION_DENIED, UNIMPLEMENTED
/// (no health service), UNAUTHENTICATED.
const UNANSWERABLE_GRPC: [&str; 4] = ["5", "7", "12", "16"];

/// An HTTP check passes with a 2xx status (`status` None: no response headers within the timeout, a
/// reset, or no upstream: failed).
pub fn http_check_verdict(status: Option<u16>) -> CheckVerdict {
    match status {
        Some(s) if (200..300).contains(&s) => CheckVerdict::Passed,
        Some(s) if UNANSWERABLE_HTTP.contains(&s) => CheckVerdict::Unanswerable,
        _ => CheckVerdict::Failed,
    }
}

/// A gRPC check passes with HTTP status 200, `grpc-status` 0 (`grpc_status`: from the trailers, else
/// the headers of a trailers-only answer) and a body that reads SERVING. Anything else fails:
/// NOT_SERVING, another error status, a body that is not one `HealthCheckResponse`.
pub fn grpc_check_verdict(status: Option<u16>, grpc_status: Option<&str>, body: &[u8]) -> CheckVerdict {
    let grpc_status = grpc_status.map(str::trim);
    if status.is_some_and(|s| UNANSWERABLE_HTTP.contains(&s))
        || grpc_status.is_some_and(|g| UNANSWERABLE_GRPC.contains(&g))
    {
        return CheckVerdict::Unanswerable;
    }
    if status == Some(200) && grpc_status == Some("0") && read_check_response(body) == Ok(ServingStatus::Serving) {
        CheckVerdict::Passed
    } else {
        CheckVerdict::Failed
    }
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
        DueHealthCheck {
            cluster: "c".into(),
            address: address.into(),
            authority: "svc".into(),
            protocol: CheckProtocol::Http,
            sent_us,
            back_off: true,
        }
    }

    #[test]
    fn a_grpc_check_passes_only_when_serving_with_status_ok() {
        let serving = [0, 0, 0, 0, 2, 0x08, 1];
        assert_eq!(grpc_check_verdict(Some(200), Some("0"), &serving), CheckVerdict::Passed);
        let not_serving = [0, 0, 0, 0, 2, 0x08, 2];
        for (status, grpc_status) in [
            (Some(200), Some("12")),
            (Some(200), Some("5")),
            (Some(200), Some("7")),
            (Some(200), Some(" 16")),
            (Some(403), None),
            (Some(404), Some("12")),
        ] {
            let verdict = grpc_check_verdict(status, grpc_status, &[]);
            assert_eq!(verdict, CheckVerdict::Unanswerable, "{status:?} {grpc_status:?}");
        }
        for (status, grpc_status, body) in [
            (Some(200), Some("0"), &not_serving[..]),
            (Some(200), Some("0"), &[0, 0, 0, 0, 0][..]),
            (Some(200), Some("0"), &[][..]),
            (Some(200), Some("0"), &serving[..6]),
            (Some(200), Some("14"), &[][..]),
            (Some(200), Some("14"), &serving[..]),
            (Some(200), None, &serving[..]),
            (Some(503), Some("0"), &serving[..]),
            (None, None, &[][..]),
        ] {
            let verdict = grpc_check_verdict(status, grpc_status, body);
            assert_eq!(verdict, CheckVerdict::Failed, "{status:?} {grpc_status:?} {body:?}");
        }
    }

    #[test]
    fn the_authority_is_read_once_per_refresh_and_only_a_usable_one_is_kept() {
        let mut t = CheckTarget::default();
        assert_eq!((t.authority(), t.protocol()), ("", None));
        t.note(CheckProtocol::Grpc, 5, || Some("shop.example:8080".into()));
        assert_eq!((t.authority(), t.protocol()), ("shop.example:8080", Some(CheckProtocol::Grpc)));
        t.note(CheckProtocol::Http, 5 + AUTHORITY_REFRESH_US - 1, || panic!("read before its refresh"));
        assert_eq!(t.protocol(), Some(CheckProtocol::Http), "the protocol is noted every time");
        let too_long = "a".repeat(MAX_AUTHORITY_BYTES + 1);
        let mut now = 5;
        for bad in ["", "with space", "tab\there", "caf\u{e9}", too_long.as_str()] {
            now += AUTHORITY_REFRESH_US;
            t.note(CheckProtocol::Http, now, || Some(bad.to_string()));
            assert_eq!(t.authority(), "shop.example:8080", "{bad:?} is not kept");
        }
        t.note(CheckProtocol::Http, now + AUTHORITY_REFRESH_US, || Some("cart:80".into()));
        assert_eq!(t.authority(), "cart:80", "the latest usable one");
    }

    #[test]
    fn only_a_2xx_passes_and_a_check_not_served_to_us_is_unanswerable() {
        for status in [200, 204, 299] {
            assert_eq!(http_check_verdict(Some(status)), CheckVerdict::Passed, "{status}");
        }
        for status in [None, Some(0), Some(199), Some(301), Some(429), Some(500), Some(503)] {
            assert_eq!(http_check_verdict(status), CheckVerdict::Failed, "{status:?}");
        }
        for status in [401, 403, 404, 405] {
            assert_eq!(http_check_verdict(Some(status)), CheckVerdict::Unanswerable, "{status}");
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
