//! `POST /v1/attest` (its thin handler is in `routes.rs`): a destination's server-role filter says
//! what its endpoint served, per source principal (`tailweight_wire::attest`); the weight book then counts each principal's reports
//! about the cluster only as far as that traffic goes (tailweight-weights' `callers.rs`). Who may
//! attest for a cluster is `--attest-rule`.

use crate::metrics::RejectReason;
use axum::http::StatusCode;
use std::fmt;
use std::str::FromStr;
use tailweight_wire::attest::read::{parse_attestation, AttestationError};
use tailweight_wire::attest::Attestation;
use tailweight_wire::validate::Invalid;

/// Who may attest for a cluster (`--attest-rule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttestRule {
    /// A principal (SPIFFE id `spiffe://<domain>/ns/<ns>/sa/<sa>`) in the namespace of the
    /// cluster's service (Istio's `outbound|<port>|<subset>|<svc>.<ns>.svc.<domain>`): the pods that
    /// can be its endpoints. Any other cluster name: nobody.
    Namespace,
    /// Any caller, whatever its identity (or none): for the meshless harness only, where nothing
    /// can tell a destination from anyone else.
    Any,
}

impl FromStr for AttestRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "namespace" => Ok(AttestRule::Namespace),
            "any" => Ok(AttestRule::Any),
            _ => Err(format!("attest rule: {s:?} is not namespace or any")),
        }
    }
}

impl fmt::Display for AttestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttestRule::Namespace => "namespace",
            AttestRule::Any => "any",
        })
    }
}

impl AttestRule {
    /// Whether `principal` (None: the identity source names none) may attest for `cluster`.
    pub fn allows(self, principal: Option<&str>, cluster: &str) -> bool {
        match self {
            AttestRule::Any => true,
            AttestRule::Namespace => match (principal.and_then(spiffe_namespace), service_namespace(cluster)) {
                (Some(theirs), Some(service)) => theirs == service,
                _ => false,
            },
        }
    }
}

/// The namespace of a SPIFFE id `spiffe://<domain>/ns/<ns>/sa/<sa>`.
fn spiffe_namespace(principal: &str) -> Option<&str> {
    let path = principal.strip_prefix("spiffe://")?.split_once('/')?.1;
    match path.split('/').collect::<Vec<_>>()[..] {
        ["ns", ns, "sa", sa] if !ns.is_empty() && !sa.is_empty() => Some(ns),
        _ => None,
    }
}

/// The namespace of an Istio cluster's service: `outbound|<port>|<subset>|<svc>.<ns>.svc.<...>`.
fn service_namespace(cluster: &str) -> Option<&str> {
    let mut parts = cluster.split('|');
    let (Some("outbound"), Some(_port), Some(_subset), Some(host), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let mut labels = host.split('.');
    let (Some(svc), Some(ns), Some("svc")) = (labels.next(), labels.next(), labels.next()) else { return None };
    (!svc.is_empty() && !ns.is_empty()).then_some(ns)
}

/// A read attestation body from `vouched` (None: the identity source names none), parsed and held
/// to `rule`: what the book may take. Err: the refusal's reason, status and one line.
pub(crate) fn accept(
    rule: AttestRule,
    vouched: Option<&str>,
    bytes: &[u8],
) -> Result<Attestation, (RejectReason, StatusCode, String)> {
    let attestation = parse_attestation(bytes).map_err(|e| {
        let reason = match e {
            AttestationError::TooLarge(_) => RejectReason::TooLarge,
            AttestationError::Malformed(_) => RejectReason::Malformed,
            AttestationError::Invalid(Invalid::UnsupportedVersion(_)) => RejectReason::UnsupportedVersion,
            AttestationError::Invalid(Invalid::Field { .. }) => RejectReason::Invalid,
        };
        (reason, StatusCode::BAD_REQUEST, e.to_string())
    })?;
    if !rule.allows(vouched, &attestation.cluster) {
        let line = format!(
            "principal: {:?} may not attest for {:?} (--attest-rule {rule})",
            vouched.unwrap_or(""),
            attestation.cluster
        );
        return Err((RejectReason::NotAllowed, StatusCode::FORBIDDEN, line));
    }
    Ok(attestation)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOP: &str = "outbound|8080||shop.prod.svc.cluster.local";

    #[test]
    fn only_principals_of_the_services_namespace_may_attest_by_default() {
        let rule = AttestRule::Namespace;
        assert!(rule.allows(Some("spiffe://cluster.local/ns/prod/sa/shop"), SHOP));
        assert!(rule.allows(Some("spiffe://td/ns/prod/sa/other"), "outbound|9090|v2|shop.prod.svc.example.org"));
        for (principal, cluster) in [
            (Some("spiffe://cluster.local/ns/dev/sa/attacker0"), SHOP),
            (Some("spiffe://cluster.local/ns/prod/sa/shop/extra"), SHOP),
            (Some("spiffe://cluster.local/ns/prod"), SHOP),
            (Some("prod"), SHOP),
            (None, SHOP),
            (Some("spiffe://cluster.local/ns/prod/sa/shop"), "inbound|8080||shop.prod.svc.cluster.local"),
            (Some("spiffe://cluster.local/ns/prod/sa/shop"), "outbound|8080||shop.prod"),
            (Some("spiffe://cluster.local/ns/prod/sa/shop"), "backends"),
        ] {
            assert!(!rule.allows(principal, cluster), "{principal:?} for {cluster}");
        }
        assert!(AttestRule::Any.allows(None, "backends"));
    }

    #[test]
    fn the_rule_reads_and_prints_as_its_flag() {
        for rule in [AttestRule::Namespace, AttestRule::Any] {
            assert_eq!(rule.to_string().parse::<AttestRule>(), Ok(rule));
        }
        assert_eq!("all".parse::<AttestRule>(), Err("attest rule: \"all\" is not namespace or any".into()));
    }
}
