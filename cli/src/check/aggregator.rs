//! The aggregator as the opted-in sidecars need it: its pods with a sidecar (the reports are mTLS
//! to it), and its Service visible from every opted-in namespace (exportTo, the mesh default,
//! `Sidecar` egress hosts). Without either, every report fails and the sidecars steer on what each
//! sees alone, with nothing in the application's traffic to show it.

use super::objects::{exported_to, host_matches, labels, ns_name, service_of_host, str_at, strings};
use super::objects::{Finding, Installed, Kind, Mesh, Severity, Snapshot, EXPORT_TO_ANNOTATION};
use crate::pods::has_sidecar;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn find<'a>(list: &'a [Value], namespace: &str, name: &str) -> Option<&'a Value> {
    list.iter().find(|v| ns_name(v) == (namespace, name))
}

/// The revisions: those the namespaces are labelled with (`istio.io/rev`), then those of the
/// injectors' webhook configurations.
fn revisions(snapshot: &Snapshot) -> Vec<String> {
    let mut out: Vec<String> =
        snapshot.namespaces.iter().filter_map(|n| labels(n).get("istio.io/rev").cloned()).collect();
    out.extend(snapshot.webhooks.iter().flatten().filter_map(|w| labels(w).get("istio.io/rev").cloned()));
    let mut seen = BTreeSet::new();
    out.retain(|r| seen.insert(r.clone()));
    out
}

/// Whether a default-revision injector exists: the webhooks that act on `istio-injection=enabled`
/// and on the pod label `sidecar.istio.io/inject=true` alone. None: no Istio injector webhook
/// listed (not readable, or an injector this cannot see), so unknown.
fn default_injector(snapshot: &Snapshot) -> Option<bool> {
    let names: Vec<&str> = snapshot
        .webhooks
        .iter()
        .flatten()
        .flat_map(|c| c["webhooks"].as_array().into_iter().flatten())
        .filter_map(|w| w["name"].as_str())
        .filter(|n| n.ends_with("sidecar-injector.istio.io"))
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(names.iter().any(|n| matches!(*n, "object.sidecar-injector.istio.io" | "namespace.sidecar-injector.istio.io")))
}

/// Why the namespace's pods may go without a sidecar, and how to label it and restart
/// `deployment` (the chart names the aggregator's Deployment as its Service); None when its
/// labels get its pods injected (or nothing says otherwise).
fn injection_gap(snapshot: &Snapshot, namespace: &str, deployment: &str) -> Option<(Severity, String, String)> {
    let ns_labels = snapshot.namespaces.iter().find(|n| ns_name(n).1 == namespace).map(labels).unwrap_or_default();
    if ns_labels.contains_key("istio.io/rev") {
        return None;
    }
    let revisions = revisions(snapshot);
    let default = default_injector(snapshot);
    let label = match revisions.iter().find(|r| *r != "default") {
        Some(rev) => format!("kubectl label namespace {namespace} istio-injection- istio.io/rev={rev}"),
        None => format!("kubectl label namespace {namespace} istio-injection=enabled --overwrite"),
    };
    let fix = format!("{label}, then kubectl -n {namespace} rollout restart deployment {deployment}");
    let no_default = "and the cluster has no default-revision injector (only revisions: label namespaces istio.io/rev)";
    let problem = match (ns_labels.get("istio-injection").map(String::as_str), default) {
        (Some("enabled"), Some(false)) => {
            format!("namespace {namespace} is labelled istio-injection=enabled, which only the default revision reads, {no_default}")
        }
        (Some("enabled"), _) | (None, Some(true)) => return None,
        (Some(value), _) => format!(
            "namespace {namespace} is labelled istio-injection={value}: the injector skips its pods, whatever their \
             sidecar.istio.io/inject label"
        ),
        (None, Some(false)) => format!(
            "namespace {namespace} has neither istio.io/rev nor istio-injection, {no_default}: the aggregator's pod \
             label sidecar.istio.io/inject=true injects nothing"
        ),
        (None, None) if revisions.is_empty() => return None,
        (None, None) => {
            return Some((
                Severity::Warning,
                format!(
                    "namespace {namespace} has neither istio.io/rev nor istio-injection, and namespaces use revisions \
                     ({}): with no default revision (istioctl tag set default) the aggregator's pod label \
                     sidecar.istio.io/inject=true injects nothing",
                    revisions.join(", ")
                ),
                fix,
            ))
        }
    };
    Some((Severity::Error, problem, fix))
}

/// The aggregator Services the WasmPlugins name: (namespace, name, host).
fn aggregator_services(installed: &Installed) -> BTreeSet<(String, String, String)> {
    installed
        .aggregators
        .iter()
        .filter_map(|(_, host)| service_of_host(host).map(|(name, ns)| (ns, name, host.clone())))
        .collect()
}

/// The aggregator's Service, its pods and their sidecars, and its namespace's injection labels.
pub fn sidecars(snapshot: &Snapshot, installed: &Installed) -> Vec<Finding> {
    let mut out = Vec::new();
    for (ns, name, host) in aggregator_services(installed) {
        let object = format!("Service {ns}/{name}");
        let Some(service) = find(&snapshot.services, &ns, &name) else {
            out.push(Finding {
                severity: Severity::Error,
                kind: Kind::AggregatorServiceMissing,
                object,
                problem: format!("the WasmPlugins report to {host}, and there is no such Service"),
                fix: "helm upgrade with aggregator.enabled: true, or aggregator.enabled: false for local-only steering"
                    .into(),
            });
            continue;
        };
        let selector: BTreeMap<String, String> = service["spec"]["selector"]
            .as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        let pods: Vec<&Value> = snapshot
            .pods
            .iter()
            .filter(|p| ns_name(p).0 == ns && !selector.is_empty())
            .filter(|p| {
                let l = labels(p);
                selector.iter().all(|(k, v)| l.get(k) == Some(v))
            })
            .collect();
        let gap = injection_gap(snapshot, &ns, &name);
        let bare: Vec<&Value> = pods.iter().copied().filter(|p| !has_sidecar(p)).collect();
        if pods.is_empty() {
            out.push(Finding {
                severity: Severity::Warning,
                kind: Kind::AggregatorNoPods,
                object: object.clone(),
                problem: "selects no pod: no replica receives the reports".into(),
                fix: format!("kubectl -n {ns} describe deployment {name}; kubectl -n {ns} get events"),
            });
        }
        for pod in &bare {
            let fix = gap.as_ref().map_or_else(
                || format!("find why the injector skipped it: kubectl -n {ns} get pod {} -o yaml (annotations sidecar.istio.io/*); then restart it", ns_name(pod).1),
                |(_, _, fix)| fix.clone(),
            );
            out.push(Finding {
                severity: Severity::Error,
                kind: Kind::AggregatorWithoutSidecar,
                object: format!("Pod {ns}/{}", ns_name(pod).1),
                problem:
                    "the aggregator replica has no istio-proxy container: the sidecars' reports to it (mTLS) fail, \
                          and they steer on what each sees alone"
                        .into(),
                fix,
            });
        }
        if let Some((severity, problem, fix)) = gap.filter(|_| pods.is_empty()) {
            out.push(Finding {
                severity,
                kind: Kind::AggregatorNamespaceNotInjected,
                object: format!("Namespace {ns}"),
                problem,
                fix,
            });
        }
    }
    out
}

/// Whether a `Sidecar`'s egress hosts (`<namespace>/<dns name>`) include `host` of `service_ns`.
/// A Sidecar without egress listeners keeps the default (everything visible).
fn sidecar_sees(sidecar: &Value, service_ns: &str, host: &str) -> bool {
    let Some(egress) = sidecar["spec"]["egress"].as_array().filter(|e| !e.is_empty()) else { return true };
    let own_ns = ns_name(sidecar).0;
    egress.iter().flat_map(|e| strings(&e["hosts"])).any(|entry| {
        let Some((ns, dns)) = entry.split_once('/') else { return false };
        let ns_ok = ns == "*" || ns == service_ns || (ns == "." && own_ns == service_ns);
        ns_ok && host_matches(dns, service_ns, host)
    })
}

/// The Sidecar resources that apply in `client`: its namespace-wide one (no workloadSelector), or
/// else the root namespace's; and each of its own with a workloadSelector.
fn sidecars_in<'a>(snapshot: &'a Snapshot, mesh: &Mesh, client: &str) -> Vec<&'a Value> {
    let wide =
        |ns: &str| snapshot.sidecars.iter().find(|s| ns_name(s).0 == ns && s["spec"]["workloadSelector"].is_null());
    let mut out: Vec<&Value> = wide(client).or_else(|| wide(&mesh.root_namespace)).into_iter().collect();
    out.extend(snapshot.sidecars.iter().filter(|s| ns_name(s).0 == client && !s["spec"]["workloadSelector"].is_null()));
    out
}

/// Whether each opted-in namespace's sidecars can see the aggregator's Service.
pub fn visibility(snapshot: &Snapshot, installed: &Installed, mesh: &Mesh) -> Vec<Finding> {
    let mut out = Vec::new();
    let pairs: BTreeSet<&(String, String)> = installed.aggregators.iter().collect();
    for (client, host) in pairs {
        let Some((name, ns)) = service_of_host(host) else { continue };
        let Some(service) = find(&snapshot.services, &ns, &name) else { continue };
        let annotation = str_at(service, &["metadata", "annotations", EXPORT_TO_ANNOTATION]);
        let (export_to, kind, from) = match (annotation, &mesh.default_service_export_to) {
            (Some(a), _) => (
                a.split(',').map(|s| s.trim().to_string()).collect(),
                Kind::AggregatorHiddenByExportTo,
                format!("its annotation {EXPORT_TO_ANNOTATION}: {a}"),
            ),
            (None, Some((source, values))) => (
                values.clone(),
                Kind::AggregatorHiddenByMeshDefault,
                format!("the mesh's defaultServiceExportTo {values:?} ({source})"),
            ),
            (None, None) => (vec!["*".to_string()], Kind::AggregatorHiddenByExportTo, String::new()),
        };
        if !exported_to(&export_to, &ns, client) {
            out.push(Finding {
                severity: Severity::Error,
                kind,
                object: format!("Service {ns}/{name}"),
                problem: format!(
                    "{from} hides it from namespace {client}, which is opted in: its sidecars have no cluster for the \
                     aggregator and every report fails"
                ),
                fix: format!(
                    "kubectl -n {ns} annotate service {name} --overwrite {EXPORT_TO_ANNOTATION}='*' (or list {client} \
                     in it)"
                ),
            });
        }
        for sidecar in sidecars_in(snapshot, mesh, client) {
            if sidecar_sees(sidecar, &ns, host) {
                continue;
            }
            let (sns, sname) = ns_name(sidecar);
            let whose = if sidecar["spec"]["workloadSelector"].is_null() {
                format!("every sidecar of namespace {client}")
            } else {
                format!("the sidecars of namespace {client} it selects")
            };
            out.push(Finding {
                severity: Severity::Error,
                kind: Kind::AggregatorHiddenBySidecar,
                object: format!("Sidecar {sns}/{sname}"),
                problem: format!(
                    "its egress hosts leave out {host}: {whose} cannot reach the aggregator, every report fails"
                ),
                fix: format!("add \"{ns}/{host}\" (or \"{ns}/*\") to spec.egress[].hosts"),
            });
        }
    }
    out
}
