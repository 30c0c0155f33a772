//! Wire protocol v1 between filter and aggregator (JSON). See docs/wire-protocol.md.
//!
//! Counters in a report are cumulative since the reporter's `incarnation` began, so a lost report
//! loses nothing: the aggregator takes differences. Unknown fields are ignored (additions within v1);
//! anything else unexpected is rejected with a one-line reason naming the field.

use crate::json;
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;

pub use crate::address::is_endpoint_address;

pub const VERSION: u32 = 1;
pub const REPORT_PATH: &str = "/v1/report";
/// Header carrying the destination cluster of a report, for consistent hashing across aggregator replicas.
pub const SHARD_HEADER: &str = "x-tailweight-shard";

/// Largest accepted values; beyond them a report is nonsense, not load.
pub const MAX_NAME_LEN: usize = 512;
pub const MAX_INFLIGHT: u32 = 1_000_000;
pub const MAX_LATENCY_US: u64 = 3_600_000_000; // one hour
pub const MAX_CPU: f64 = 1_000.0;
pub const MAX_WEIGHT: f64 = 1e6;
pub const INTERVAL_MS: std::ops::RangeInclusive<u32> = 10..=600_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    /// Who reports: pod name and namespace, or the Envoy node id.
    pub reporter: String,
    /// Changes when the reporter restarts and its counters start again from zero.
    pub incarnation: u64,
    /// The reporter's tick; the aggregator expires a reporter after a few of them.
    pub interval_ms: u32,
    pub clusters: Vec<ClusterReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ClusterReport {
    /// Envoy cluster name, e.g. `outbound|8080||svc.ns.svc.cluster.local`.
    pub name: String,
    #[serde(deserialize_with = "presized_vec")]
    pub endpoints: Vec<EndpointReport>,
}

/// A JSON array into a Vec that starts with room for 16 (JSON gives no length up front, and
/// growing from nothing copies a typical report's endpoints three times).
fn presized_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Items<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Items<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(16).min(16));
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(Items(std::marker::PhantomData))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EndpointReport {
    /// `ip:port` as Envoy's `upstream.address`.
    pub address: String,
    /// Completed requests attributed to this endpoint (cumulative).
    pub requests: u64,
    /// Of those, failures: 5xx, resets, timeouts, failure gRPC statuses and overload answers, and
    /// attempts on it that Envoy retried elsewhere (cumulative).
    pub errors: u64,
    /// Sum of the latencies of the successful requests, microseconds (cumulative).
    pub latency_sum_us: u64,
    /// Requests in flight to this endpoint now.
    pub inflight: u32,
    /// Peak-EWMA latency estimate and the age of its last sample.
    pub latency_ewma_us: u64,
    pub latency_age_ms: u64,
    /// Last ORCA utilisation the endpoint reported, if any, and its age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_age_ms: Option<u64>,
    /// Age of the last good answer this reporter got from the endpoint (what keeps it tracked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_age_ms: Option<u64>,
}

impl EndpointReport {
    pub fn successes(&self) -> u64 {
        self.requests.saturating_sub(self.errors)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub version: u32,
    /// How long the view may be used; past it the filter goes back to local-only decisions.
    pub ttl_ms: u32,
    pub clusters: Vec<ClusterView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ClusterView {
    pub name: String,
    pub endpoints: Vec<EndpointView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EndpointView {
    pub address: String,
    /// Relative capacity; the mean over a cluster's endpoints is 1.
    pub weight: f64,
    /// Requests in flight to this endpoint from all live reporters, and from all but the one asking.
    pub inflight: f64,
    pub peer_inflight: f64,
    /// Merged latency estimate of successful requests.
    pub latency_us: u64,
    /// Utilisation (CPU) as last known from ORCA or the metrics store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Mostly failing: pick only to probe.
    #[serde(default)]
    pub ejected: bool,
}

/// The `:authority` of a report about `cluster`: `<16 hex digits of FNV-1a(cluster)>.<authority>`.
/// Envoy hashes a wasm `dispatch_http_call` on its `:authority` only (a hash policy hard-coded in the
/// host; a DestinationRule's `httpHeaderName` never applies to it), so with ring_hash/maglev on the
/// aggregator cluster the shard key must be in the authority. The raw cluster name cannot be:
/// `|` is not a host name character.
pub fn shard_authority(cluster: &str, authority: &str) -> String {
    let hash = crate::hash::fnv1a(cluster.bytes());
    format!("{hash:016x}.{authority}")
}

/// Caps that bound the memory one message can claim.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_clusters: usize,
    pub max_endpoints_per_cluster: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_clusters: 256, max_endpoints_per_cluster: 2048 }
    }
}

/// Why a report body was refused; displays as one line naming the problem (and the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// Not UTF-8, not JSON, or not shaped like a report (the parser's reason).
    Malformed(String),
    /// A `version` this side does not speak, whether or not the rest parses as v1.
    UnsupportedVersion(u32),
    /// A v1 report with a bad field (`Report::validate`'s line).
    Invalid(String),
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportError::Malformed(reason) => write!(f, "malformed report: {reason}"),
            ReportError::UnsupportedVersion(version) => f.write_str(&unsupported_version(*version)),
            ReportError::Invalid(line) => f.write_str(line),
        }
    }
}

impl std::error::Error for ReportError {}

/// Parse and validate a report.
pub fn parse_report(body: &[u8], limits: &Limits) -> Result<Report, ReportError> {
    // A future version may not even parse as v1: say what is wrong, not what failed.
    let malformed = |reason: String| match peek_version(body) {
        Some(version) if version != VERSION => ReportError::UnsupportedVersion(version),
        _ => ReportError::Malformed(reason),
    };
    // UTF-8 checked once for the whole body (a word at a time), not string by string inside the
    // parser: from a &str serde_json takes every string as it is.
    let text = std::str::from_utf8(body).map_err(|e| malformed(format!("not UTF-8: {e}")))?;
    let report: Report = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    if report.version != VERSION {
        return Err(ReportError::UnsupportedVersion(report.version));
    }
    report.validate(limits).map_err(ReportError::Invalid)?;
    Ok(report)
}

/// The `version` of a JSON object whatever else it holds (None: not an object with a version).
fn peek_version(body: &[u8]) -> Option<u32> {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    serde_json::from_slice::<VersionOnly>(body).ok().map(|v| v.version)
}

/// Parse and validate a reply (the filter's side: a bad reply is ignored, never used).
pub fn parse_reply(body: &[u8], limits: &Limits) -> Result<Reply, String> {
    let reply: Reply = serde_json::from_slice(body).map_err(|e| format!("malformed reply: {e}"))?;
    reply.validate(limits)?;
    Ok(reply)
}

impl Report {
    pub fn validate(&self, limits: &Limits) -> Result<(), String> {
        check_version(self.version)?;
        check_name("reporter", &self.reporter)?;
        if !INTERVAL_MS.contains(&self.interval_ms) {
            return Err(format!(
                "interval_ms: {} is outside {}..={}",
                self.interval_ms,
                INTERVAL_MS.start(),
                INTERVAL_MS.end()
            ));
        }
        check_clusters(self.clusters.iter().map(|c| (&c.name, c.endpoints.len())), limits)?;
        for (ci, cluster) in self.clusters.iter().enumerate() {
            check_unique_addresses(ci, cluster.endpoints.iter().map(|e| &e.address))?;
            for (ei, e) in cluster.endpoints.iter().enumerate() {
                let at = || format!("clusters[{ci}].endpoints[{ei}]");
                if e.errors > e.requests {
                    return Err(format!("{}: errors ({}) exceed requests ({})", at(), e.errors, e.requests));
                }
                if e.inflight > MAX_INFLIGHT {
                    return Err(format!("{}.inflight: {} is above {MAX_INFLIGHT}", at(), e.inflight));
                }
                if e.latency_ewma_us > MAX_LATENCY_US {
                    return Err(format!("{}.latency_ewma_us: {} is above one hour", at(), e.latency_ewma_us));
                }
                if let Some(cpu) = e.cpu {
                    // The field name is only formatted for the error (this runs per endpoint).
                    if !in_range(cpu, MAX_CPU) {
                        check_range(&format!("{}.cpu", at()), cpu, MAX_CPU)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Reply {
    pub fn validate(&self, limits: &Limits) -> Result<(), String> {
        check_version(self.version)?;
        check_clusters(self.clusters.iter().map(|c| (&c.name, c.endpoints.len())), limits)?;
        for (ci, cluster) in self.clusters.iter().enumerate() {
            check_unique_addresses(ci, cluster.endpoints.iter().map(|e| &e.address))?;
            for (ei, e) in cluster.endpoints.iter().enumerate() {
                let at = format!("clusters[{ci}].endpoints[{ei}]");
                check_range(&format!("{at}.weight"), e.weight, MAX_WEIGHT)?;
                check_range(&format!("{at}.inflight"), e.inflight, MAX_INFLIGHT as f64 * 1e3)?;
                check_range(&format!("{at}.peer_inflight"), e.peer_inflight, MAX_INFLIGHT as f64 * 1e3)?;
                if let Some(cpu) = e.cpu {
                    check_range(&format!("{at}.cpu"), cpu, MAX_CPU)?;
                }
            }
        }
        Ok(())
    }
}

fn check_version(version: u32) -> Result<(), String> {
    if version == VERSION {
        Ok(())
    } else {
        Err(unsupported_version(version))
    }
}

fn unsupported_version(version: u32) -> String {
    format!("version: {version} is not supported (this side speaks {VERSION})")
}

/// What `check_name` accepts, without formatting anything.
fn name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.chars().any(char::is_control)
}

fn check_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("{field}: longer than {MAX_NAME_LEN} bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{field}: contains control characters"));
    }
    Ok(())
}

fn check_clusters<'a>(
    clusters: impl ExactSizeIterator<Item = (&'a String, usize)> + Clone,
    limits: &Limits,
) -> Result<(), String> {
    if clusters.len() > limits.max_clusters {
        return Err(format!("clusters: {} is more than the limit of {}", clusters.len(), limits.max_clusters));
    }
    let repeated = first_repeat(clusters.clone().map(|(name, _)| name.as_str()));
    for (ci, (name, endpoints)) in clusters.enumerate() {
        if !name_ok(name) {
            check_name(&format!("clusters[{ci}].name"), name)?;
        }
        if repeated == Some(ci) {
            return Err(format!("clusters[{ci}].name: {} appears twice", json::quoted(name)));
        }
        if endpoints > limits.max_endpoints_per_cluster {
            return Err(format!(
                "clusters[{ci}].endpoints: {endpoints} is more than the limit of {}",
                limits.max_endpoints_per_cluster
            ));
        }
    }
    Ok(())
}

fn check_unique_addresses<'a>(
    ci: usize,
    mut addresses: impl Iterator<Item = &'a String> + Clone,
) -> Result<(), String> {
    for (ei, address) in addresses.clone().enumerate() {
        if !is_endpoint_address(address) {
            return Err(format!(
                "clusters[{ci}].endpoints[{ei}].address: {} is not ip:port",
                json::quoted(json::clip(address, 64))
            ));
        }
    }
    if let Some(ei) = first_repeat(addresses.clone().map(String::as_str)) {
        let dup = addresses.nth(ei).map_or("", String::as_str);
        return Err(format!("clusters[{ci}].endpoints[{ei}].address: {dup} appears twice"));
    }
    Ok(())
}

/// The position of the earliest second occurrence in `names` (what a scan in order would find
/// first). Sorted, duplicates are neighbours: cheaper than hashing every name of every message.
/// Sorted by a heap (`BinaryHeap::into_sorted_vec`), not `sort_unstable`: the same O(n log n),
/// and the filter's module (which checks every aggregator reply) carries a heap's sift instead of
/// pattern-defeating quicksort's ~4.6 KB for this one element type.
fn first_repeat<'a>(names: impl Iterator<Item = &'a str>) -> Option<usize> {
    let pairs: BinaryHeap<(&str, usize)> = names.enumerate().map(|(at, name)| (name, at)).collect();
    let sorted = pairs.into_sorted_vec();
    sorted.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).min()
}

fn in_range(value: f64, max: f64) -> bool {
    value.is_finite() && (0.0..=max).contains(&value)
}

fn check_range(field: &str, value: f64, max: f64) -> Result<(), String> {
    if in_range(value, max) {
        Ok(())
    } else {
        Err(format!("{field}: {} is outside 0..={}", json::number_text(value), json::number_text(max)))
    }
}

/// Records with every field set, for the tests of the modules that read and write them.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;

    /// An endpoint report with every field set (utilisation 0.625: exact in binary and decimal).
    pub fn endpoint_report(address: &str) -> EndpointReport {
        EndpointReport {
            address: address.into(),
            requests: 10,
            errors: 1,
            latency_sum_us: 9_000,
            inflight: 2,
            latency_ewma_us: 1_000,
            latency_age_ms: 5,
            cpu: Some(0.625),
            cpu_age_ms: Some(100),
            seen_age_ms: Some(7),
        }
    }

    /// A cluster view: one endpoint with every field set, one ejected with the defaults.
    pub fn cluster_view(name: &str) -> ClusterView {
        ClusterView {
            name: name.into(),
            endpoints: vec![
                EndpointView {
                    address: "10.0.0.1:80".into(),
                    weight: 1.4203,
                    inflight: 17.5,
                    peer_inflight: 14.0,
                    latency_us: 11_950,
                    cpu: Some(0.62),
                    ejected: false,
                },
                EndpointView { address: "10.0.0.2:80".into(), weight: 0.05, ejected: true, ..Default::default() },
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::samples::endpoint_report as endpoint;
    use super::*;

    fn report() -> Report {
        Report {
            version: VERSION,
            reporter: "client-0.default".into(),
            incarnation: 42,
            interval_ms: 1000,
            clusters: vec![ClusterReport {
                name: "outbound|8080||svc.ns.svc.cluster.local".into(),
                endpoints: vec![endpoint("10.0.0.1:8080"), endpoint("[::1]:80")],
            }],
        }
    }

    #[test]
    fn repeated_names_and_addresses_are_named_at_their_second_occurrence() {
        // Many clusters (past the small-report scan) and addresses out of order.
        let mut r = report();
        let c = r.clusters[0].clone();
        r.clusters = (0..20).map(|i| ClusterReport { name: format!("c{i}"), ..c.clone() }).collect();
        r.clusters[18].name = "c3".into();
        let err = r.validate(&Limits::default()).unwrap_err();
        assert!(err.starts_with("clusters[18].name: \"c3\" appears twice"), "{err}");
        r.clusters[18].name = "c18".into();
        r.clusters[5].endpoints =
            ["10.0.0.9:1", "10.0.0.2:1", "10.0.0.5:1", "10.0.0.2:1", "10.0.0.9:1"].map(endpoint).to_vec();
        let err = r.validate(&Limits::default()).unwrap_err();
        assert!(err.starts_with("clusters[5].endpoints[3].address: 10.0.0.2:1 appears twice"), "{err}");
        r.clusters[5].endpoints.truncate(3);
        assert_eq!(r.validate(&Limits::default()), Ok(()));
    }

    #[test]
    fn report_round_trips() {
        let r = report();
        let body = serde_json::to_vec(&r).unwrap();
        assert_eq!(parse_report(&body, &Limits::default()).unwrap(), r);
    }

    #[test]
    fn unknown_fields_are_ignored_for_forward_compatibility() {
        let mut v = serde_json::to_value(report()).unwrap();
        v["future_field"] = serde_json::json!(1);
        assert!(parse_report(v.to_string().as_bytes(), &Limits::default()).is_ok());
    }

    fn rejected(mutate: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = serde_json::to_value(report()).unwrap();
        mutate(&mut v);
        parse_report(v.to_string().as_bytes(), &Limits { max_clusters: 2, max_endpoints_per_cluster: 3 })
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn each_bad_report_names_its_problem() {
        use serde_json::json;
        type Edit = Box<dyn FnOnce(&mut serde_json::Value)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|v| v["version"] = json!(2)), "version: 2 is not supported"),
            (Box::new(|v| v["reporter"] = json!("")), "reporter: must not be empty"),
            (Box::new(|v| v["reporter"] = json!("a\nb")), "control characters"),
            (Box::new(|v| v["interval_ms"] = json!(0)), "interval_ms: 0 is outside"),
            (Box::new(|v| v["interval_ms"] = json!("1000")), "malformed report: invalid type"),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["requests"] = json!(-1)), "malformed report"),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["errors"] = json!(11)), "errors (11) exceed requests (10)"),
            (
                Box::new(|v| v["clusters"][0]["endpoints"][0]["address"] = json!("pod-a")),
                "address: \"pod-a\" is not ip:port",
            ),
            (Box::new(|v| v["clusters"][0]["endpoints"][1]["address"] = json!("10.0.0.1:8080")), "appears twice"),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["cpu"] = json!(1e9)), "endpoints[0].cpu"),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["inflight"] = json!(2_000_000)), "inflight: 2000000"),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["latency_ewma_us"] = json!(u64::MAX)), "above one hour"),
            (Box::new(|v| v["clusters"][0]["name"] = json!("")), "clusters[0].name"),
            (
                Box::new(|v| {
                    let c = v["clusters"][0].clone();
                    v["clusters"] = json!([c.clone(), c]);
                }),
                "appears twice",
            ),
            (
                Box::new(|v| {
                    let c = v["clusters"][0].clone();
                    v["clusters"] = json!([c.clone(), c.clone(), c]);
                }),
                "clusters: 3 is more than the limit of 2",
            ),
            (
                Box::new(|v| {
                    let e = v["clusters"][0]["endpoints"][0].clone();
                    v["clusters"][0]["endpoints"] = json!([e.clone(), e.clone(), e.clone(), e]);
                }),
                "endpoints: 4 is more than the limit of 3",
            ),
        ];
        for (mutate, needle) in cases {
            let err = rejected(mutate);
            assert!(err.contains(needle), "expected {needle:?} in {err:?}");
            assert!(!err.contains('\n'), "one line: {err:?}");
        }
    }

    #[test]
    fn malformed_json_is_rejected() {
        for body in [&b""[..], b"{", b"[]", b"null", b"\xff\xfe", b"{\"version\":1}"] {
            assert!(parse_report(body, &Limits::default()).unwrap_err().to_string().starts_with("malformed report"));
        }
        // Bad UTF-8 inside a string is refused (the whole body is checked at once), and so is a
        // non-array where the endpoints go.
        let good = serde_json::to_vec(&report()).unwrap();
        let at = good.windows(3).position(|w| w == b"10.").unwrap();
        let mut bad = good.clone();
        bad[at] = 0xC3;
        assert!(parse_report(&bad, &Limits::default())
            .unwrap_err()
            .to_string()
            .starts_with("malformed report: not UTF-8"));
        let text = String::from_utf8(good)
            .unwrap()
            .replacen("\"endpoints\":[", "\"endpoints\":{\"a\":[", 1)
            .replacen("]}]", "]}}]", 1);
        let err = parse_report(text.as_bytes(), &Limits::default()).unwrap_err().to_string();
        assert!(err.starts_with("malformed report: invalid type: map, expected a sequence"), "{err}");
    }

    #[test]
    fn report_errors_say_which_kind_they_are() {
        let parse = |body: &str| parse_report(body.as_bytes(), &Limits::default()).unwrap_err();
        let mut v = serde_json::to_value(report()).unwrap();
        v["version"] = serde_json::json!(2);
        // A future version, whether or not the rest parses as v1.
        assert_eq!(parse(&v.to_string()), ReportError::UnsupportedVersion(2));
        assert_eq!(parse(r#"{"version": 3, "something": "else"}"#), ReportError::UnsupportedVersion(3));
        assert_eq!(
            ReportError::UnsupportedVersion(3).to_string(),
            format!("version: 3 is not supported (this side speaks {VERSION})")
        );
        assert!(matches!(parse(r#"{"version": 1}"#), ReportError::Malformed(_)));
        assert!(matches!(parse("{"), ReportError::Malformed(_)));
        v["version"] = serde_json::json!(1);
        v["reporter"] = serde_json::json!("");
        assert_eq!(parse(&v.to_string()), ReportError::Invalid("reporter: must not be empty".into()));
    }

    #[test]
    fn reply_validation_rejects_non_finite_and_negative_numbers() {
        let reply = Reply {
            version: VERSION,
            ttl_ms: 3000,
            clusters: vec![ClusterView {
                name: "c".into(),
                endpoints: vec![EndpointView { address: "10.0.0.1:80".into(), weight: -1.0, ..Default::default() }],
            }],
        };
        let err = reply.validate(&Limits::default()).unwrap_err();
        assert!(err.contains("weight: -1 is outside"), "{err}");
        let body = serde_json::to_vec(&Reply { clusters: vec![], ..reply }).unwrap();
        assert!(parse_reply(&body, &Limits::default()).is_ok());
    }

    #[test]
    fn shard_authority_is_a_stable_host_name_per_cluster() {
        let a = shard_authority("outbound|8080||cart.shop.svc.cluster.local", "agg.tailweight.svc");
        assert_eq!(a, shard_authority("outbound|8080||cart.shop.svc.cluster.local", "agg.tailweight.svc"));
        assert_ne!(a, shard_authority("outbound|8080||catalog.shop.svc.cluster.local", "agg.tailweight.svc"));
        assert!(a.ends_with(".agg.tailweight.svc") && a.len() == 16 + 1 + 18, "{a}");
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'), "{a}");
        // FNV-1a 64 of the empty string is its offset basis.
        assert_eq!(shard_authority("", "x"), "cbf29ce484222325.x");
    }

    #[test]
    fn endpoint_addresses() {
        assert!(is_endpoint_address("127.0.0.1:8080"));
        assert!(is_endpoint_address("[2001:db8::1]:443"));
        for bad in ["127.0.0.1", "host:80", "127.0.0.1:99999", "", ":80", "1.2.3.4:80,5.6.7.8:80"] {
            assert!(!is_endpoint_address(bad), "{bad}");
        }
    }
}
