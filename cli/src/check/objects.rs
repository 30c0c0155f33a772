//! What `check` reads: the objects the apiserver holds (`Snapshot`), what the chart installed
//! (`Installed`: the opted-in namespaces' steered clusters and their aggregators, from the client
//! WasmPlugins or the native shell's EnvoyFilters), the mesh config's fields, and the findings'
//! types. Pure: objects in, facts out.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The objects `check` reads, as the apiserver returns them (`kubectl get -o json` items). A
/// list is `None` when its resource type is not served (the CRD is not installed).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub namespaces: Vec<Value>,
    pub pods: Vec<Value>,
    pub services: Vec<Value>,
    /// Each ConfigMap's metadata, and the mesh configs' `data` too (`kube::snapshot`).
    pub config_maps: Vec<Value>,
    pub wasm_plugins: Vec<Value>,
    /// The chart's EnvoyFilters among them, with `module.kind: native` its client-role filters.
    pub envoy_filters: Vec<Value>,
    pub destination_rules: Vec<Value>,
    pub sidecars: Vec<Value>,
    pub service_monitors: Option<Vec<Value>>,
    pub pod_monitors: Option<Vec<Value>>,
    pub prometheuses: Option<Vec<Value>>,
    /// MutatingWebhookConfigurations (Istio's injectors among them); None when not readable.
    pub webhooks: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something fails: reports, a cluster's updates, pods that cannot start.
    Error,
    /// Something tailweight or its operators expect silently does not happen.
    Warning,
}

/// What was found. Each is one of issue 40's silent failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// No client-role WasmPlugin of the chart anywhere: nothing to check.
    NotInstalled,
    /// The WasmPlugin names an aggregator Service that does not exist.
    AggregatorServiceMissing,
    /// The aggregator Service selects no pod.
    AggregatorNoPods,
    /// An aggregator pod runs without an istio-proxy sidecar: every report to it fails (mTLS).
    AggregatorWithoutSidecar,
    /// The aggregator's namespace is not labelled for injection where a revisioned Istio needs it.
    AggregatorNamespaceNotInjected,
    /// The aggregator Service's `networking.istio.io/exportTo` hides it from an opted-in namespace.
    AggregatorHiddenByExportTo,
    /// The mesh's `defaultServiceExportTo` hides the aggregator Service from an opted-in namespace.
    AggregatorHiddenByMeshDefault,
    /// A `Sidecar` resource's egress hosts leave the aggregator out of an opted-in namespace's sidecars.
    AggregatorHiddenBySidecar,
    /// A DestinationRule's locality load balancing on a steered host: Envoy rejects the cluster.
    LocalityLbConflict,
    /// A DestinationRule's `loadBalancer` simple/consistentHash/warmup on a steered host: ignored.
    LoadBalancerIgnored,
    /// No Prometheus resource selects the chart's ServiceMonitor/PodMonitor.
    MonitorNotSelected,
    /// A pod names a bootstrap-override ConfigMap its namespace does not have: it cannot restart.
    BootstrapOverrideMissing,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub kind: Kind,
    /// `kind namespace/name` of the object at fault.
    pub object: String,
    pub problem: String,
    pub fix: String,
}

pub(super) const OVERRIDE_ANNOTATION: &str = "sidecar.istio.io/bootstrapOverride";
pub(super) const EXPORT_TO_ANNOTATION: &str = "networking.istio.io/exportTo";

pub(super) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str)
}

pub(super) fn ns_name(v: &Value) -> (&str, &str) {
    (str_at(v, &["metadata", "namespace"]).unwrap_or(""), str_at(v, &["metadata", "name"]).unwrap_or(""))
}

pub(super) fn labels(v: &Value) -> BTreeMap<String, String> {
    v["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// One steered cluster, `outbound|<port>|<subset>|<host>`, of one opted-in namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Steered {
    pub client_namespace: String,
    pub port: u32,
    pub subset: String,
    pub host: String,
}

/// What the chart installed: the opted-in namespaces' steered clusters, and the aggregator each
/// one's WasmPlugin reports to (`<service>.<namespace>.svc.<domain>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Installed {
    pub steered: Vec<Steered>,
    /// (client namespace, aggregator host).
    pub aggregators: Vec<(String, String)>,
}

pub fn parse_cluster(name: &str) -> Option<(u32, String, String)> {
    let mut parts = name.split('|');
    let (direction, port, subset, host) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (direction == "outbound" && parts.next().is_none()).then_some(())?;
    Some((port.parse().ok()?, subset.to_string(), host.to_string()))
}

/// Each client-role filter configuration of the chart, by namespace: a WasmPlugin's
/// `pluginConfig`, or (`module.kind: native`) the `filter_config` of the native shell's EnvoyFilter
/// (`<release>-native`), the same configuration as JSON text.
pub(super) fn client_configs(snapshot: &Snapshot) -> Vec<(&str, Value)> {
    let ours = |object: &Value| {
        let l = labels(object);
        l.get("app.kubernetes.io/part-of").map(String::as_str) == Some("tailweight")
            && l.get("app.kubernetes.io/component").map(String::as_str) == Some("filter")
    };
    let mut out: Vec<(&str, Value)> = snapshot
        .wasm_plugins
        .iter()
        .filter(|p| ours(p))
        .map(|p| (ns_name(p).0, p["spec"]["pluginConfig"].clone()))
        .collect();
    for filter in snapshot.envoy_filters.iter().filter(|f| ours(f) && ns_name(f).1.ends_with("-native")) {
        for patch in filter["spec"]["configPatches"].as_array().into_iter().flatten() {
            let text = str_at(&patch["patch"]["value"], &["typed_config", "filter_config", "value"]);
            if let Some(config) = text.and_then(|t| serde_json::from_str(t).ok()) {
                out.push((ns_name(filter).0, config));
            }
        }
    }
    out
}

pub fn installed(snapshot: &Snapshot) -> Installed {
    let mut out = Installed::default();
    for (ns, config) in client_configs(snapshot) {
        for cluster in strings(&config["clusters"]) {
            if let Some((port, subset, host)) = parse_cluster(&cluster) {
                out.steered.push(Steered { client_namespace: ns.to_string(), port, subset, host });
            }
        }
        if let Some(authority) = str_at(&config, &["aggregator", "authority"]) {
            out.aggregators.push((ns.to_string(), authority.to_string()));
        }
    }
    out
}

/// The mesh config's fields `check` reads (ConfigMap `istio` or `istio-<revision>`, key `mesh`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mesh {
    pub root_namespace: String,
    /// (the ConfigMap it came from, the values) when set.
    pub default_service_export_to: Option<(String, Vec<String>)>,
}

/// A top-level key of the mesh config's YAML: a scalar, a flow list `[a, "b"]` or a block list.
/// Enough for the two keys read here; anything else in the YAML is skipped.
pub fn yaml_top_level(text: &str, key: &str) -> Option<Vec<String>> {
    let unquote =
        |s: &str| s.split(" #").next().unwrap_or("").trim().trim_matches(|c| c == '"' || c == '\'').to_string();
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&format!("{key}:")));
    let value = lines.next()?[key.len() + 1..].trim().to_string();
    let value = value.split(" #").next().unwrap_or("").trim().to_string();
    if let Some(flow) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        return Some(flow.split(',').map(unquote).filter(|s| !s.is_empty()).collect());
    }
    if !value.is_empty() {
        return Some(vec![unquote(&value)]);
    }
    let items = lines
        .take_while(|l| l.starts_with(' ') || l.starts_with('-') || l.trim().is_empty())
        .filter_map(|l| l.trim().strip_prefix('-').map(unquote))
        .collect();
    Some(items)
}

pub fn mesh(snapshot: &Snapshot) -> Mesh {
    let mut out = Mesh { root_namespace: "istio-system".into(), default_service_export_to: None };
    for cm in &snapshot.config_maps {
        let (ns, name) = ns_name(cm);
        if !(name == "istio" || name.starts_with("istio-")) {
            continue;
        }
        let Some(text) = str_at(cm, &["data", "mesh"]) else { continue };
        if let Some(root) = yaml_top_level(text, "rootNamespace").and_then(|v| v.into_iter().next()) {
            out.root_namespace = root;
        }
        if let Some(values) = yaml_top_level(text, "defaultServiceExportTo") {
            out.default_service_export_to = Some((format!("ConfigMap {ns}/{name}"), values));
        }
    }
    out
}

/// Whether an `exportTo` list lets `client` (a namespace) see an object of `namespace`.
pub fn exported_to(export_to: &[String], namespace: &str, client: &str) -> bool {
    export_to.iter().any(|e| e == "*" || e == client || (e == "." && namespace == client))
}

/// (service name, namespace) of `<name>.<namespace>.svc.<domain>`.
pub fn service_of_host(host: &str) -> Option<(String, String)> {
    let mut parts = host.splitn(4, '.');
    let (name, ns, svc) = (parts.next()?, parts.next()?, parts.next()?);
    (svc == "svc").then(|| (name.to_string(), ns.to_string()))
}

/// Whether a hostname in a DestinationRule or a Sidecar (`name`, `name.ns`, the full name, or a
/// `*` wildcard), written in `namespace`, names `full` (`<name>.<ns>.svc.<domain>`).
pub fn host_matches(pattern: &str, namespace: &str, full: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        return full.ends_with(suffix);
    }
    if pattern == full {
        return true;
    }
    match pattern.matches('.').count() {
        0 => full.starts_with(&format!("{pattern}.{namespace}.svc.")),
        1 => full.starts_with(&format!("{pattern}.svc.")),
        _ => false,
    }
}

impl Snapshot {
    /// The objects of one list, each put in its kind's list (the monitors' and Prometheus's lists
    /// are Some: their CRDs served).
    #[cfg(test)]
    pub fn from_items(items: &[Value]) -> Snapshot {
        let of = |kind: &str| items.iter().filter(|i| i["kind"] == kind).cloned().collect::<Vec<_>>();
        Snapshot {
            namespaces: of("Namespace"),
            pods: of("Pod"),
            services: of("Service"),
            config_maps: of("ConfigMap"),
            wasm_plugins: of("WasmPlugin"),
            envoy_filters: of("EnvoyFilter"),
            destination_rules: of("DestinationRule"),
            sidecars: of("Sidecar"),
            service_monitors: Some(of("ServiceMonitor")),
            pod_monitors: Some(of("PodMonitor")),
            prometheuses: Some(of("Prometheus")),
            webhooks: Some(of("MutatingWebhookConfiguration")),
        }
    }
}
