use super::read::{read_reply, ReplyError};
use super::samples::cluster_view;
use super::*;
use crate::protocol::VERSION;

fn reply() -> Reply {
    Reply { version: VERSION, ttl_ms: 3000, clusters: vec![cluster_view("c")] }
}

/// The sample reply as the aggregator writes it (serde_json's formatting).
fn reply_value() -> serde_json::Value {
    serde_json::json!({"version": 1, "ttl_ms": 3000, "clusters": [{"name": "c", "reporters": 3, "endpoints": [
        {"address": "10.0.0.1:80", "weight": 1.4203, "inflight": 17.5, "peer_inflight": 14.0, "latency_us": 11950,
         "cpu": 0.62, "ejected": false, "served_age_ms": 250},
        {"address": "10.0.0.2:80", "weight": 0.05, "inflight": 0.0, "peer_inflight": 0.0, "latency_us": 0,
         "ejected": true},
    ]}]})
}

#[test]
fn reads_what_the_aggregator_writes() {
    let body = serde_json::to_vec(&reply_value()).unwrap();
    assert_eq!(read_reply(&body, &Limits::default()), Ok(reply()));
    // Unknown fields are ignored; a missing optional one takes its default.
    let mut v = reply_value();
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
        (
            json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "endpoints": [
                {"address": "10.0.0.1:80", "weight": 1, "inflight": 0, "peer_inflight": 0, "latency_us": 0,
                 "served_age_ms": -3}]}]}),
            "field `clusters[0].endpoints[0].served_age_ms`: expected a non-negative integer, got -3",
        ),
        (
            json!({"version": 1, "ttl_ms": 1, "clusters": [{"name": "c", "reporters": 4294967296_u64, "endpoints": []}]}),
            "field `clusters[0].reporters`: expected an integer in 0..=4294967295",
        ),
    ] {
        let err = read_reply(edit.to_string().as_bytes(), &Limits::default()).unwrap_err().to_string();
        assert!(err.contains(needle), "expected {needle:?} in {err:?}");
        assert!(!err.contains('\n'));
    }
    assert_eq!(read_reply(b"\xff", &Limits::default()).unwrap_err().to_string(), "malformed reply: not UTF-8");
    assert!(read_reply(b"{", &Limits::default())
        .unwrap_err()
        .to_string()
        .starts_with("malformed reply: unexpected end"));
}

#[test]
fn reply_errors_say_which_kind_they_are() {
    let read = |body: &str| read_reply(body.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(read_reply(b"\xff", &Limits::default()), Err(ReplyError::NotUtf8));
    assert!(matches!(read("{"), ReplyError::NotJson(_)));
    assert!(matches!(read("[1]"), ReplyError::NotAReply(_)));
    let v2 = r#"{"version": 2, "ttl_ms": 1, "clusters": []}"#;
    assert_eq!(read(v2), ReplyError::Invalid(Invalid::UnsupportedVersion(2)));
}

#[test]
fn reply_validation_rejects_non_finite_and_negative_numbers() {
    let reply = Reply {
        version: VERSION,
        ttl_ms: 3000,
        clusters: vec![ClusterView {
            name: "c".into(),
            reporters: None,
            endpoints: vec![EndpointView { address: "10.0.0.1:80".into(), weight: -1.0, ..Default::default() }],
        }],
    };
    let err = reply.validate(&Limits::default()).unwrap_err().to_string();
    assert!(err.contains("weight: -1 is outside"), "{err}");
    for weight in [f64::NAN, f64::INFINITY] {
        let mut bad = reply.clone();
        bad.clusters[0].endpoints[0].weight = weight;
        assert!(bad.validate(&Limits::default()).is_err(), "{weight}");
    }
    assert_eq!(Reply { clusters: vec![], ..reply }.validate(&Limits::default()), Ok(()));
}

/// The filter's reader, on what the aggregator's writer wrote.
#[cfg(feature = "serde")]
mod round_trip {
    use super::super::write::write_reply;
    use super::*;
    use crate::protocol::{MAX_CPU, MAX_INFLIGHT, MAX_WEIGHT};
    use crate::test_support::{address, unique_by, NAME};
    use proptest::prelude::*;

    #[test]
    fn the_aggregator_writes_the_document_of_the_protocol() {
        let written: serde_json::Value = serde_json::from_slice(&write_reply(&reply())).unwrap();
        assert_eq!(written, reply_value());
        assert_eq!(read_reply(&write_reply(&reply()), &Limits::default()), Ok(reply()));
    }

    /// A truncated cluster says how many endpoints it left out (`omitted`), and a reader that
    /// does not know the field (this one reads no such field) reads the rest as if it were not
    /// there.
    #[test]
    fn a_reader_that_does_not_know_omitted_reads_the_truncated_view() {
        let mut begun = Vec::new();
        super::super::write::begin_cluster(&mut begun, "c", Some(3), 7);
        assert_eq!(begun, br#"{"name":"c","reporters":3,"omitted":7,"endpoints":["#);
        let plain = String::from_utf8(write_reply(&reply())).unwrap();
        let truncated =
            plain.replace(r#"{"name":"c","reporters":3,"endpoints":["#, std::str::from_utf8(&begun).unwrap());
        assert_ne!(truncated, plain);
        assert_eq!(read_reply(truncated.as_bytes(), &Limits::default()), Ok(reply()));
    }

    /// A number in `0..=max`: round ones, and any.
    fn number(max: f64) -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.0), (0u32..1_000).prop_map(f64::from), 0.0..=max]
    }

    fn any_endpoint() -> impl Strategy<Value = EndpointView> {
        let inflight = MAX_INFLIGHT as f64 * 1e3;
        let numbers = (number(MAX_WEIGHT), number(inflight), number(inflight), proptest::option::of(number(MAX_CPU)));
        let flags = (any::<bool>(), proptest::option::of(any::<u64>()));
        (0u32..1_000_000, numbers, any::<u64>(), flags).prop_map(
            |(at, (weight, inflight, peer_inflight, cpu), latency_us, (ejected, served_age_ms))| EndpointView {
                address: address(at),
                weight,
                inflight,
                peer_inflight,
                latency_us,
                cpu,
                ejected,
                served_age_ms,
            },
        )
    }

    fn any_reply() -> impl Strategy<Value = Reply> {
        let cluster = (NAME, proptest::option::of(any::<u32>()), proptest::collection::vec(any_endpoint(), 0..8));
        (any::<u32>(), proptest::collection::vec(cluster, 0..4)).prop_map(|(ttl_ms, clusters)| {
            let clusters = clusters
                .into_iter()
                .map(|(name, reporters, endpoints)| ClusterView {
                    name,
                    reporters,
                    endpoints: unique_by(endpoints, |e| &e.address),
                })
                .collect();
            Reply { version: VERSION, ttl_ms, clusters: unique_by(clusters, |c| &c.name) }
        })
    }

    /// The reader's numbers are within a few units in the last place of what was written (see
    /// `json::parse`'s number reading).
    fn close(read: f64, written: f64) -> bool {
        (read - written).abs() <= 1e-14 * written.abs() + 1e-290
    }

    proptest! {
        /// The aggregator's writer and the filter's reader agree: what one writes, the other reads
        /// back as the same reply (numbers to the reader's precision).
        #[test]
        fn what_the_aggregator_writes_the_filter_reads_back(written in any_reply()) {
            let read = read_reply(&write_reply(&written), &Limits::default()).map_err(|e| e.to_string());
            let read = read.map_err(TestCaseError::fail)?;
            prop_assert_eq!((read.version, read.ttl_ms, read.clusters.len()), (written.version, written.ttl_ms, written.clusters.len()));
            for (r, w) in read.clusters.iter().zip(&written.clusters) {
                prop_assert_eq!((&r.name, r.reporters), (&w.name, w.reporters));
                prop_assert_eq!(r.endpoints.len(), w.endpoints.len());
                for (r, w) in r.endpoints.iter().zip(&w.endpoints) {
                    prop_assert_eq!((&r.address, r.latency_us, r.ejected, r.served_age_ms), (&w.address, w.latency_us, w.ejected, w.served_age_ms));
                    prop_assert_eq!(r.cpu.is_some(), w.cpu.is_some());
                    let pairs = [(r.weight, w.weight), (r.inflight, w.inflight), (r.peer_inflight, w.peer_inflight), (r.cpu.unwrap_or(0.0), w.cpu.unwrap_or(0.0))];
                    for (r, w) in pairs {
                        prop_assert!(close(r, w), "read {} for {}", r, w);
                    }
                }
            }
        }
    }
}
