//! The aggregator's parsers of outside input besides the report (which `report` covers): the
//! caller's identity from `x-forwarded-client-cert`, the Prometheus query API's responses and the
//! destinations' attestations.

use http::{HeaderMap, HeaderName, HeaderValue};
use tailweight_aggregator::attest::AttestRule;
use tailweight_aggregator::cpu_source::{cpu_by_ip, parse_vector, IpSource};
use tailweight_aggregator::identity::{xfcc_principal, IdentitySource, XFCC};
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::attest::read::parse_attestation;
use tailweight_wire::attest::write::write_attestation;
use tailweight_wire::protocol::{MAX_CPU, MAX_NAME_LEN, VERSION};
use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

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

/// An attestation body (`POST /v1/attest`): read and validated as the aggregator reads it
/// (`attest::read`, size first); what passes round-trips through the filter's writer
/// (`attest::write`), is judged by `--attest-rule` (never a panic, `any` always allows), and enters
/// a weight book twice (the second a later cumulative count, as the next window's) beside reports
/// from its first source principal and from one it does not name, about its endpoint; the
/// recomputed weights stay finite and non-negative.
pub fn attest(data: &[u8]) {
    let attestation = match parse_attestation(data) {
        Ok(a) => a,
        Err(e) => return one_line(e),
    };
    let again = parse_attestation(&write_attestation(&attestation)).expect("a written attestation parses again");
    assert_eq!(again, attestation, "a read attestation round-trips through the filter's writer");
    let cluster = attestation.cluster.as_str();
    assert!(AttestRule::Any.allows(None, cluster));
    for s in &attestation.sources {
        AttestRule::Namespace.allows(Some(&s.principal), cluster);
    }
    let mut book = WeightBook::new(WeightParams::default());
    let caller = attestation.sources.first().map_or("nobody", |s| s.principal.as_str());
    let mut later = attestation.clone();
    for s in &mut later.sources {
        (s.requests, s.errors) = (s.requests.saturating_add(10), s.errors.saturating_add(1));
    }
    for (k, a) in [&attestation, &later].into_iter().enumerate() {
        let now = 1_000_000 * (k as u64 + 1);
        if let Err(e) = book.attest(a, now) {
            return one_line(e);
        }
        for (principal, reporter) in [(caller, "caller"), ("spiffe://td/ns/elsewhere/sa/other", "other")] {
            let report = endpoint_report(reporter, cluster, &a.endpoint, 20 * (k as u64 + 1));
            if let Err(e) = book.ingest_as(&report, principal, now) {
                return one_line(e);
            }
        }
        book.recompute(now);
    }
    for decision in book.decisions_of(std::iter::once(cluster)) {
        assert!(decision.endpoints.iter().all(|e| e.weight.is_finite() && e.weight >= 0.0), "{cluster}");
    }
}

/// A report of `requests` (cumulative, half failed) to `endpoint` of `cluster` from `reporter`.
fn endpoint_report(reporter: &str, cluster: &str, endpoint: &str, requests: u64) -> Report {
    let endpoint = EndpointReport {
        address: endpoint.to_string(),
        requests,
        errors: requests / 2,
        latency_sum_us: requests * 5_000,
        inflight: 1,
        latency_ewma_us: 5_000,
        latency_age_ms: 10,
        ..EndpointReport::default()
    };
    let clusters = vec![ClusterReport { name: cluster.to_string(), endpoints: vec![endpoint] }];
    Report { version: VERSION, reporter: reporter.to_string(), incarnation: 1, interval_ms: 1_000, clusters }
}
