//! `tailweight check`: the failures that make no noise, found in what the apiserver holds. Pure:
//! the caller lists the objects (`Snapshot`), `check` returns the findings, each with its fix.
//!
//! What tailweight is, it reads from the chart's own objects: every client-role WasmPlugin
//! (`app.kubernetes.io/part-of: tailweight`, `component: filter`) names the opted-in namespace (its
//! own), the clusters it steers (`pluginConfig.clusters`, `outbound|<port>|<subset>|<host>`) and the
//! aggregator (`pluginConfig.aggregator.authority`, `<service>.<namespace>.svc.<domain>`).

mod aggregator;
mod monitors;
mod objects;

use objects::{
    exported_to, host_matches, installed, mesh, ns_name, str_at, strings, Installed, Mesh, Steered, OVERRIDE_ANNOTATION,
};
pub use objects::{parse_cluster, service_of_host, Finding, Kind, Severity, Snapshot};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Everything `check` finds, errors first.
pub fn check(snapshot: &Snapshot) -> Vec<Finding> {
    let installed = installed(snapshot);
    if installed.steered.is_empty() && installed.aggregators.is_empty() {
        return vec![Finding {
            severity: Severity::Warning,
            kind: Kind::NotInstalled,
            object: "-".into(),
            problem: "no WasmPlugin (nor native-shell EnvoyFilter) of the tailweight chart \
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

#[cfg(test)]
mod tests;
