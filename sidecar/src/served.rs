//! What a server-role filter served, per source principal (the verified peer certificate's URI
//! SAN, or the configured header in a meshless setup): counted per finished request, cumulative
//! for the VM's life (its incarnation), and written into one attestation per cluster the endpoint
//! serves (`tailweight_wire::attest`). Bounded: at most `MAX_SOURCES` principals are kept; a
//! request from one more is not counted (its caller stays unproven, so its reports do not count:
//! the safe side).

use tailweight_wire::attest::{Attestation, SourceCount, MAX_SOURCES};
use tailweight_wire::protocol::{MAX_NAME_LEN, VERSION};

/// One VM's counts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServedCounts {
    sources: Vec<SourceCount>,
    /// Requests not counted: no principal, a principal too long or with control characters, or one
    /// beyond `MAX_SOURCES`.
    pub uncounted: u64,
}

impl ServedCounts {
    /// Count one finished request from `principal` (None: the connection had no verified peer).
    pub fn count(&mut self, principal: Option<&str>, failed: bool) {
        let Some(principal) = principal.filter(|p| usable(p)) else {
            self.uncounted += 1;
            return;
        };
        let at = match self.sources.iter().position(|s| s.principal == principal) {
            Some(at) => at,
            None if self.sources.len() < MAX_SOURCES => {
                self.sources.push(SourceCount { principal: principal.to_string(), requests: 0, errors: 0 });
                self.sources.len() - 1
            }
            None => {
                self.uncounted += 1;
                return;
            }
        };
        let s = &mut self.sources[at];
        s.requests += 1;
        s.errors += u64::from(failed);
    }

    /// Whether any request was counted.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// The attestation of `endpoint` (`ip:port`) as an endpoint of `cluster`.
    pub fn attestation(&self, cluster: &str, endpoint: &str, incarnation: u64, interval_ms: u32) -> Attestation {
        Attestation {
            version: VERSION,
            cluster: cluster.to_string(),
            endpoint: endpoint.to_string(),
            incarnation,
            interval_ms,
            sources: self.sources.clone(),
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
            c.count(Some(front), failed);
        }
        c.count(Some("spiffe://cluster.local/ns/prod/sa/batch"), false);
        c.count(None, false);
        c.count(Some(""), false);
        c.count(Some("bad\nname"), false);
        let a = c.attestation("outbound|8080||shop.prod.svc.cluster.local", "10.0.0.1:8080", 9, 1000);
        assert_eq!(a.validate(), Ok(()));
        assert_eq!(
            a.sources.iter().map(|s| (s.principal.as_str(), s.requests, s.errors)).collect::<Vec<_>>(),
            [(front, 3, 1), ("spiffe://cluster.local/ns/prod/sa/batch", 1, 0)]
        );
        assert_eq!(c.uncounted, 3);
        let mut full = ServedCounts::default();
        for i in 0..=MAX_SOURCES {
            full.count(Some(&format!("p{i}")), false);
        }
        assert_eq!((full.sources.len(), full.uncounted), (MAX_SOURCES, 1));
        full.count(Some("p0"), false);
        assert_eq!(full.sources[0].requests, 2, "a known principal is still counted");
    }
}
