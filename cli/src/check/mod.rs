//! `tailweight check`: the failures that make no noise, found in what the apiserver holds. Pure:
//! the caller lists the objects (`Snapshot`), `check` returns the findings, each with its fix.
//!
//! What tailweight is, it reads from the chart's own objects: every client-role WasmPlugin
//! (`app.kubernetes.io/part-of: tailweight`, `component: filter`) names the opted-in namespace (its
//! own), the clusters it steers (`pluginConfig.clusters`, `outbound|<port>|<subset>|<host>`) and the
//! aggregator (`pluginConfig.aggregator.authority`, `<service>.<namespace>.svc.<domain>`).

mod aggregator;
mod monitors;

use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

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

const OVERRIDE_ANNOTATION: &str = "sidecar.istio.io/bootstrapOverride";
const EXPORT_TO_ANNOTATION: &str = "networking.istio.io/exportTo";

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str)
}

fn ns_name(v: &Value) -> (&str, &str) {
    (str_at(v, &["metadata", "namespace"]).unwrap_or(""), str_at(v, &["metadata", "name"]).unwrap_or(""))
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
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
fn client_configs(snapshot: &Snapshot) -> Vec<(&str, Value)> {
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

/// Everything `check` finds, errors first.
pub fn check(snapshot: &Snapshot) -> Vec<Finding> {
    let installed = installed(snapshot);
    if installed.steered.is_empty() && installed.aggregators.is_empty() {
        return vec![Finding {
            severity: Severity::Warning,
            kind: Kind::NotInstalled,
            object: "-".into(),
            problem:
                "no WasmPlugin (nor native-shell EnvoyFilter) of the tailweight chart \
                      (app.kubernetes.io/part-of=tailweight, component=filter) in any namespace"
                    .into(),
            fix: "install the chart with at least one service in `services` (docs/istio.md), or check --context".into(),
        }];
    }
    let mesh = mesh(snapshot);
    let mut findings = Vec::new();
    findings.extend(aggregator::sidecars(snapshot, &installed));
    findings.extend(aggregator::visibility(snapshot, &installed, &mesh));
    findings.extend(destination_rules(snapshot, &installed, &mesh));
    findings.extend(monitors::monitors(snapshot));
    findings.extend(bootstrap_overrides(snapshot));
    findings.sort_by(|a, b| (a.severity, a.kind, &a.object).cmp(&(b.severity, b.kind, &b.object)));
    findings.dedup();
    findings
}

/// The traffic policies of a DestinationRule that apply to one steered cluster: the rule's own,
/// its port's, its subset's and that subset's port's.
fn policies_for<'a>(rule: &'a Value, steered: &Steered) -> Vec<&'a Value> {
    let spec = &rule["spec"];
    let mut out = vec![&spec["trafficPolicy"]];
    let port_level = |policy: &'a Value| -> Option<&'a Value> {
        policy["portLevelSettings"]
            .as_array()?
            .iter()
            .find(|p| p["port"]["number"].as_u64() == Some(u64::from(steered.port)))
    };
    out.extend(port_level(&spec["trafficPolicy"]));
    if !steered.subset.is_empty() {
        if let Some(subset) =
            spec["subsets"].as_array().and_then(|s| s.iter().find(|s| s["name"] == steered.subset.as_str()))
        {
            out.push(&subset["trafficPolicy"]);
            out.extend(port_level(&subset["trafficPolicy"]));
        }
    }
    out.retain(|p| p.is_object());
    out
}

/// Adds `cluster` to the clusters of `key`, once, in the order the WasmPlugins list them.
fn add<'a>(found: &mut BTreeMap<(Kind, &'a str, String), Vec<String>>, key: (Kind, &'a str, String), cluster: &str) {
    let clusters = found.entry(key).or_default();
    if !clusters.iter().any(|c| c == cluster) {
        clusters.push(cluster.to_string());
    }
}

/// Locality weighting (rejected with override_host) and load balancer settings (ignored) of the
/// DestinationRules the opted-in sidecars apply to a steered host.
fn destination_rules(snapshot: &Snapshot, installed: &Installed, mesh: &Mesh) -> Vec<Finding> {
    let mut out = Vec::new();
    for rule in &snapshot.destination_rules {
        let (ns, name) = ns_name(rule);
        let host = str_at(rule, &["spec", "host"]).unwrap_or("");
        let export_to = rule["spec"].get("exportTo").map(strings).unwrap_or_else(|| vec!["*".into()]);
        // (kind, client namespace, what) -> the steered clusters it concerns.
        let mut found: BTreeMap<(Kind, &str, String), Vec<String>> = BTreeMap::new();
        for steered in &installed.steered {
            let applies = host_matches(host, ns, &steered.host)
                && (ns == mesh.root_namespace || exported_to(&export_to, ns, &steered.client_namespace));
            if !applies {
                continue;
            }
            let policies = policies_for(rule, steered);
            let outlier = policies.iter().any(|p| p["outlierDetection"].is_object());
            let cluster = format!("outbound|{}|{}|{}", steered.port, steered.subset, steered.host);
            for lb in policies.iter().map(|p| &p["loadBalancer"]).filter(|lb| lb.is_object()) {
                if let Some(what) = locality_conflict(&lb["localityLbSetting"], outlier) {
                    add(&mut found, (Kind::LocalityLbConflict, &steered.client_namespace, what), &cluster);
                }
                let ignored: Vec<&str> = ["simple", "consistentHash", "warmupDurationSecs", "warmup"]
                    .into_iter()
                    .filter(|k| lb.get(*k).is_some_and(|v| !v.is_null()))
                    .collect();
                if !ignored.is_empty() {
                    let what = format!("loadBalancer.{}", ignored.join(", loadBalancer."));
                    add(&mut found, (Kind::LoadBalancerIgnored, &steered.client_namespace, what), &cluster);
                }
            }
        }
        let object = format!("DestinationRule {ns}/{name}");
        for ((kind, client, what), clusters) in found {
            let clusters = clusters.join(", ");
            out.push(if kind == Kind::LocalityLbConflict {
                Finding {
                    severity: Severity::Error,
                    kind,
                    object: object.clone(),
                    problem: format!(
                        "{what} on {clusters}, which namespace {client} steers: its sidecars reject the cluster's \
                         updates (load_balancing_policy cannot be combined with locality_weighted_lb_config)"
                    ),
                    fix: format!(
                        "drop localityLbSetting from this DestinationRule (or set its `enabled: false`), or take {host} \
                         out of the chart's `services` and helm upgrade"
                    ),
                }
            } else {
                Finding {
                    severity: Severity::Warning,
                    kind,
                    object: object.clone(),
                    problem: format!(
                        "{what} on {clusters} does not apply in namespace {client}: the chart's EnvoyFilter makes \
                         the cluster's load balancer override_host (fallback least_request)"
                    ),
                    fix: "remove the setting, or take the service out of `services` if it needs it (e.g. sticky \
                          sessions by consistentHash)"
                        .into(),
                }
            });
        }
    }
    out
}

/// Why a `localityLbSetting` makes istiod emit locality weighting, if it does: `distribute`, or
/// `failover`/`failoverPriority` together with outlier detection (docs/istio.md, "The EnvoyFilters").
fn locality_conflict(setting: &Value, outlier_detection: bool) -> Option<String> {
    if !setting.is_object() || setting["enabled"] == Value::Bool(false) {
        return None;
    }
    let set = |k: &str| setting[k].as_array().is_some_and(|a| !a.is_empty());
    if set("distribute") {
        return Some("loadBalancer.localityLbSetting.distribute".into());
    }
    if (set("failover") || set("failoverPriority")) && outlier_detection {
        return Some("loadBalancer.localityLbSetting.failover with outlierDetection".into());
    }
    None
}

/// Pods (anywhere: the trap springs after a namespace is opted out) that name a bootstrap-override
/// ConfigMap their namespace does not have: Istio mounts it as a required volume, so the pod's
/// next replacement cannot start.
fn bootstrap_overrides(snapshot: &Snapshot) -> Vec<Finding> {
    let config_maps: BTreeSet<(&str, &str)> = snapshot.config_maps.iter().map(ns_name).collect();
    let mut out = Vec::new();
    for pod in &snapshot.pods {
        let (ns, name) = ns_name(pod);
        let Some(wanted) = str_at(pod, &["metadata", "annotations", OVERRIDE_ANNOTATION]) else { continue };
        if config_maps.contains(&(ns, wanted)) {
            continue;
        }
        out.push(Finding {
            severity: Severity::Error,
            kind: Kind::BootstrapOverrideMissing,
            object: format!("Pod {ns}/{name}"),
            problem: format!(
                "annotated {OVERRIDE_ANNOTATION}: {wanted}, and namespace {ns} has no ConfigMap {wanted}: the \
                 injector mounts it as a required volume, so a new pod of this workload cannot start"
            ),
            fix: if wanted.ends_with("-sidecar-bootstrap") {
                format!(
                    "remove the annotation from the workload's pod template, or opt namespace {ns} in again (the \
                     chart creates {wanted} there with sidecarBootstrap.enabled)"
                )
            } else {
                format!("remove the annotation from the workload's pod template, or create ConfigMap {wanted} in {ns}")
            },
        });
    }
    out
}

/// The findings as an aligned table, then each one's fix, numbered.
pub fn table(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no findings: nothing tailweight check knows of is wrong\n".into();
    }
    let sev = |s: Severity| if s == Severity::Error { "ERROR" } else { "WARNING" };
    let kind = |k: Kind| serde_json::to_value(k).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let mut rows: Vec<[String; 5]> = vec![["#", "SEVERITY", "CHECK", "OBJECT", "PROBLEM"].map(String::from)];
    for (i, f) in findings.iter().enumerate() {
        rows.push([(i + 1).to_string(), sev(f.severity).into(), kind(f.kind), f.object.clone(), f.problem.clone()]);
    }
    let widths: Vec<usize> = (0..4).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r[..4].iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(&format!("{}  {}\n", cells.join("  "), r[4]));
    }
    out.push_str("\nfixes:\n");
    for (i, f) in findings.iter().enumerate() {
        out.push_str(&format!("{:>3}. {}\n", i + 1, f.fix));
    }
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    out.push_str(&format!("\n{errors} error(s), {} warning(s)\n", findings.len() - errors));
    out
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

#[cfg(test)]
mod tests;
