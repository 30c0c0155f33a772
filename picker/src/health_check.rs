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
}

impl CheckTarget {
    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn protocol(&self) -> Option<CheckProtocol> {
        self.protocol
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
}

/// An HTTP check passes with a 2xx status (`status` None: no response headers within the timeout, a
/// reset, or no upstream: failed).
pub fn check_passed(status: Option<u16>) -> bool {
    status.is_some_and(|s| (200..300).contains(&s))
}

/// A gRPC check passes with HTTP status 200, `grpc-status` 0 (`grpc_status`: from the trailers, else
/// the headers of a trailers-only answer) and a body that reads SERVING. Anything else fails:
/// NOT_SERVING, an unknown service, an error status, a body that is not one `HealthCheckResponse`.
pub fn grpc_check_passed(status: Option<u16>, grpc_status: Option<&str>, body: &[u8]) -> bool {
    status == Some(200)
        && grpc_status.map(str::trim) == Some("0")
        && read_check_response(body) == Ok(ServingStatus::Serving)
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
        }
    }

    #[test]
    fn a_grpc_check_passes_only_when_serving_with_status_ok() {
        let serving = [0, 0, 0, 0, 2, 0x08, 1];
        assert!(grpc_check_passed(Some(200), Some("0"), &serving));
        let not_serving = [0, 0, 0, 0, 2, 0x08, 2];
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
            assert!(!grpc_check_passed(status, grpc_status, body), "{status:?} {grpc_status:?} {body:?}");
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
