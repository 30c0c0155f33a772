//! Whose address an attestation may name (`--attest-address`): the attesting sidecar's own. A
//! pod's server role attests under the local address its host reports for each port it served
//! (tailweight-sidecar's `served_ports`); this binds that address to the sender, so a pod cannot
//! attest for another pod's address. The aggregator can know the sender's IP only where nothing
//! between them rewrites it: the TCP peer when sidecars call it directly (`peer`), or a header a
//! trusted proxy in front overwrites with the downstream address (`header:<name>`, e.g. Envoy's
//! `%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`). Behind an Istio sidecar the TCP peer is the
//! sidecar itself (127.0.0.6), so the default is `unbound` (see docs/security.md).

use axum::http::{HeaderMap, HeaderName};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// Where the attesting sender's IP address comes from (`--attest-address`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttestAddress {
    /// Not known: any endpoint address of the cluster may be attested by whoever `--attest-rule`
    /// allows.
    Unbound,
    /// The TCP peer's IP address.
    Peer,
    /// This header's value (an IP address, one value), set by a trusted proxy in front that
    /// overwrites whatever the caller sent.
    Header(HeaderName),
}

impl FromStr for AttestAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "unbound" => Ok(AttestAddress::Unbound),
            "peer" => Ok(AttestAddress::Peer),
            _ => match s.strip_prefix("header:") {
                Some(name) => HeaderName::from_str(name)
                    .map(AttestAddress::Header)
                    .map_err(|_| format!("attest address: {name:?} is not a header name")),
                None => Err(format!("attest address: {s:?} is not unbound, peer or header:<name>")),
            },
        }
    }
}

impl fmt::Display for AttestAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttestAddress::Unbound => f.write_str("unbound"),
            AttestAddress::Peer => f.write_str("peer"),
            AttestAddress::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl AttestAddress {
    /// Whether a sender (its `headers`, its TCP `peer`) may attest for `endpoint` (`ip:port`):
    /// always when unbound, else when the endpoint's IP is the sender's. Err: the one line saying
    /// why not.
    pub fn allows(&self, headers: &HeaderMap, peer: Option<SocketAddr>, endpoint: &str) -> Result<(), String> {
        let sender = match self {
            AttestAddress::Unbound => return Ok(()),
            AttestAddress::Peer => peer.map(|p| p.ip()).ok_or_else(|| "peer: address unknown".to_string())?,
            AttestAddress::Header(name) => header_ip(headers, name)?,
        };
        let claimed = endpoint.parse::<SocketAddr>().map_err(|_| format!("endpoint: {endpoint:?} is not ip:port"))?;
        if claimed.ip().to_canonical() == sender.to_canonical() {
            Ok(())
        } else {
            Err(format!(
                "endpoint: {endpoint:?} is not the attesting sender's address {sender} (--attest-address {self})"
            ))
        }
    }
}

/// The one IP address header `name` holds.
fn header_ip(headers: &HeaderMap, name: &HeaderName) -> Result<IpAddr, String> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(format!("{name}: missing or more than once (the attesting sender's address comes from it)"));
    };
    value.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| format!("{name}: not an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn an_attestation_names_only_its_senders_own_address_where_the_sender_is_known() {
        let none = HeaderMap::new();
        let peer: SocketAddr = "10.0.0.1:41000".parse().unwrap();
        assert_eq!(AttestAddress::Unbound.allows(&none, Some(peer), "10.9.9.9:8080"), Ok(()));
        assert_eq!(AttestAddress::Peer.allows(&none, Some(peer), "10.0.0.1:8080"), Ok(()));
        assert_eq!(AttestAddress::Peer.allows(&none, Some(peer), "10.0.0.1:9090"), Ok(()), "any port of its own");
        let err = AttestAddress::Peer.allows(&none, Some(peer), "10.0.0.2:8080").unwrap_err();
        assert!(err.starts_with("endpoint: \"10.0.0.2:8080\" is not the attesting sender's address 10.0.0.1"), "{err}");
        assert!(AttestAddress::Peer.allows(&none, None, "10.0.0.1:8080").is_err());
        let v6: SocketAddr = "[::ffff:10.0.0.1]:1".parse().unwrap();
        assert_eq!(AttestAddress::Peer.allows(&none, Some(v6), "10.0.0.1:8080"), Ok(()), "v4-mapped is v4");
        let header: AttestAddress = "header:x-tailweight-peer".parse().unwrap();
        let mut h = HeaderMap::new();
        assert!(header.allows(&h, Some(peer), "10.0.0.1:8080").unwrap_err().contains("missing"));
        h.insert("x-tailweight-peer", HeaderValue::from_static("10.0.0.7"));
        assert_eq!(header.allows(&h, Some(peer), "10.0.0.7:8080"), Ok(()));
        assert!(header.allows(&h, Some(peer), "10.0.0.1:8080").is_err(), "the header, not the peer");
        h.append("x-tailweight-peer", HeaderValue::from_static("10.0.0.1"));
        assert!(header.allows(&h, Some(peer), "10.0.0.1:8080").unwrap_err().contains("more than once"));
    }

    #[test]
    fn the_binding_reads_and_prints_as_its_flag() {
        for flag in ["unbound", "peer", "header:x-peer"] {
            assert_eq!(flag.parse::<AttestAddress>().unwrap().to_string(), flag);
        }
        assert!("ip".parse::<AttestAddress>().is_err());
    }
}
