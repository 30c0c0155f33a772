//! The aggregator's parsers of outside input besides the report (which `report` covers): the
//! caller's identity from `x-forwarded-client-cert` and the Prometheus query API's responses.

use http::{HeaderMap, HeaderName, HeaderValue};
use tailweight_aggregator::cpu_source::{cpu_by_ip, parse_vector, IpSource};
use tailweight_aggregator::identity::{xfcc_principal, IdentitySource, XFCC};
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::protocol::{MAX_CPU, MAX_NAME_LEN};

use crate::check::one_line;

/// What an Istio sidecar in front of the aggregator appends after verifying the caller's
/// certificate (Envoy's format, as in identity.rs's tests).
const APPENDED: &str = "By=spiffe://cluster.local/ns/tailweight/sa/tailweight-aggregator;\
    Hash=7a9a0e4f3c2b1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e;Subject=\"\";\
    URI=spiffe://cluster.local/ns/shop/sa/frontend";
const APPENDED_URI: &str = "spiffe://cluster.local/ns/shop/sa/frontend";

/// The headers of a request whose header lines (of one name) are `data`'s lines; lines a request
/// could not carry (control characters) are left out, as hyper refuses them.
fn header_lines(name: &'static str, data: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// A principal the book may take: not empty, at most `MAX_NAME_LEN` bytes, no control characters.
fn assert_usable(principal: &str) {
    assert!(!principal.is_empty() && principal.len() <= MAX_NAME_LEN, "{principal:?}");
    assert!(!principal.chars().any(char::is_control), "{principal:?}");
}

/// The XFCC path as a request runs it (`IdentitySource::principal`, header lines joined), and the
/// property the identity rests on: whatever a caller sent before it, once the aggregator's own
/// sidecar appends the element of the certificate it verified, the principal is that element's
/// URI or the request is refused; never a URI the caller chose. The `header:` source alike.
pub fn xfcc(data: &[u8]) {
    let headers = header_lines(XFCC, data);
    match IdentitySource::Xfcc.principal(&headers) {
        Ok(Some(principal)) => assert_usable(&principal),
        Ok(None) => panic!("the xfcc source gave no principal and no error"),
        Err(e) => one_line(e),
    }
    let mut appended = data.to_vec();
    appended.push(b',');
    appended.extend_from_slice(APPENDED.as_bytes());
    match xfcc_principal(&appended) {
        Ok(principal) => assert_eq!(principal, APPENDED_URI, "a caller chose its principal"),
        Err(e) => one_line(e),
    }
    let source = IdentitySource::Header(HeaderName::from_static("x-p"));
    match source.principal(&header_lines("x-p", data)) {
        Ok(Some(principal)) => assert_usable(&principal),
        Ok(None) => panic!("a header source gave no principal and no error"),
        Err(e) => one_line(e),
    }
}

/// A Prometheus `/api/v1/query` response: parsed as the CPU poller parses it, mapped to IPs both
/// ways (an address label; pod names joined by the same response as the pod -> IP series), and
/// handed to a weight book. Every utilisation that comes out is finite and non-negative.
pub fn prometheus(data: &[u8]) {
    let series = match parse_vector(data) {
        Ok(series) => series,
        Err(e) => return one_line(e),
    };
    let pod = IpSource::Pod { pod_label: "pod".into(), query: String::new(), ip_label: "pod_ip".into() };
    let mut book = WeightBook::new(WeightParams::default());
    for source in [IpSource::Label("instance".into()), pod] {
        let by_ip = cpu_by_ip(&series, &source, &series);
        for (ip, cpu) in by_ip {
            assert!(cpu.is_finite() && cpu >= 0.0, "{ip}: {cpu}");
            book.set_external_cpu(ip, cpu, 1_000_000);
            if let Some((kept, _)) = book.external_cpu(ip) {
                assert!(kept.is_finite() && (0.0..=MAX_CPU).contains(&kept), "{ip}: {kept}");
            }
        }
    }
}
