//! What a server-role filter served, per local address it served on (`ip:port` as the host
//! reports the inbound connection's local address): each port is its own endpoint and attests
//! only what it served (`served`). An address is never taken from anything but the request's own
//! local address, so a pod attests for itself only. Bounded: at most `MAX_PORTS` ports; a port
//! whose callers all expired is forgotten.

use crate::served::{ServedCounts, Uncounted};
use tailweight_wire::address::is_endpoint_address;
use tailweight_wire::attest::Attestation;

/// Ports (local addresses) one worker attests for at once.
pub const MAX_PORTS: usize = 16;

/// Report intervals a caller stays in a port's attestation after its last request.
pub const CALLER_WINDOW_INTERVALS: u64 = 5;

/// One port's address and counts.
#[derive(Debug, Clone, PartialEq)]
struct Port {
    endpoint: String,
    counts: ServedCounts,
}

/// Every port's counts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServedPorts {
    ports: Vec<Port>,
}

impl ServedPorts {
    /// Count one finished request that arrived on `local` (the host's local address of its
    /// connection) from `principal`, at `now_us`.
    pub fn count(
        &mut self,
        local: Option<&str>,
        principal: Option<&str>,
        failed: bool,
        now_us: u64,
    ) -> Result<(), Uncounted> {
        let local = local.filter(|a| is_endpoint_address(a)).ok_or(Uncounted::NoAddress)?;
        let at = match self.ports.iter().position(|p| p.endpoint == local) {
            Some(at) => at,
            None if self.ports.len() < MAX_PORTS => {
                self.ports.push(Port { endpoint: local.to_string(), counts: ServedCounts::default() });
                self.ports.len() - 1
            }
            None => return Err(Uncounted::PortsFull),
        };
        let counted = self.ports[at].counts.count(principal, failed, now_us);
        if self.ports[at].counts.is_empty() {
            self.ports.swap_remove(at);
        }
        counted
    }

    /// Forget callers last seen `window_us` or more before `now_us`, and ports left without any.
    pub fn expire(&mut self, now_us: u64, window_us: u64) {
        for p in &mut self.ports {
            p.counts.expire(now_us, window_us);
        }
        self.ports.retain(|p| !p.counts.is_empty());
    }

    /// Ports kept.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// One attestation per port, as an endpoint of `cluster`.
    pub fn attestations<'a>(
        &'a self,
        cluster: &'a str,
        incarnation: u64,
        interval_ms: u32,
    ) -> impl Iterator<Item = Attestation> + 'a {
        self.ports.iter().map(move |p| p.counts.attestation(cluster, &p.endpoint, incarnation, interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_port_attests_only_what_it_served_and_ports_are_bounded() {
        let mut s = ServedPorts::default();
        s.count(Some("10.0.0.1:8080"), Some("a"), false, 0).unwrap();
        s.count(Some("10.0.0.1:9090"), Some("b"), true, 0).unwrap();
        s.count(Some("10.0.0.1:8080"), Some("a"), false, 0).unwrap();
        let all: Vec<_> = s.attestations("c", 7, 1000).collect();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].endpoint.as_str(), all[0].sources[0].principal.as_str()), ("10.0.0.1:8080", "a"));
        assert_eq!(all[0].sources[0].requests, 2);
        assert_eq!((all[1].endpoint.as_str(), all[1].sources.len(), all[1].sources[0].errors), ("10.0.0.1:9090", 1, 1));
        for bad in [None, Some("not an address"), Some("10.0.0.1")] {
            assert_eq!(s.count(bad, Some("a"), false, 0), Err(Uncounted::NoAddress));
        }
        assert_eq!(s.count(Some("10.0.0.1:7070"), None, false, 0), Err(Uncounted::NoPrincipal));
        assert_eq!(s.len(), 2, "a request not counted opens no port");
        for port in 0..MAX_PORTS as u16 {
            let _ = s.count(Some(&format!("10.0.0.1:{}", 1000 + port)), Some("a"), false, 0);
        }
        assert_eq!(s.len(), MAX_PORTS);
        assert_eq!(s.count(Some("10.0.0.1:1"), Some("a"), false, 0), Err(Uncounted::PortsFull));
        s.expire(10, 10);
        assert_eq!(s.len(), 0, "ports whose callers expired are forgotten");
    }
}
