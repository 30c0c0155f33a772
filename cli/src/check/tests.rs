//! `check` on fixtures: testdata/healthy.json (an installation as the chart makes it, with nothing
//! wrong), then one failure at a time, each found once, with its kind, severity and object.

use super::objects::yaml_top_level;
use super::*;
use serde_json::json;

fn healthy() -> Vec<Value> {
    let text = include_str!("testdata/healthy.json");
    let page: Value = serde_json::from_str(text).unwrap();
    page["items"].as_array().unwrap().clone()
}

fn findings_with(change: impl FnOnce(&mut Vec<Value>)) -> Vec<Finding> {
    let mut items = healthy();
    change(&mut items);
    check(&Snapshot::from_items(&items))
}

fn object<'a>(items: &'a mut [Value], kind: &str, namespace: &str, name: &str) -> &'a mut Value {
    items
        .iter_mut()
        .find(|i| i["kind"] == kind && ns_name(i) == (namespace, name))
        .unwrap_or_else(|| panic!("fixture has no {kind} {namespace}/{name}"))
}

/// Exactly one finding, of `kind` and `severity`, about `object`.
fn only(findings: &[Finding], kind: Kind, severity: Severity, object: &str) -> Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = findings[0].clone();
    assert_eq!((f.kind, f.severity, f.object.as_str()), (kind, severity, object), "{f:#?}");
    assert!(!f.fix.is_empty());
    f
}

#[test]
fn a_healthy_installation_has_no_findings() {
    assert_eq!(findings_with(|_| {}), []);
    assert!(table(&[]).starts_with("no findings"));
}

#[test]
fn no_tailweight_is_said() {
    let findings = findings_with(|items| items.retain(|i| i["kind"] != "WasmPlugin"));
    only(&findings, Kind::NotInstalled, Severity::Warning, "-");
}

/// `module.kind: native`: the client role is an EnvoyFilter carrying the same configuration as
/// JSON text; the installation is found there, and checked as with WasmPlugins.
#[test]
fn the_native_shell_s_envoy_filters_are_an_installation() {
    let to_native = |items: &mut Vec<Value>| {
        let mut native = Vec::new();
        for plugin in items.iter().filter(|i| i["kind"] == "WasmPlugin") {
            let mut filter = plugin.clone();
            filter["kind"] = json!("EnvoyFilter");
            filter["metadata"]["name"] = json!("tailweight-native");
            let config = plugin["spec"]["pluginConfig"].to_string();
            filter["spec"] = json!({"configPatches": [{"applyTo": "HTTP_FILTER", "patch": {"operation": "INSERT_BEFORE",
                "value": {"name": "tailweight.native", "typed_config": {"filter_config": {"value": config}}}}}]});
            native.push(filter);
        }
        items.retain(|i| i["kind"] != "WasmPlugin");
        items.extend(native);
    };
    assert_eq!(findings_with(to_native), []);
    // Checked as the Wasm shell's: its aggregator without a sidecar is found the same way.
    let findings = findings_with(|items| {
        to_native(items);
        object(items, "Pod", "tailweight", "tailweight-aggregator-6c9-b")["spec"]["containers"] =
            json!([{"name": "aggregator"}]);
    });
    assert!(findings.iter().any(|f| f.kind == Kind::AggregatorWithoutSidecar), "{findings:#?}");
    // A garbled filter_config is no installation (and no crash).
    let garbled = findings_with(|items| {
        to_native(items);
        for i in items.iter_mut().filter(|i| i["kind"] == "EnvoyFilter") {
            i["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]["filter_config"]["value"] =
                json!("{not json");
        }
    });
    only(&garbled, Kind::NotInstalled, Severity::Warning, "-");
}

#[test]
fn an_aggregator_pod_without_sidecar_under_a_revisioned_istio() {
    let findings = findings_with(|items| {
        // Istio installed with a revision: the namespaces are labelled istio.io/rev, the
        // aggregator's is not, and its pod came up without a sidecar.
        for ns in ["web", "shop"] {
            object(items, "Namespace", "", ns)["metadata"]["labels"] = json!({"istio.io/rev": "1-31"});
        }
        object(items, "Namespace", "", "tailweight")["metadata"]["labels"] = json!({});
        object(items, "Pod", "tailweight", "tailweight-aggregator-6c9-b")["spec"]["containers"] =
            json!([{"name": "aggregator"}]);
    });
    let f =
        only(&findings, Kind::AggregatorWithoutSidecar, Severity::Error, "Pod tailweight/tailweight-aggregator-6c9-b");
    assert!(f.fix.starts_with("kubectl label namespace tailweight istio-injection- istio.io/rev=1-31"), "{}", f.fix);
    assert!(f.fix.ends_with("rollout restart deployment tailweight-aggregator"), "{}", f.fix);
}

#[test]
fn an_aggregator_namespace_not_injected_before_its_pods_exist() {
    let revisioned = |items: &mut Vec<Value>| {
        items.retain(|i| !(i["kind"] == "Pod" && ns_name(i).0 == "tailweight"));
        object(items, "Namespace", "", "web")["metadata"]["labels"] = json!({"istio.io/rev": "canary"});
        object(items, "Namespace", "", "tailweight")["metadata"]["labels"] = json!({});
    };
    let findings = findings_with(revisioned);
    assert_eq!(
        findings.iter().map(|f| (f.kind, f.severity)).collect::<Vec<_>>(),
        [(Kind::AggregatorNoPods, Severity::Warning), (Kind::AggregatorNamespaceNotInjected, Severity::Warning),]
    );
    assert!(findings[1].fix.contains("istio.io/rev=canary"));
    let disabled = findings_with(|items| {
        items.retain(|i| !(i["kind"] == "Pod" && ns_name(i).0 == "tailweight"));
        object(items, "Namespace", "", "tailweight")["metadata"]["labels"] = json!({"istio-injection": "disabled"});
    });
    assert_eq!((disabled[0].kind, disabled[0].severity), (Kind::AggregatorNamespaceNotInjected, Severity::Error));
}

/// Istio's injector webhooks of `revision`: the default revision's also act on
/// `istio-injection=enabled` and on the pod label alone.
fn injector(revision: &str) -> Value {
    let mut webhooks = vec![
        json!({"name": "rev.namespace.sidecar-injector.istio.io"}),
        json!({"name": "rev.object.sidecar-injector.istio.io"}),
    ];
    if revision == "default" {
        webhooks.extend([
            json!({"name": "namespace.sidecar-injector.istio.io"}),
            json!({"name": "object.sidecar-injector.istio.io"}),
        ]);
    }
    json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": format!("istio-sidecar-injector-{revision}"),
        "labels": {"istio.io/rev": revision}}, "webhooks": webhooks})
}

#[test]
fn the_injector_webhooks_say_whether_the_namespace_labels_inject() {
    let no_pods = |items: &mut Vec<Value>| items.retain(|i| !(i["kind"] == "Pod" && ns_name(i).0 == "tailweight"));
    // Only a revision installed: istio-injection=enabled injects nothing.
    let revision_only = findings_with(|items| {
        no_pods(items);
        items.push(injector("1-31"));
    });
    let f = revision_only.iter().find(|f| f.kind == Kind::AggregatorNamespaceNotInjected).unwrap();
    assert_eq!(f.severity, Severity::Error);
    assert!(f.problem.contains("no default-revision injector"), "{}", f.problem);
    assert!(f.fix.contains("istio.io/rev=1-31"), "{}", f.fix);
    // A default revision: an unlabelled namespace's pods are injected by their own label.
    let with_default = findings_with(|items| {
        no_pods(items);
        items.extend([injector("default"), injector("1-31")]);
        object(items, "Namespace", "", "tailweight")["metadata"]["labels"] = json!({});
    });
    assert_eq!(with_default.iter().map(|f| f.kind).collect::<Vec<_>>(), [Kind::AggregatorNoPods]);
}

#[test]
fn a_missing_aggregator_service() {
    let findings = findings_with(|items| items.retain(|i| i["kind"] != "Service"));
    only(&findings, Kind::AggregatorServiceMissing, Severity::Error, "Service tailweight/tailweight-aggregator");
}

#[test]
fn the_aggregator_hidden_by_its_export_to() {
    for (export_to, hidden) in [(".", true), ("tailweight,shop", true), ("tailweight, web", false), ("*", false)] {
        let findings = findings_with(|items| {
            object(items, "Service", "tailweight", "tailweight-aggregator")["metadata"]["annotations"] =
                json!({"networking.istio.io/exportTo": export_to});
        });
        if hidden {
            let f = only(
                &findings,
                Kind::AggregatorHiddenByExportTo,
                Severity::Error,
                "Service tailweight/tailweight-aggregator",
            );
            assert!(f.problem.contains("namespace web"), "{}", f.problem);
        } else {
            assert_eq!(findings, [], "exportTo {export_to}");
        }
    }
}

#[test]
fn the_aggregator_hidden_by_the_mesh_default_unless_its_annotation_says_otherwise() {
    let mesh_default = |items: &mut Vec<Value>| {
        object(items, "ConfigMap", "istio-system", "istio")["data"]["mesh"] =
            json!("rootNamespace: istio-system\ndefaultServiceExportTo:\n  - \".\"\ntrustDomain: cluster.local\n");
    };
    let findings = findings_with(mesh_default);
    let f = only(
        &findings,
        Kind::AggregatorHiddenByMeshDefault,
        Severity::Error,
        "Service tailweight/tailweight-aggregator",
    );
    assert!(f.problem.contains("ConfigMap istio-system/istio"), "{}", f.problem);
    let annotated = findings_with(|items| {
        mesh_default(items);
        object(items, "Service", "tailweight", "tailweight-aggregator")["metadata"]["annotations"] =
            json!({"networking.istio.io/exportTo": "*"});
    });
    assert_eq!(annotated, []);
}

#[test]
fn the_aggregator_hidden_by_a_sidecar_resource() {
    let findings = findings_with(|items| {
        object(items, "Sidecar", "web", "default")["spec"]["egress"] = json!([{"hosts": ["./*", "istio-system/*"]}]);
    });
    let f = only(&findings, Kind::AggregatorHiddenBySidecar, Severity::Error, "Sidecar web/default");
    assert!(f.fix.contains("tailweight/tailweight-aggregator.tailweight.svc.cluster.local"), "{}", f.fix);
    // The root namespace's Sidecar applies where a namespace has none of its own.
    let root = findings_with(|items| {
        let sidecar = object(items, "Sidecar", "web", "default");
        sidecar["metadata"]["namespace"] = json!("istio-system");
        sidecar["spec"]["egress"] = json!([{"hosts": ["./*"]}]);
    });
    only(&root, Kind::AggregatorHiddenBySidecar, Severity::Error, "Sidecar istio-system/default");
    // One with a workloadSelector, beside a namespace-wide one that does see it.
    let selected = findings_with(|items| {
        items.push(json!({"kind": "Sidecar", "metadata": {"namespace": "web", "name": "batch"},
            "spec": {"workloadSelector": {"labels": {"app": "batch"}}, "egress": [{"hosts": ["shop/*"]}]}}));
    });
    only(&selected, Kind::AggregatorHiddenBySidecar, Severity::Error, "Sidecar web/batch");
}

#[test]
fn locality_load_balancing_on_a_steered_host() {
    let distribute = findings_with(|items| {
        object(items, "DestinationRule", "shop", "cart")["spec"]["trafficPolicy"]["loadBalancer"] = json!({
            "localityLbSetting": {"enabled": true, "distribute": [{"from": "r/z1/*", "to": {"r/z1/*": 80, "r/z2/*": 20}}]}});
    });
    let f = only(&distribute, Kind::LocalityLbConflict, Severity::Error, "DestinationRule shop/cart");
    assert!(f.problem.contains("distribute") && f.problem.contains("namespace web"), "{}", f.problem);
    // One finding for the rule, naming both steered clusters it reaches (the subset's inherits).
    assert!(f.problem.contains("outbound|8080||cart.shop.svc.cluster.local, outbound|8080|v1|cart"), "{}", f.problem);
    // failover matters only with outlier detection (the fixture's rule has it) ...
    let failover = |outlier: bool| {
        findings_with(|items| {
            let spec = &mut object(items, "DestinationRule", "shop", "cart")["spec"];
            spec["trafficPolicy"]["loadBalancer"] =
                json!({"localityLbSetting": {"failover": [{"from": "r1", "to": "r2"}]}});
            if !outlier {
                spec["trafficPolicy"].as_object_mut().unwrap().remove("outlierDetection");
            }
        })
    };
    only(&failover(true), Kind::LocalityLbConflict, Severity::Error, "DestinationRule shop/cart");
    assert_eq!(failover(false), []);
    // ... and a rule that turns it off, or one on a host nobody steers, is fine.
    let off = findings_with(|items| {
        object(items, "DestinationRule", "shop", "cart")["spec"]["trafficPolicy"]["loadBalancer"] =
            json!({"localityLbSetting": {"enabled": false, "distribute": [{"from": "a", "to": {"b": 100}}]}});
        items.push(json!({"kind": "DestinationRule", "metadata": {"namespace": "shop", "name": "other"},
            "spec": {"host": "other", "trafficPolicy": {"loadBalancer": {"localityLbSetting": {"distribute": [{"from": "a"}]}}}}}));
    });
    assert_eq!(off, []);
}

#[test]
fn a_load_balancer_on_a_steered_subset_port_or_from_the_root_namespace() {
    let subset = findings_with(|items| {
        object(items, "DestinationRule", "shop", "cart")["spec"]["subsets"][0]["trafficPolicy"] = json!({"portLevelSettings": [{"port": {"number": 8080}, "loadBalancer": {"consistentHash": {"httpHeaderName": "x-user"}}}]});
    });
    let f = only(&subset, Kind::LoadBalancerIgnored, Severity::Warning, "DestinationRule shop/cart");
    assert!(f.problem.contains("consistentHash") && f.problem.contains("outbound|8080|v1|"), "{}", f.problem);
    // exportTo "." keeps a rule in its namespace: the client namespace web never applies it ...
    let private = findings_with(|items| {
        let spec = &mut object(items, "DestinationRule", "shop", "cart")["spec"];
        spec["exportTo"] = json!(["."]);
        spec["trafficPolicy"]["loadBalancer"] = json!({"simple": "ROUND_ROBIN"});
    });
    assert_eq!(private, []);
    // ... while one in the root namespace applies everywhere.
    let root = findings_with(|items| {
        items.push(json!({"kind": "DestinationRule", "metadata": {"namespace": "istio-system", "name": "all"},
            "spec": {"host": "*.shop.svc.cluster.local", "exportTo": ["."], "trafficPolicy": {"loadBalancer": {"simple": "RANDOM"}}}}));
    });
    let f = only(&root, Kind::LoadBalancerIgnored, Severity::Warning, "DestinationRule istio-system/all");
    assert!(
        f.problem.contains("loadBalancer.simple on outbound|8080||cart.shop.svc.cluster.local, outbound|8080|v1|"),
        "{}",
        f.problem
    );
}

#[test]
fn monitors_no_prometheus_selects() {
    let labels_missing = findings_with(|items| {
        object(items, "ServiceMonitor", "tailweight", "tailweight-aggregator")["metadata"]["labels"] =
            json!({"app.kubernetes.io/part-of": "tailweight"});
    });
    let f = only(
        &labels_missing,
        Kind::MonitorNotSelected,
        Severity::Warning,
        "ServiceMonitor tailweight/tailweight-aggregator",
    );
    assert!(f.fix.contains("Prometheus monitoring/prom") && f.fix.contains("release"), "{}", f.fix);
    let namespace_not_selected = findings_with(|items| {
        object(items, "Prometheus", "monitoring", "prom")["spec"]["podMonitorNamespaceSelector"] =
            json!({"matchLabels": {"monitored": "yes"}});
    });
    only(
        &namespace_not_selected,
        Kind::MonitorNotSelected,
        Severity::Warning,
        "PodMonitor tailweight/tailweight-sidecars",
    );
    // No namespace selector: the Prometheus's own namespace only.
    let own_namespace = findings_with(|items| {
        object(items, "Prometheus", "monitoring", "prom")["spec"]
            .as_object_mut()
            .unwrap()
            .remove("podMonitorNamespaceSelector");
    });
    only(&own_namespace, Kind::MonitorNotSelected, Severity::Warning, "PodMonitor tailweight/tailweight-sidecars");
    let none = findings_with(|items| items.retain(|i| i["kind"] != "Prometheus"));
    assert_eq!(none.len(), 2);
    assert!(none[0].problem.contains("no Prometheus resource"));
    // Without the Prometheus CRD (Prometheus runs elsewhere) there is nothing to compare with.
    let mut snapshot = Snapshot::from_items(&healthy());
    snapshot.prometheuses = None;
    snapshot.service_monitors.as_mut().unwrap()[0]["metadata"]["labels"] =
        json!({"app.kubernetes.io/part-of": "tailweight"});
    assert_eq!(check(&snapshot), []);
}

#[test]
fn a_pod_naming_a_missing_bootstrap_config_map() {
    let findings = findings_with(|items| {
        items.retain(|i| !(i["kind"] == "ConfigMap" && ns_name(i) == ("web", "tailweight-sidecar-bootstrap")));
        // Also in a namespace no longer opted in: the trap springs after an opt-out.
        items.push(json!({"kind": "Pod", "metadata": {"namespace": "legacy", "name": "old-1",
            "annotations": {"sidecar.istio.io/bootstrapOverride": "tailweight-sidecar-bootstrap"}}}));
    });
    assert_eq!(
        findings.iter().map(|f| (f.kind, f.object.as_str())).collect::<Vec<_>>(),
        [(Kind::BootstrapOverrideMissing, "Pod legacy/old-1"), (Kind::BootstrapOverrideMissing, "Pod web/web-1"),]
    );
    assert!(findings.iter().all(|f| f.severity == Severity::Error));
    assert!(findings[1].fix.contains("opt namespace web in again"), "{}", findings[1].fix);
    let other = findings_with(|items| {
        object(items, "Pod", "web", "web-1")["metadata"]["annotations"] =
            json!({"sidecar.istio.io/bootstrapOverride": "my-own-bootstrap"});
    });
    let f = only(&other, Kind::BootstrapOverrideMissing, Severity::Error, "Pod web/web-1");
    assert!(f.fix.ends_with("create ConfigMap my-own-bootstrap in web"), "{}", f.fix);
}

#[test]
fn the_table_numbers_each_finding_and_its_fix() {
    let findings = findings_with(|items| {
        object(items, "Sidecar", "web", "default")["spec"]["egress"] = json!([{"hosts": ["./*"]}]);
        object(items, "DestinationRule", "shop", "cart")["spec"]["trafficPolicy"]["loadBalancer"] =
            json!({"simple": "LEAST_REQUEST"});
    });
    let text = table(&findings);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("#  SEVERITY  CHECK"), "{text}");
    assert!(lines[1].starts_with("1  ERROR     aggregator-hidden-by-sidecar  Sidecar web/default"), "{text}");
    assert!(lines[2].starts_with("2  WARNING   load-balancer-ignored"), "{text}");
    assert!(text.contains("\nfixes:\n  1. add \"tailweight/"), "{text}");
    assert_eq!(lines.len(), 9, "{text}");
    assert!(text.ends_with("1 error(s), 1 warning(s)\n"), "{text}");
}

#[test]
fn mesh_config_keys_as_yaml_writes_them() {
    assert_eq!(
        yaml_top_level("a: 1\ndefaultServiceExportTo: [\".\", 'istio-system']\n", "defaultServiceExportTo"),
        Some(vec![".".to_string(), "istio-system".to_string()])
    );
    assert_eq!(
        yaml_top_level("defaultServiceExportTo:\n- \"*\"\n  - x # c\nnext: 1\n", "defaultServiceExportTo"),
        Some(vec!["*".to_string(), "x".to_string()])
    );
    assert_eq!(
        yaml_top_level("rootNamespace: mesh-root # the root\n", "rootNamespace"),
        Some(vec!["mesh-root".to_string()])
    );
    assert_eq!(yaml_top_level("defaultConfig:\n  rootNamespace: x\n", "rootNamespace"), None);
}

#[test]
fn hosts_as_destination_rules_and_sidecars_write_them() {
    let full = "cart.shop.svc.cluster.local";
    for (pattern, ns, matches) in [
        ("cart", "shop", true),
        ("cart", "web", false),
        ("cart.shop", "web", true),
        (full, "web", true),
        ("*.shop.svc.cluster.local", "x", true),
        ("*", "x", true),
        ("*.web.svc.cluster.local", "x", false),
    ] {
        assert_eq!(host_matches(pattern, ns, full), matches, "{pattern} in {ns}");
    }
    assert_eq!(parse_cluster("outbound|8080|v1|cart.shop.svc.cluster.local"), Some((8080, "v1".into(), full.into())));
    assert_eq!(parse_cluster("inbound|8080||"), None);
}
