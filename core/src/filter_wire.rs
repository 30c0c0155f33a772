//! The filter's half of the wire protocol (`wire`): writing a report and reading a reply as JSON
//! with `json` instead of serde, for the module's size (see `json`). The aggregator reads reports
//! and writes replies with serde_json; tests check both sides agree byte for byte or value for value.

use crate::json::{self, FieldError, Fields, Value};
use crate::wire::{ClusterView, EndpointView, Limits, Reply, Report};

/// The report as JSON, fields in `Report`'s order (what serde would write, except that utilisation
/// is written with 6 decimals).
pub fn write_report(report: &Report) -> Vec<u8> {
    let endpoints: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
    let mut out = Vec::with_capacity(128 + report.clusters.len() * 64 + endpoints * 200);
    out.extend_from_slice(b"{\"version\":");
    json::write_u64(&mut out, u64::from(report.version));
    out.extend_from_slice(b",\"reporter\":");
    json::write_str(&mut out, &report.reporter);
    out.extend_from_slice(b",\"incarnation\":");
    json::write_u64(&mut out, report.incarnation);
    out.extend_from_slice(b",\"interval_ms\":");
    json::write_u64(&mut out, u64::from(report.interval_ms));
    out.extend_from_slice(b",\"clusters\":[");
    for (ci, c) in report.clusters.iter().enumerate() {
        if ci > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        json::write_str(&mut out, &c.name);
        out.extend_from_slice(b",\"endpoints\":[");
        for (ei, e) in c.endpoints.iter().enumerate() {
            if ei > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"address\":");
            json::write_str(&mut out, &e.address);
            for (key, n) in [
                (&b",\"requests\":"[..], e.requests),
                (b",\"errors\":", e.errors),
                (b",\"latency_sum_us\":", e.latency_sum_us),
                (b",\"inflight\":", u64::from(e.inflight)),
                (b",\"latency_ewma_us\":", e.latency_ewma_us),
                (b",\"latency_age_ms\":", e.latency_age_ms),
            ] {
                out.extend_from_slice(key);
                json::write_u64(&mut out, n);
            }
            if let Some(cpu) = e.cpu {
                out.extend_from_slice(b",\"cpu\":");
                json::write_decimal6(&mut out, cpu);
            }
            for (key, n) in [(&b",\"cpu_age_ms\":"[..], e.cpu_age_ms), (b",\"seen_age_ms\":", e.seen_age_ms)] {
                if let Some(n) = n {
                    out.extend_from_slice(key);
                    json::write_u64(&mut out, n);
                }
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
    out
}

/// Parse and validate a reply (a bad reply is ignored, never used); the error is one line naming
/// the field. Unknown fields are ignored (additions within v1).
pub fn read_reply(body: &[u8], limits: &Limits) -> Result<Reply, String> {
    let text = std::str::from_utf8(body).map_err(|_| "malformed reply: not UTF-8".to_string())?;
    let value = json::parse(text).map_err(|e| format!("malformed reply: {e}"))?;
    let reply = reply_of(&value).map_err(|e| format!("malformed reply: {e}"))?;
    reply.validate(limits)?;
    Ok(reply)
}

fn reply_of(value: &Value) -> Result<Reply, FieldError> {
    // Each object's fields are read, then its first bad field reported (see `Fields`), before the
    // objects inside it: the error is the first in the order of the text.
    let mut f = Fields::new("", members(value, "reply")?);
    let version = u32_field(&mut f, "version");
    let ttl_ms = u32_field(&mut f, "ttl_ms");
    let cluster_values = required_array(&mut f, "clusters");
    f.finish()?;
    // Loops rather than collecting Results: each collect is its own iterator code in the module.
    let mut clusters = Vec::with_capacity(cluster_values.len());
    for (ci, c) in cluster_values.iter().enumerate() {
        let mut f = Fields::new(format!("clusters[{ci}]."), members(c, &format!("clusters[{ci}]"))?);
        let name = f.required_string("name", usize::MAX);
        let endpoint_values = required_array(&mut f, "endpoints");
        f.finish()?;
        let mut endpoints = Vec::with_capacity(endpoint_values.len());
        for (ei, e) in endpoint_values.iter().enumerate() {
            let at = format!("clusters[{ci}].endpoints[{ei}]");
            let mut f = Fields::new(format!("{at}."), members(e, &at)?);
            endpoints.push(EndpointView {
                address: f.required_string("address", usize::MAX),
                weight: number_field(&mut f, "weight"),
                inflight: number_field(&mut f, "inflight"),
                peer_inflight: number_field(&mut f, "peer_inflight"),
                latency_us: u64_field(&mut f, "latency_us"),
                cpu: f.get("cpu").and_then(|v| number_of(&mut f, "cpu", v)),
                ejected: f.boolean("ejected", false),
            });
            f.finish()?;
        }
        clusters.push(ClusterView { name, endpoints });
    }
    Ok(Reply { version, ttl_ms, clusters })
}

fn members<'a>(value: &'a Value, what: &str) -> Result<&'a [(String, Value)], FieldError> {
    match value {
        Value::Object(members) => Ok(members),
        other => {
            Err(FieldError { field: what.to_string(), problem: format!("expected an object, got {}", other.kind()) })
        }
    }
}

// The readers below note a bad or missing field in `f` and read it as 0 (or nothing).

fn required<'a>(f: &mut Fields<'a>, key: &'static str) -> Option<&'a Value> {
    let value = f.get(key);
    if value.is_none() {
        f.fail(f.error(key, "required".into()));
    }
    value
}

fn required_array<'a>(f: &mut Fields<'a>, key: &'static str) -> &'a [Value] {
    let items = f.array(key);
    if items.is_none() {
        // Present but not an array: that error was noted first and stays.
        f.fail(f.error(key, "required".into()));
    }
    items.unwrap_or_default()
}

fn u64_field(f: &mut Fields, key: &'static str) -> u64 {
    let Some(v) = required(f, key) else { return 0 };
    v.as_u64().unwrap_or_else(|| {
        f.fail(f.unexpected(key, "a non-negative integer", v));
        0
    })
}

fn u32_field(f: &mut Fields, key: &'static str) -> u32 {
    let Some(v) = required(f, key) else { return 0 };
    v.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or_else(|| {
        f.fail(f.unexpected(key, "an integer in 0..=4294967295", v));
        0
    })
}

fn number_field(f: &mut Fields, key: &'static str) -> f64 {
    required(f, key).and_then(|v| number_of(f, key, v)).unwrap_or(0.0)
}

fn number_of(f: &mut Fields, key: &'static str, v: &Value) -> Option<f64> {
    let number = v.as_f64();
    if number.is_none() {
        f.fail(f.unexpected(key, "a number", v));
    }
    number
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, samples, ClusterReport, EndpointReport};

    fn report() -> Report {
        Report {
            version: wire::VERSION,
            reporter: "client-\"0\".default\u{7f}é".into(),
            incarnation: u64::MAX,
            interval_ms: 1000,
            clusters: vec![
                ClusterReport {
                    name: "outbound|8080||svc.ns.svc.cluster.local".into(),
                    endpoints: vec![
                        samples::endpoint_report("10.0.0.1:8080"),
                        EndpointReport { address: "[::1]:80".into(), ..Default::default() },
                    ],
                },
                ClusterReport { name: "empty".into(), endpoints: vec![] },
            ],
        }
    }

    #[test]
    fn a_written_report_is_what_serde_writes_and_the_aggregator_reads() {
        let r = report();
        let ours = write_report(&r);
        let theirs = serde_json::to_vec(&r).unwrap();
        // The same document but for utilisation's decimals.
        let text = String::from_utf8(ours.clone()).unwrap().replace("\"cpu\":0.625000", "\"cpu\":0.625");
        assert_eq!(text.as_bytes(), theirs.as_slice());
        let parsed: Report = serde_json::from_slice(&ours).unwrap();
        assert_eq!(parsed, r);
    }

    fn reply() -> Reply {
        Reply { version: wire::VERSION, ttl_ms: 3000, clusters: vec![samples::cluster_view("c")] }
    }

    #[test]
    fn reads_what_the_aggregator_writes() {
        let body = serde_json::to_vec(&reply()).unwrap();
        assert_eq!(read_reply(&body, &Limits::default()), Ok(reply()));
        // Unknown fields are ignored; a missing optional one takes its default.
        let mut v = serde_json::to_value(reply()).unwrap();
        v["future"] = serde_json::json!({"x": 1});
        v["clusters"][0]["endpoints"][0]["also_future"] = serde_json::json!([1]);
        v["clusters"][0]["endpoints"][1].as_object_mut().unwrap().remove("ejected");
        let read = read_reply(v.to_string().as_bytes(), &Limits::default()).unwrap();
        assert!(!read.clusters[0].endpoints[1].ejected);
    }

    #[test]
    fn a_bad_reply_names_its_problem_in_one_line() {
        use serde_json::json;
        for (edit, needle) in [
            (json!({"version": 1, "ttl_ms": 1}), "malformed reply: field `clusters`: required"),
            (json!([1]), "malformed reply: field `reply`: expected an object, got an array"),
            (
                json!({"version": -1, "ttl_ms": 1, "clusters": []}),
                "field `version`: expected an integer in 0..=4294967295, got -1",
            ),
            (json!({"version": 2, "ttl_ms": 1, "clusters": []}), "version: 2 is not supported"),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [{"address": "a:1"}]}]}),
                "field `clusters[0].endpoints[0].weight`: required",
            ),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                    {"address": "10.0.0.1:80", "weight": "x", "inflight": 0, "peer_inflight": 0, "latency_us": 0}]}]}),
                "field `clusters[0].endpoints[0].weight`: expected a number, got \"x\"",
            ),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                    {"address": "10.0.0.1:80", "weight": -1, "inflight": 0, "peer_inflight": 0, "latency_us": 0}]}]}),
                "weight: -1 is outside",
            ),
            // Several bad fields: the first in the text is reported.
            (json!({"ttl_ms": "x", "clusters": 1}), "field `version`: required"),
            (json!({"version": 1, "ttl_ms": "x", "clusters": 1}), "field `ttl_ms`: expected an integer"),
            (json!({"version": 1, "ttl_ms": 1, "clusters": 1}), "field `clusters`: expected an array, got 1"),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"endpoints": [{"address": 1}]}]}),
                "field `clusters[0].name`: required",
            ),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                    {"address": 1, "weight": "x", "ejected": 2}]}]}),
                "field `clusters[0].endpoints[0].address`: expected a non-empty string",
            ),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                    {"address": "10.0.0.1:80", "weight": 1, "inflight": 0, "peer_inflight": 0, "latency_us": 0,
                     "cpu": "x", "ejected": 2}]}]}),
                "field `clusters[0].endpoints[0].cpu`: expected a number",
            ),
            (
                json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                    {"address": "10.0.0.1:80", "weight": 1, "inflight": 0, "peer_inflight": 0, "latency_us": 0,
                     "ejected": 2}, 7]}]}),
                "field `clusters[0].endpoints[0].ejected`: expected true or false",
            ),
        ] {
            let err = read_reply(edit.to_string().as_bytes(), &Limits::default()).unwrap_err();
            assert!(err.contains(needle), "expected {needle:?} in {err:?}");
            assert!(!err.contains('\n'));
        }
        assert_eq!(read_reply(b"\xff", &Limits::default()).unwrap_err(), "malformed reply: not UTF-8");
        assert!(read_reply(b"{", &Limits::default()).unwrap_err().starts_with("malformed reply: unexpected end"));
    }
}
