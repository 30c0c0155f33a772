//! What a server-role filter served on one port (one local address, `ip:port`), per source
//! principal (the verified peer certificate's URI SAN, or the configured header in a meshless
//! setup): counted per finished request, cumulative for the VM's life (its incarnation) while the
//! caller keeps calling, and written into one attestation per cluster the endpoint serves
//! (`tailweight_wire::attest`). Bounded and expiring: a caller not seen for `window_us` is
//! forgotten (its counter starts again from zero if it returns, which the aggregator reads as a
//! reset), and at most `MAX_CALLERS_PER_PORT` callers are kept; a request from one more is not
//! counted (its caller stays unproven, so its reports do not count: the safe side).

use tailweight_wire::attest::{Attestation, SourceCount, MAX_SOURCES};
use tailweight_wire::protocol::{MAX_NAME_LEN, VERSION};

/// Callers one port keeps at once (all fit one attestation).
pub const MAX_CALLERS_PER_PORT: usize = MAX_SOURCES;

/// Why a finished request was not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncounted {
    /// No principal, or one too long or with control characters.
    NoPrincipal,
    /// No usable local address (`ip:port`) for the request.
    NoAddress,
    /// A new caller of a port that holds `MAX_CALLERS_PER_PORT` already.
    CallersFull,
    /// A new port beyond `served_ports::MAX_PORTS`.
    PortsFull,
}

/// One caller's counts and when it was last seen.
#[derive(Debug, Clone, PartialEq)]
struct Caller {
    count: SourceCount,
    last_seen_us: u64,
}

/// One port's counts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServedCounts {
    callers: Vec<Caller>,
}

impl ServedCounts {
    /// Count one finished request from `principal` (None: the connection had no verified peer) at
    /// `now_us`.
    pub fn count(&mut self, principal: Option<&str>, failed: bool, now_us: u64) -> Result<(), Uncounted> {
        let principal = principal.filter(|p| usable(p)).ok_or(Uncounted::NoPrincipal)?;
        let at = match self.callers.iter().position(|c| c.count.principal == principal) {
            Some(at) => at,
            None if self.callers.len() < MAX_CALLERS_PER_PORT => {
                let count = SourceCount { principal: principal.to_string(), requests: 0, errors: 0 };
                self.callers.push(Caller { count, last_seen_us: now_us });
                self.callers.len() - 1
            }
            None => return Err(Uncounted::CallersFull),
        };
        let c = &mut self.callers[at];
        c.count.requests += 1;
        c.count.errors += u64::from(failed);
        c.last_seen_us = c.last_seen_us.max(now_us);
        Ok(())
    }

    /// Forget the callers last seen `window_us` or more before `now_us`.
    pub fn expire(&mut self, now_us: u64, window_us: u64) {
        self.callers.retain(|c| now_us.saturating_sub(c.last_seen_us) < window_us);
    }

    /// Whether no caller is kept.
    pub fn is_empty(&self) -> bool {
        self.callers.is_empty()
    }

    /// The callers kept, by principal.
    #[cfg(test)]
    pub fn principals(&self) -> impl Iterator<Item = &str> {
        self.callers.iter().map(|c| c.count.principal.as_str())
    }

    /// The attestation of `endpoint` (`ip:port`) as an endpoint of `cluster`.
    pub fn attestation(&self, cluster: &str, endpoint: &str, incarnation: u64, interval_ms: u32) -> Attestation {
        Attestation {
            version: VERSION,
            cluster: cluster.to_string(),
            endpoint: endpoint.to_string(),
            incarnation,
            interval_ms,
            sources: self.callers.iter().map(|c| c.count.clone()).collect(),
        }
    }
}

/// What `Attestation::validate` accepts as a principal name.
fn usable(principal: &str) -> bool {
    !principal.is_empty() && principal.len() <= MAX_NAME_LEN && !principal.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_per_principal_cumulatively_and_bounded() {
        let mut c = ServedCounts::default();
        let front = "spiffe://cluster.local/ns/prod/sa/frontend";
        for failed in [false, true, false] {
            c.count(Some(front), failed, 0).unwrap();
        }
        c.count(Some("spiffe://cluster.local/ns/prod/sa/batch"), false, 0).unwrap();
        for bad in [None, Some(""), Some("bad\nname")] {
            assert_eq!(c.count(bad, false, 0), Err(Uncounted::NoPrincipal));
        }
        let a = c.attestation("outbound|8080||shop.prod.svc.cluster.local", "10.0.0.1:8080", 9, 1000);
        assert_eq!(a.validate(), Ok(()));
        assert_eq!(
            a.sources.iter().map(|s| (s.principal.as_str(), s.requests, s.errors)).collect::<Vec<_>>(),
            [(front, 3, 1), ("spiffe://cluster.local/ns/prod/sa/batch", 1, 0)]
        );
        let mut full = ServedCounts::default();
        for i in 0..MAX_CALLERS_PER_PORT {
            full.count(Some(&format!("p{i}")), false, 0).unwrap();
        }
        assert_eq!(full.count(Some("one-more"), false, 0), Err(Uncounted::CallersFull));
        full.count(Some("p0"), false, 0).unwrap();
        assert_eq!(full.callers[0].count.requests, 2, "a known principal is still counted");
    }

    #[test]
    fn a_caller_not_seen_for_the_window_is_forgotten_and_makes_room() {
        let mut c = ServedCounts::default();
        c.count(Some("old"), false, 1_000).unwrap();
        c.count(Some("recent"), false, 5_000).unwrap();
        c.expire(10_999, 10_000);
        assert_eq!(c.principals().collect::<Vec<_>>(), ["old", "recent"]);
        c.expire(11_000, 10_000);
        assert_eq!(c.principals().collect::<Vec<_>>(), ["recent"]);
        c.count(Some("old"), false, 12_000).unwrap();
        let a = c.attestation("c", "10.0.0.1:80", 1, 1000);
        assert_eq!(a.sources[1].requests, 1, "a returning caller counts from zero again (a reset)");
    }
}
