use super::*;

#[test]
fn empty_or_null_is_all_defaults() {
    assert_eq!(FilterConfig::parse(b"").unwrap(), FilterConfig::default());
    assert_eq!(FilterConfig::parse(b"  \n").unwrap(), FilterConfig::default());
    assert_eq!(FilterConfig::parse(b"null").unwrap(), FilterConfig::default());
    assert_eq!(FilterConfig::parse(b"{}").unwrap(), FilterConfig::default());
}

#[test]
fn full_configuration() {
    let c = FilterConfig::parse(
        br#"{
          "header": "x-pick", "trust_incoming_header": true, "retry_choices": 2,
          "clusters": ["a", "b"], "explore_ratio": 0.05, "latency_decay_ms": 500,
          "default_latency_ms": 10, "stale_after_ms": 2000, "error_penalty": 4,
          "failure_latency_ms": 250, "use_global_view": false, "endpoint_ttl_ms": 30000,
          "max_clusters": 8, "max_endpoints_per_cluster": 100, "sync_interval_ms": 100,
          "reporter_id": "pod-1.ns", "per_endpoint_metrics": true,
          "grpc_failure_codes": [14, 13], "inflight_bound_ms": 5000, "failure_decay_ms": 500,
          "probe_interval_ms": 100, "recovery_ramp_ms": 2000, "slow_start_ms": 0,
          "recovery_evidence_answers": 0,
          "load_stamp_max_age_ms": 40, "load_stamp_pool": 4, "load_stamp_max_fresh_share": 0.25,
          "load_stamp_clusters": ["b"], "role": "client",
          "aggregator": {"cluster": "agg", "authority": "agg.local", "path": "/r",
                         "timeout_ms": 200, "report_interval_ms": 500, "shard_header": "x-s"}
        }"#,
    )
    .unwrap();
    assert_eq!((c.role, c.header.as_str()), (FilterRole::Client, "x-pick"));
    assert!(c.trust_incoming_header);
    assert_eq!(c.retry_choices, 2);
    assert!(c.steers("a") && !c.steers("c"));
    assert_eq!(c.pick.explore_ratio, 0.05);
    assert_eq!(c.pick.latency_decay_us, 500_000.0);
    assert_eq!(c.pick.default_latency_us, 10_000.0);
    assert_eq!(c.pick.stale_after_us, 2_000_000);
    assert_eq!(c.pick.failure_latency_us, 250_000.0);
    assert!(!c.pick.use_global_view);
    assert_eq!(c.sync_interval_ms, 100);
    assert_eq!((c.grpc_failure_codes.as_slice(), c.inflight_bound_ms), (&[14, 13][..], 5_000));
    assert_eq!((c.pick.failure_decay_us, c.pick.probe_interval_us), (500_000.0, 100_000));
    assert_eq!((c.pick.recovery_ramp_us, c.pick.slow_start_us), (2_000_000, 0));
    assert_eq!(c.pick.recovery_evidence_answers, 0);
    assert_eq!((c.pick.load_stamp_max_age_us, c.pick.load_stamp_pool), (40_000, 4));
    assert_eq!(c.pick.load_stamp_max_fresh_share, 0.25);
    assert!(c.reads_stamps_of("b") && !c.reads_stamps_of("a"));
    let a = c.aggregator.unwrap();
    assert_eq!((a.cluster.as_str(), a.authority.as_str(), a.path.as_str()), ("agg", "agg.local", "/r"));
    assert_eq!((a.timeout_ms, a.report_interval_ms, a.shard_header.as_str()), (200, 500, "x-s"));
}

#[test]
fn a_server_role_with_an_aggregator_attests_for_the_clusters_it_names() {
    let c = FilterConfig::parse(
        br#"{"role": "server", "aggregator": {"cluster": "agg"}, "attest_clusters": ["outbound|8080||shop.prod.svc.cluster.local"],
             "attest_source_header": "x-source"}"#,
    )
    .unwrap();
    assert_eq!(c.attest_clusters, ["outbound|8080||shop.prod.svc.cluster.local"]);
    assert_eq!(c.attest_source_header.as_deref(), Some("x-source"));
    assert_eq!(FilterConfig::default().attest_source_header, None, "the verified peer certificate by default");
}

#[test]
fn the_server_role_is_chosen_by_name() {
    let c = FilterConfig::parse(br#"{"role": "server", "sync_interval_ms": 50}"#).unwrap();
    assert_eq!((c.role, c.sync_interval_ms), (FilterRole::Server, 50));
    assert_eq!(FilterConfig::default().role, FilterRole::Client);
    assert!(FilterRole::Server.contradicted_by(2) && FilterRole::Client.contradicted_by(1));
    for direction in [0, 1, 3] {
        assert!(!FilterRole::Server.contradicted_by(direction), "{direction}");
    }
    for direction in [0, 2, 3] {
        assert!(!FilterRole::Client.contradicted_by(direction), "{direction}");
    }
}

#[test]
fn aggregator_defaults() {
    let c = FilterConfig::parse(br#"{"aggregator": {"cluster": "outbound|8080||agg"}}"#).unwrap();
    let a = c.aggregator.unwrap();
    assert_eq!(a.path, "/v1/report");
    assert_eq!(a.report_interval_ms, 1000);
    assert_eq!(a.shard_header, "x-tailweight-shard");
}

#[test]
fn every_error_names_the_field() {
    for (input, message) in [
        ("[1]", "configuration: expected a JSON object, got an array"),
        ("{", "configuration is not valid JSON"),
        (r#"{"explore_ratio": 2}"#, "field `explore_ratio`: expected a number in 0..=0.5, got 2"),
        (r#"{"explore_ratio": "0.1"}"#, "field `explore_ratio`: expected a number in 0..=0.5, got \"0.1\""),
        (r#"{"retry_choices": -1}"#, "field `retry_choices`: expected an integer in 0..=4, got -1"),
        (r#"{"retry_choices": 1.5}"#, "field `retry_choices`: expected an integer in 0..=4, got 1.5"),
        (r#"{"header": "X-Bad Header"}"#, "field `header`: expected a lower-case header name"),
        (r#"{"header": ""}"#, "field `header`: expected a non-empty string"),
        (r#"{"trust_incoming_header": "yes"}"#, "field `trust_incoming_header`: expected true or false"),
        (r#"{"clusters": "a"}"#, "field `clusters`: expected a list"),
        (r#"{"clusters": [1]}"#, "field `clusters`: expected a list of at most 256 non-empty strings, got 1"),
        (r#"{"sync_interval_ms": 1}"#, "field `sync_interval_ms`: expected an integer in 10..=10000, got 1"),
        (r#"{"aggregator": 5}"#, "field `aggregator`: expected an object, got 5"),
        (r#"{"aggregator": {}}"#, "field `aggregator.cluster`: required"),
        (r#"{"aggregator": {"cluster": "a", "report_interval_ms": 50}}"#, "field `aggregator.report_interval_ms`"),
        (
            r#"{"aggregator": {"cluster": "a", "path": "v1"}}"#,
            "field `aggregator.path`: expected a path starting with '/'",
        ),
        (r#"{"aggregator": {"cluster": "a", "clutser": 1}}"#, "field `aggregator.clutser`: unknown field"),
        (r#"{"explore_ration": 0.1}"#, "field `explore_ration`: unknown field (known: "),
        (
            r#"{"grpc_failure_codes": [14, 17]}"#,
            "field `grpc_failure_codes`: expected a list of distinct gRPC status codes (integers 0..=16), got 17",
        ),
        (
            r#"{"grpc_failure_codes": [14, 14]}"#,
            "field `grpc_failure_codes`: expected a list of distinct gRPC status codes",
        ),
        (r#"{"grpc_failure_codes": "14"}"#, "field `grpc_failure_codes`: expected a list"),
        (r#"{"inflight_bound_ms": 10}"#, "field `inflight_bound_ms`: expected an integer in 1000..=86400000"),
        (r#"{"role": "severs"}"#, "field `role`: expected \"client\" or \"server\", got \"severs\""),
        (r#"{"role": 1}"#, "field `role`: expected a non-empty string of at most 16 bytes, got 1"),
        (r#"{"role": "server", "aggregator": {"cluster": "a"}}"#, "field `aggregator`: with role \"server\" only for"),
        (r#"{"attest_clusters": ["c"], "aggregator": {"cluster": "a"}}"#, "field `attest_clusters`: needs role"),
        (r#"{"role": "server", "attest_clusters": ["c"]}"#, "field `attest_clusters`: needs role \"server\" and an"),
        (r#"{"role": "server", "attest_source_header": "X-P"}"#, "field `attest_source_header`: expected a lower"),
        (r#"{"endpoint_ttl_ms": 4000}"#, "field `endpoint_ttl_ms`: must be more than `stale_after_ms` (5000)"),
        (r#"{"endpoint_ttl_ms": 4000, "stale_after_ms": 4000}"#, "field `endpoint_ttl_ms`: must be more than"),
        (r#"{"load_stamp_pool": 0}"#, "field `load_stamp_pool`: expected an integer in 1..=64, got 0"),
        (r#"{"load_stamp_max_fresh_share": 2}"#, "field `load_stamp_max_fresh_share`: expected a number in 0..=1"),
        (r#"{"load_stamp_max_age_ms": 1e9}"#, "field `load_stamp_max_age_ms`: expected an integer in 0..=10000"),
        (
            r#"{"clusters": ["a"], "load_stamp_max_age_ms": 20, "load_stamp_clusters": ["a", "b"]}"#,
            "field `load_stamp_clusters`: \"b\" is not in `clusters` (stamps are read only from steered clusters)",
        ),
        (
            r#"{"load_stamp_max_age_ms": 0, "load_stamp_clusters": ["a"]}"#,
            "field `load_stamp_clusters`: reads stamps only with role \"client\" and `load_stamp_max_age_ms` > 0",
        ),
        (r#"{"role": "server", "load_stamp_max_age_ms": 20, "load_stamp_clusters": ["a"]}"#, "reads stamps only"),
        (r#"{"load_stamp_clusters": "a"}"#, "field `load_stamp_clusters`: expected a list"),
        (r#"{"health_check_path": "healthz"}"#, "field `health_check_path`: expected a path starting with '/'"),
        (r#"{"health_check_path": "/a b"}"#, "field `health_check_path`: expected a path starting with '/'"),
        (r#"{"health_check_path": 1}"#, "field `health_check_path`: expected a non-empty string of at most 256"),
        (r#"{"health_check_clusters": "a"}"#, "field `health_check_clusters`: expected a list"),
        (r#"{"health_check_clusters": ["a"]}"#, "field `health_check_clusters`: needs `health_check_path`"),
        (r#"{"health_check_path": "", "health_check_clusters": []}"#, "field `health_check_clusters`: needs"),
        (r#"{"health_check_timeout_ms": 5}"#, "field `health_check_timeout_ms`: expected an integer in 10..=60000"),
        (r#"{"role": "server", "health_check_path": "/h"}"#, "field `health_check_path`: needs role \"client\""),
        (r#"{"role": "server", "health_check_grpc": true}"#, "field `health_check_grpc`: needs role \"client\""),
        (r#"{"health_check_timeout_ms": 200}"#, "field `health_check_timeout_ms`: needs `health_check_path` or"),
        (r#"{"health_check_grpc": 1}"#, "field `health_check_grpc`: expected true or false"),
        (r#"{"health_check_grpc_service": "a"}"#, "field `health_check_grpc_service`: needs `health_check_grpc: true`"),
        (r#"{"health_check_grpc": false, "health_check_grpc_service": ""}"#, "`health_check_grpc_service`: needs"),
        (r#"{"health_check_grpc": true, "health_check_grpc_service": "a b"}"#, "expected a gRPC service name"),
        (r#"{"health_check_grpc": true, "health_check_grpc_service": 7}"#, "`health_check_grpc_service`: expected a"),
        // Several bad fields: the first read is reported, before any unknown one.
        (r#"{"explore_ratio": 2, "retry_choices": 9, "typo": 1}"#, "field `retry_choices`: expected an integer"),
        (r#"{"typo": 1, "header": "X", "role": "x"}"#, "field `role`: expected \"client\" or \"server\""),
        (r#"{"aggregator": {"path": "v1", "timeout_ms": 1}}"#, "field `aggregator.cluster`: required"),
        (r#"{"aggregator": {"cluster": "a", "path": "v1", "timeout_ms": 1}}"#, "field `aggregator.timeout_ms`"),
        (r#"{"aggregator": {"cluster": "a", "path": "v1", "x": 1}}"#, "field `aggregator.path`: expected a path"),
        (r#"{"aggregator": {"cluster": 1}, "inflight_bound_ms": 1}"#, "field `aggregator.cluster`: expected a"),
    ] {
        let err = FilterConfig::parse(input.as_bytes()).unwrap_err().to_string();
        assert!(err.contains(message), "{input}: expected {message:?} in {err:?}");
    }
}

#[test]
fn health_checks_are_off_unless_a_path_or_grpc_is_given() {
    assert_eq!(FilterConfig::parse(b"{}").unwrap().health_check, None);
    assert_eq!(FilterConfig::parse(br#"{"health_check_path": ""}"#).unwrap().health_check, None);
    assert_eq!(FilterConfig::parse(br#"{"health_check_grpc": false}"#).unwrap().health_check, None);
    let on = FilterConfig::parse(br#"{"health_check_path": "/healthz?x=1"}"#).unwrap().health_check;
    let http = HealthCheckConfig {
        path: Some("/healthz?x=1".into()),
        grpc_service: None,
        timeout_ms: 1_000,
        clusters: vec![],
        fleet_rate_per_s: 20,
    };
    assert_eq!(on, Some(http.clone()));
    let some = FilterConfig::parse(br#"{"health_check_path": "/h", "health_check_clusters": ["a"]}"#).unwrap();
    assert_eq!(some.health_check.map(|h| h.clusters), Some(vec!["a".to_string()]));
    let timed = FilterConfig::parse(br#"{"health_check_path": "/h", "health_check_timeout_ms": 200}"#).unwrap();
    assert_eq!(timed.health_check.map(|h| h.timeout_ms), Some(200));
    let rated = FilterConfig::parse(br#"{"health_check_path": "/h", "health_check_fleet_rate": 5}"#).unwrap();
    assert_eq!(rated.health_check.map(|h| h.fleet_rate_per_s), Some(5));
    for bad in [r#"{"health_check_path": "/h", "health_check_fleet_rate": 0}"#, r#"{"health_check_fleet_rate": 5}"#] {
        let err = FilterConfig::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("health_check_fleet_rate"), "{bad}: {err}");
    }
    let long = format!(r#"{{"health_check_path": "/{}"}}"#, "a".repeat(256));
    assert!(FilterConfig::parse(long.as_bytes()).is_err(), "at most 256 bytes");
    // gRPC: the whole server by default, or a named service; both protocols at once.
    let grpc = FilterConfig::parse(br#"{"health_check_grpc": true}"#).unwrap().health_check;
    assert_eq!(grpc.map(|h| (h.path, h.grpc_service)), Some((None, Some(String::new()))));
    for (input, service) in [
        (r#"{"health_check_grpc": true, "health_check_grpc_service": ""}"#, ""),
        (r#"{"health_check_grpc": true, "health_check_grpc_service": "shop.Cart"}"#, "shop.Cart"),
    ] {
        let checks = FilterConfig::parse(input.as_bytes()).unwrap().health_check.unwrap();
        assert_eq!(checks.grpc_service.as_deref(), Some(service), "{input}");
    }
    let both = FilterConfig::parse(br#"{"health_check_grpc": true, "health_check_path": "/healthz?x=1"}"#).unwrap();
    assert_eq!(both.health_check, Some(HealthCheckConfig { grpc_service: Some(String::new()), ..http }));
    let long = format!(r#"{{"health_check_grpc": true, "health_check_grpc_service": "{}"}}"#, "s".repeat(128));
    assert!(FilterConfig::parse(long.as_bytes()).is_err(), "at most 127 bytes");
}

#[test]
fn long_strings_are_summarised_in_errors() {
    let input = format!(r#"{{"header": "{}"}}"#, "A".repeat(500));
    let err = FilterConfig::parse(input.as_bytes()).unwrap_err().to_string();
    assert!(err.contains("a string of 500 bytes"), "{err}");
}

#[test]
fn an_unknown_field_with_a_newline_is_named_on_one_line() {
    // Found by fuzzing.
    let err = FilterConfig::parse(b"{\"e\\nrror\": 1}").unwrap_err().to_string();
    assert!(err.starts_with("field `e\\nrror`: unknown field") && !err.contains('\n'), "{err}");
}

#[test]
fn non_utf8_is_rejected() {
    assert_eq!(FilterConfig::parse(b"\xff").unwrap_err().to_string(), "configuration is not UTF-8");
}

#[test]
fn errors_name_their_field_as_data_too() {
    let err = FilterConfig::parse(br#"{"aggregator": {"cluster": "a", "timeout_ms": 1}}"#).unwrap_err();
    assert_eq!(
        err,
        ConfigError::Field {
            field: "aggregator.timeout_ms".into(),
            problem: "expected an integer in 10..=60000, got 1".into()
        }
    );
    assert_eq!(FilterConfig::parse(b"true").unwrap_err(), ConfigError::NotAnObject("a boolean"));
}

#[test]
fn override_values() {
    assert!(is_override_value("10.0.0.1:80"));
    assert!(is_override_value("10.0.0.1:80, 10.0.0.2:80"));
    assert!(!is_override_value("10.0.0.1:80,"));
    assert!(!is_override_value("evil.example.com:80"));
    assert!(!is_override_value(""));
}

#[test]
fn a_short_endpoint_ttl_is_accepted_with_a_shorter_stale_after() {
    let c = FilterConfig::parse(br#"{"endpoint_ttl_ms": 4000, "stale_after_ms": 2000}"#).unwrap();
    assert_eq!((c.endpoint_ttl_ms, c.pick.stale_after_us), (4_000, 2_000_000));
}

#[test]
fn stamps_are_read_only_from_the_clusters_named_for_them() {
    let c = FilterConfig::parse(
        br#"{"clusters": ["stamped", "plain"], "load_stamp_max_age_ms": 20, "load_stamp_clusters": ["stamped"]}"#,
    )
    .unwrap();
    assert!(c.reads_stamps_of("stamped"));
    assert!(!c.reads_stamps_of("plain"), "a steered cluster not listed: its destinations' word is not taken");
    assert!(!c.reads_stamps_of("elsewhere"));
    // No list: no cluster's stamps are read (unlike `clusters`, empty is none, not all).
    let unlisted = FilterConfig::parse(br#"{"load_stamp_max_age_ms": 20}"#).unwrap();
    assert!(unlisted.load_stamp_clusters.is_empty() && !unlisted.reads_stamps_of("stamped"));
    assert!(c.reads_stamps() && !unlisted.reads_stamps(), "no list: the header is not looked at");
    assert!(!FilterConfig::parse(br#"{"load_stamp_max_age_ms": 0, "load_stamp_clusters": []}"#)
        .unwrap()
        .reads_stamps());
    // Steering every cluster (`clusters` empty), any cluster may be listed.
    let all = FilterConfig::parse(br#"{"load_stamp_max_age_ms": 20, "load_stamp_clusters": ["backends"]}"#).unwrap();
    assert!(all.reads_stamps_of("backends") && !all.reads_stamps_of("other"));
    let err = FilterConfig::parse(br#"{"clusters": ["a"], "load_stamp_max_age_ms": 20, "load_stamp_clusters": ["b"]}"#)
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::Field {
            field: "load_stamp_clusters".into(),
            problem: "\"b\" is not in `clusters` (stamps are read only from steered clusters)".into(),
        }
    );
}
