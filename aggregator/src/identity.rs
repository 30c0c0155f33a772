//! Who sent a report: the principal the weight book bounds (one voice however many reporter ids it
//! uses, a share of each cap), from the source `--identity` names. Only the mesh can vouch for a
//! caller: a report's own `reporter` field is whatever the caller wrote.

use axum::http::{HeaderMap, HeaderName};
use std::fmt;
use std::str::FromStr;
use tailweight_wire::protocol::MAX_NAME_LEN;

/// The header Envoy writes the verified client certificate's details into.
pub const XFCC: &str = "x-forwarded-client-cert";

/// Where a report's principal comes from (`--identity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// The URI SAN (SPIFFE ID) of the last element of `x-forwarded-client-cert`: the element the
    /// aggregator's own sidecar appended after verifying the caller's certificate (Istio's inbound
    /// sidecars forward it with APPEND_FORWARD, so elements a caller sent come before it, and a
    /// plaintext caller's header is removed).
    Xfcc,
    /// The value of this header, set by a trusted proxy in front that removes it from callers.
    Header(HeaderName),
    /// The report's own `reporter` field: every caller is trusted to say who it is.
    Report,
}

impl FromStr for IdentitySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "xfcc" => Ok(IdentitySource::Xfcc),
            "report" => Ok(IdentitySource::Report),
            _ => match s.strip_prefix("header:") {
                Some(name) => HeaderName::from_str(name)
                    .map(IdentitySource::Header)
                    .map_err(|_| format!("identity: {name:?} is not a header name")),
                None => Err(format!("identity: {s:?} is not xfcc, header:<name> or report")),
            },
        }
    }
}

impl fmt::Display for IdentitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentitySource::Xfcc => f.write_str("xfcc"),
            IdentitySource::Header(name) => write!(f, "header:{name}"),
            IdentitySource::Report => f.write_str("report"),
        }
    }
}

/// Why a request has no usable principal; displays as one line naming the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    Missing(String),
    Malformed(String),
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::Missing(header) => write!(f, "{header}: missing (the caller's identity comes from it)"),
            IdentityError::Malformed(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for IdentityError {}

impl IdentitySource {
    /// The principal named by `headers` (None for `Report`: it comes with the body).
    pub fn principal(&self, headers: &HeaderMap) -> Result<Option<String>, IdentityError> {
        match self {
            IdentitySource::Report => Ok(None),
            IdentitySource::Header(name) => {
                let mut values = headers.get_all(name).iter();
                let (Some(value), None) = (values.next(), values.next()) else {
                    return Err(match headers.contains_key(name) {
                        true => IdentityError::Malformed(format!("{name}: appears more than once")),
                        false => IdentityError::Missing(name.to_string()),
                    });
                };
                let value =
                    value.to_str().map_err(|_| IdentityError::Malformed(format!("{name}: not visible ASCII")))?;
                checked(name.as_str(), value.trim()).map(Some)
            }
            IdentitySource::Xfcc => {
                // Several header lines are one list (RFC 9110), in order.
                let mut joined = Vec::new();
                for (i, value) in headers.get_all(XFCC).iter().enumerate() {
                    if i > 0 {
                        joined.push(b',');
                    }
                    joined.extend_from_slice(value.as_bytes());
                }
                if joined.is_empty() {
                    return Err(IdentityError::Missing(XFCC.to_string()));
                }
                xfcc_principal(&joined).map(Some)
            }
        }
    }
}

/// The URI SAN of the last element of an `x-forwarded-client-cert` value.
pub fn xfcc_principal(value: &[u8]) -> Result<String, IdentityError> {
    let elements = xfcc_parser::element_list(value)
        .map_err(|e| IdentityError::Malformed(format!("{XFCC}: cannot be parsed: {e}")))?;
    let last = elements.last().ok_or_else(|| IdentityError::Missing(XFCC.to_string()))?;
    let uri = last
        .uri
        .first()
        .ok_or_else(|| IdentityError::Malformed(format!("{XFCC}: the last element has no URI (no SPIFFE ID)")))?;
    checked(XFCC, uri)
}

/// A principal as the book may take it: not empty, at most `MAX_NAME_LEN` bytes, no control
/// characters.
fn checked(header: &str, principal: &str) -> Result<String, IdentityError> {
    if principal.is_empty() {
        return Err(IdentityError::Missing(header.to_string()));
    }
    if principal.len() > MAX_NAME_LEN || principal.chars().any(char::is_control) {
        return Err(IdentityError::Malformed(format!(
            "{header}: the identity is longer than {MAX_NAME_LEN} bytes or has control characters"
        )));
    }
    Ok(principal.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// What an Istio sidecar appends (Envoy's format: By, Hash, then Subject, URI and DNS as
    /// configured; Istio sets Subject, URI and DNS, and its certificates have an empty subject).
    const ISTIO: &str = "By=spiffe://cluster.local/ns/tailweight/sa/tailweight-aggregator;\
        Hash=7a9a0e4f3c2b1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e;Subject=\"\";\
        URI=spiffe://cluster.local/ns/shop/sa/frontend";

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(XFCC, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_principal_is_the_uri_of_the_element_the_local_sidecar_appended() {
        let x = IdentitySource::Xfcc;
        assert_eq!(x.principal(&headers(&[ISTIO])).unwrap().unwrap(), "spiffe://cluster.local/ns/shop/sa/frontend");
        // Elements a caller sent itself come first; commas and semicolons inside quotes are data.
        let forged = format!("By=x;URI=spiffe://cluster.local/ns/shop/sa/admin;Subject=\"CN=a,O=b;c\",{ISTIO}");
        assert_eq!(x.principal(&headers(&[&forged])).unwrap().unwrap(), "spiffe://cluster.local/ns/shop/sa/frontend");
        // Two header lines are one list.
        let lines = headers(&["By=x;URI=spiffe://cluster.local/ns/a/sa/b", ISTIO]);
        assert_eq!(x.principal(&lines).unwrap().unwrap(), "spiffe://cluster.local/ns/shop/sa/frontend");
    }

    #[test]
    fn no_usable_identity_is_a_one_line_error_naming_the_header() {
        let x = IdentitySource::Xfcc;
        let cases = [
            (headers(&[]), "x-forwarded-client-cert: missing"),
            (headers(&["By=spiffe://a;Hash=00"]), "has no URI"),
            (headers(&["URI=\"unterminated"]), "cannot be parsed"),
            (headers(&[&format!("URI=spiffe://{}", "a".repeat(600))]), "longer than 512 bytes"),
        ];
        for (h, needle) in cases {
            let err = x.principal(&h).unwrap_err().to_string();
            assert!(err.contains(needle) && !err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_header_source_takes_one_value_and_report_takes_none() {
        let source: IdentitySource = "header:x-tailweight-principal".parse().unwrap();
        let mut h = HeaderMap::new();
        assert!(source.principal(&h).unwrap_err().to_string().starts_with("x-tailweight-principal: missing"));
        h.insert("x-tailweight-principal", HeaderValue::from_static(" team-a "));
        assert_eq!(source.principal(&h).unwrap().as_deref(), Some("team-a"));
        h.append("x-tailweight-principal", HeaderValue::from_static("team-b"));
        assert!(source.principal(&h).unwrap_err().to_string().contains("more than once"));
        assert_eq!(IdentitySource::Report.principal(&h), Ok(None));
        for bad in ["", "xfcc2", "header:", "header:bad header"] {
            assert!(bad.parse::<IdentitySource>().is_err(), "{bad}");
        }
        assert_eq!(source.to_string(), "header:x-tailweight-principal");
    }
}
