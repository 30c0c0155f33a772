use super::samples::endpoint_report as endpoint;
use super::write::write_report;
use super::*;
use crate::protocol::VERSION;

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
    let err = r.validate(&Limits::default()).unwrap_err().to_string();
    assert!(err.starts_with("clusters[18].name: \"c3\" appears twice"), "{err}");
    r.clusters[18].name = "c18".into();
    r.clusters[5].endpoints =
        ["10.0.0.9:1", "10.0.0.2:1", "10.0.0.5:1", "10.0.0.2:1", "10.0.0.9:1"].map(endpoint).to_vec();
    let err = r.validate(&Limits::default()).unwrap_err().to_string();
    assert!(err.starts_with("clusters[5].endpoints[3].address: 10.0.0.2:1 appears twice"), "{err}");
    r.clusters[5].endpoints.truncate(3);
    assert_eq!(r.validate(&Limits::default()), Ok(()));
}

/// A report with the characters JSON must escape, an endpoint with every field and one without
/// the optional ones, and an empty cluster.
fn tricky_report() -> Report {
    Report {
        version: VERSION,
        reporter: "client-\"0\".default\u{7f}é".into(),
        incarnation: u64::MAX,
        interval_ms: 1000,
        clusters: vec![
            ClusterReport {
                name: "outbound|8080||svc.ns.svc.cluster.local".into(),
                endpoints: vec![
                    endpoint("10.0.0.1:8080"),
                    EndpointReport { address: "[::1]:80".into(), ..Default::default() },
                ],
            },
            ClusterReport { name: "empty".into(), endpoints: vec![] },
        ],
    }
}

#[test]
fn a_written_report_is_the_document_of_the_protocol() {
    let written: serde_json::Value = serde_json::from_slice(&write_report(&tricky_report())).unwrap();
    let expected = serde_json::json!({
        "version": 1, "reporter": "client-\"0\".default\u{7f}é", "incarnation": u64::MAX, "interval_ms": 1000,
        "clusters": [
            {"name": "outbound|8080||svc.ns.svc.cluster.local", "endpoints": [
                {"address": "10.0.0.1:8080", "requests": 10, "errors": 1, "latency_sum_us": 9000, "inflight": 2,
                 "latency_ewma_us": 1000, "latency_age_ms": 5, "cpu": 0.625, "cpu_age_ms": 100, "seen_age_ms": 7,
                 "counted_ms": 900},
                {"address": "[::1]:80", "requests": 0, "errors": 0, "latency_sum_us": 0, "inflight": 0,
                 "latency_ewma_us": 0, "latency_age_ms": 0},
            ]},
            {"name": "empty", "endpoints": []},
        ],
    });
    assert_eq!(written, expected);
    let text = String::from_utf8(write_report(&tricky_report())).unwrap();
    assert!(text.contains("\"cpu\":0.625000,"), "utilisation with 6 decimals: {text}");
}

/// The aggregator's reader, on what the filter's writer wrote.
#[cfg(feature = "serde")]
mod read {
    use super::super::read::{parse_report, ReportError};
    use super::*;
    use crate::protocol::MAX_COUNTED_MS;
    use crate::test_support::{address, unique_by, NAME};
    use proptest::prelude::*;

    #[test]
    fn report_round_trips() {
        let r = report();
        assert_eq!(parse_report(&write_report(&r), &Limits::default()).unwrap(), r);
    }

    fn any_endpoint() -> impl Strategy<Value = EndpointReport> {
        let counters = (any::<u64>(), any::<u64>(), any::<u64>(), 0..=crate::protocol::MAX_INFLIGHT);
        let latency = (0..=crate::protocol::MAX_LATENCY_US, any::<u64>());
        // Utilisation as the filter writes it: 6 decimals (what survives the round trip exactly).
        let cpu = proptest::option::of((0u64..=1_000_000_000).prop_map(|micros| micros as f64 / 1e6));
        // A counting span at least the good answer's age (what `validate` holds it to).
        let seen_and_counted = (proptest::option::of(any::<u64>()), proptest::option::of(0..=MAX_COUNTED_MS))
            .prop_map(|(seen, counted)| (seen.map(|s| counted.map_or(s, |c| s.min(c))), counted));
        let optional = (cpu, proptest::option::of(any::<u64>()), seen_and_counted);
        (0u32..1_000_000, counters, latency, optional).prop_map(
            |(
                at,
                (requests, errors, latency_sum_us, inflight),
                (latency_ewma_us, latency_age_ms),
                (cpu, cpu_age_ms, (seen_age_ms, counted_ms)),
            )| {
                EndpointReport {
                    address: address(at),
                    requests,
                    errors: errors.min(requests),
                    latency_sum_us,
                    inflight,
                    latency_ewma_us,
                    latency_age_ms,
                    cpu,
                    cpu_age_ms,
                    seen_age_ms,
                    counted_ms,
                }
            },
        )
    }

    fn any_report() -> impl Strategy<Value = Report> {
        let cluster = (NAME, proptest::collection::vec(any_endpoint(), 0..8));
        (NAME, any::<u64>(), crate::protocol::INTERVAL_MS, proptest::collection::vec(cluster, 0..4)).prop_map(
            |(reporter, incarnation, interval_ms, clusters)| {
                let clusters = clusters
                    .into_iter()
                    .map(|(name, endpoints)| ClusterReport { name, endpoints: unique_by(endpoints, |e| &e.address) })
                    .collect();
                let clusters = unique_by(clusters, |c| &c.name);
                Report { version: VERSION, reporter, incarnation, interval_ms, clusters }
            },
        )
    }

    proptest! {
        /// The filter's writer and the aggregator's reader agree: what one writes, the other reads
        /// back as the same report.
        #[test]
        fn what_the_filter_writes_the_aggregator_reads_back(r in any_report()) {
            prop_assert_eq!(r.validate(&Limits::default()), Ok(()));
            prop_assert_eq!(parse_report(&write_report(&r), &Limits::default()), Ok(r));
        }
    }

    /// The sample report as a JSON value, to edit.
    fn value() -> serde_json::Value {
        serde_json::from_slice(&write_report(&report())).unwrap()
    }

    #[test]
    fn unknown_fields_are_ignored_for_forward_compatibility() {
        let mut v = value();
        v["future_field"] = serde_json::json!(1);
        assert!(parse_report(v.to_string().as_bytes(), &Limits::default()).is_ok());
    }

    /// A report of a reporter that does not say how long its counters have counted (written before
    /// `counted_ms`) reads as before: every other field, and no span.
    #[test]
    fn a_report_without_counted_ms_reads_as_before() {
        let mut v = value();
        for e in v["clusters"][0]["endpoints"].as_array_mut().unwrap() {
            e.as_object_mut().unwrap().remove("counted_ms");
        }
        let read = parse_report(v.to_string().as_bytes(), &Limits::default()).unwrap();
        let mut expected = report();
        expected.clusters[0].endpoints.iter_mut().for_each(|e| e.counted_ms = None);
        assert_eq!(read, expected);
    }

    fn rejected(mutate: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = value();
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
                Box::new(|v| v["clusters"][0]["endpoints"][1]["counted_ms"] = json!(MAX_COUNTED_MS + 1)),
                "clusters[0].endpoints[1].counted_ms: 315360000001 is above ten years",
            ),
            (
                Box::new(|v| v["clusters"][0]["endpoints"][0]["counted_ms"] = json!(6)),
                "clusters[0].endpoints[0].counted_ms: 6 is shorter than seen_age_ms (7): the counters would have begun after a good answer they counted",
            ),
            (Box::new(|v| v["clusters"][0]["endpoints"][0]["counted_ms"] = json!(-5)), "malformed report"),
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
                "clusters: more than the limit of 2 (refused at number 3)",
            ),
            (
                Box::new(|v| {
                    let e = v["clusters"][0]["endpoints"][0].clone();
                    v["clusters"][0]["endpoints"] = json!([e.clone(), e.clone(), e.clone(), e]);
                }),
                "clusters[0].endpoints: more than the limit of 3 (refused at number 4)",
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
        let good = write_report(&report());
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
        assert!(err.starts_with("malformed report: invalid type: map, expected an array of endpoints"), "{err}");
    }

    #[test]
    fn report_errors_say_which_kind_they_are() {
        let parse = |body: &str| parse_report(body.as_bytes(), &Limits::default()).unwrap_err();
        let unsupported = |version| ReportError::Invalid(Invalid::UnsupportedVersion(version));
        let mut v = value();
        v["version"] = serde_json::json!(2);
        // A future version, whether or not the rest parses as v1.
        assert_eq!(parse(&v.to_string()), unsupported(2));
        assert_eq!(parse(r#"{"version": 3, "something": "else"}"#), unsupported(3));
        assert_eq!(unsupported(3).to_string(), format!("version: 3 is not supported (this side speaks {VERSION})"));
        assert!(matches!(parse(r#"{"version": 1}"#), ReportError::Malformed(_)));
        assert!(matches!(parse("{"), ReportError::Malformed(_)));
        v["version"] = serde_json::json!(1);
        v["reporter"] = serde_json::json!("");
        let empty = Invalid::Field { field: "reporter".into(), problem: "must not be empty".into() };
        assert_eq!(parse(&v.to_string()), ReportError::Invalid(empty));
    }

    /// The caps hold while parsing: what follows the cluster (or endpoint) past the limit is never
    /// read, so a body that is broken after it is refused for the cap, not as malformed.
    #[test]
    fn caps_stop_the_parse_at_the_first_item_past_them() {
        let limits = Limits { max_clusters: 16, max_endpoints_per_cluster: 3 };
        let head = r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"clusters":["#;
        let empty = r#"{"name":"","endpoints":[]}"#;
        let attack = format!("{head}{}", vec![empty; 19_000].join(","));
        let truncated = format!("{head}{},{{this is not JSON", vec![empty; 17].join(","));
        let cap = Invalid::field("clusters", "more than the limit of 16 (refused at number 17)".to_string());
        for body in [attack, truncated] {
            assert_eq!(parse_report(body.as_bytes(), &limits), Err(ReportError::Invalid(cap.clone())));
        }
        let e = serde_json::to_string(&value()["clusters"][0]["endpoints"][0]).unwrap();
        let body = format!(r#"{head}{{"name":"c","endpoints":[{e},{e},{e},{e},garbage"#);
        let cap = Invalid::field("clusters[0].endpoints", "more than the limit of 3 (refused at number 4)".to_string());
        assert_eq!(parse_report(body.as_bytes(), &limits), Err(ReportError::Invalid(cap)));
        // Sixteen are fine as far as the caps go (the empty names are what is wrong with them).
        let sixteen = format!("{head}{}]}}", vec![empty; 16].join(","));
        let err = parse_report(sixteen.as_bytes(), &limits).unwrap_err().to_string();
        assert!(err.starts_with("clusters[0].name"), "{err}");
    }

    #[test]
    fn repeated_and_missing_fields_are_malformed() {
        for body in [
            r#"{"version":1,"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"clusters":[]}"#,
            r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"clusters":[{"name":"a","name":"b","endpoints":[]}]}"#,
            r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000}"#,
            r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"clusters":[{"name":"a"}]}"#,
            r#"{"version":1,"reporter":"r","incarnation":1,"interval_ms":1000,"clusters":[]} x"#,
        ] {
            let err = parse_report(body.as_bytes(), &Limits::default()).unwrap_err();
            assert!(matches!(err, ReportError::Malformed(_)), "{body}: {err}");
        }
    }
}
