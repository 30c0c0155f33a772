//! The chart's ServiceMonitor and PodMonitor (`monitoring.enabled`) reach a Prometheus only if a
//! `Prometheus` resource of the Prometheus Operator selects them: by their labels
//! (`serviceMonitorSelector` / `podMonitorSelector`; unset selects none) and by their namespace's
//! (`...NamespaceSelector`; unset: the Prometheus's own namespace only). Otherwise the dashboard
//! and the alerts have no series, and nothing says so.

use super::objects::{labels, ns_name, Finding, Kind, Severity, Snapshot};
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether a Kubernetes label selector (`matchLabels`, `matchExpressions`) selects `l`; a null
/// selector selects nothing, an empty one everything.
pub fn selects(selector: &Value, l: &BTreeMap<String, String>) -> bool {
    if !selector.is_object() {
        return false;
    }
    let labels_ok = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| l.get(k).map(String::as_str) == v.as_str()));
    let expressions_ok = selector["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> =
                e["values"].as_array().map(|v| v.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            let value = l.get(key).map(String::as_str);
            match e["operator"].as_str().unwrap_or("") {
                "In" => value.is_some_and(|v| values.contains(&v)),
                "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
    });
    labels_ok && expressions_ok
}

fn namespace_labels(snapshot: &Snapshot, namespace: &str) -> BTreeMap<String, String> {
    snapshot.namespaces.iter().find(|n| ns_name(n).1 == namespace).map(labels).unwrap_or_default()
}

/// Whether `prometheus` picks up `monitor`, a ServiceMonitor (`pod` false) or a PodMonitor.
fn picks_up(snapshot: &Snapshot, prometheus: &Value, monitor: &Value, pod: bool) -> bool {
    let (selector, namespaces) = if pod {
        ("podMonitorSelector", "podMonitorNamespaceSelector")
    } else {
        ("serviceMonitorSelector", "serviceMonitorNamespaceSelector")
    };
    let spec = &prometheus["spec"];
    let monitor_ns = ns_name(monitor).0;
    let ns_ok = if spec[namespaces].is_object() {
        selects(&spec[namespaces], &namespace_labels(snapshot, monitor_ns))
    } else {
        ns_name(prometheus).0 == monitor_ns
    };
    ns_ok && selects(&spec[selector], &labels(monitor))
}

fn ours(monitor: &Value) -> bool {
    labels(monitor).get("app.kubernetes.io/part-of").map(String::as_str) == Some("tailweight")
}

/// A Prometheus's monitor selector, for the fix.
fn describe(prometheus: &Value, pod: bool) -> String {
    let (ns, name) = ns_name(prometheus);
    let key = if pod { "podMonitorSelector" } else { "serviceMonitorSelector" };
    format!("Prometheus {ns}/{name} selects {key} {}", prometheus["spec"][key])
}

pub fn monitors(snapshot: &Snapshot) -> Vec<Finding> {
    let Some(prometheuses) = &snapshot.prometheuses else { return Vec::new() };
    let mut out = Vec::new();
    for (list, pod, kind_name) in
        [(&snapshot.service_monitors, false, "ServiceMonitor"), (&snapshot.pod_monitors, true, "PodMonitor")]
    {
        for monitor in list.iter().flatten().filter(|m| ours(m)) {
            if prometheuses.iter().any(|p| picks_up(snapshot, p, monitor, pod)) {
                continue;
            }
            let (ns, name) = ns_name(monitor);
            let selectors: Vec<String> = prometheuses.iter().map(|p| describe(p, pod)).collect();
            out.push(Finding {
                severity: Severity::Warning,
                kind: Kind::MonitorNotSelected,
                object: format!("{kind_name} {ns}/{name}"),
                problem: if prometheuses.is_empty() {
                    "there is no Prometheus resource: nothing scrapes tailweight's series (dashboard and alerts empty)"
                        .into()
                } else {
                    "no Prometheus resource selects it (its labels, or its namespace's): the dashboard and the alerts \
                     have no series"
                        .into()
                },
                fix: if selectors.is_empty() {
                    "install a Prometheus (e.g. kube-prometheus-stack), or monitoring.enabled: false".into()
                } else {
                    format!(
                        "set the chart's monitoring.labels to labels a Prometheus selects (and have its namespace \
                         selector admit namespace {ns}), then helm upgrade: {}",
                        selectors.join("; ")
                    )
                },
            });
        }
    }
    out
}
