//! Pods by name: `--pod <namespace>/<name>` to the address of its sidecar's Envoy admin
//! interface, and endpoint addresses back to pod names. Pure: the caller gets the objects.

use serde_json::Value;
use std::collections::BTreeMap;

/// Envoy's admin port in an Istio sidecar unless the pod's `proxy.istio.io/config` says otherwise.
pub const DEFAULT_ADMIN_PORT: u16 = 15000;
const PROXY_CONFIG: &str = "proxy.istio.io/config";

/// `<namespace>/<name>` (or `<name>`, in `default_namespace`).
pub fn parse_ref(text: &str, default_namespace: &str) -> Result<(String, String), String> {
    let (ns, name) = text.split_once('/').unwrap_or((default_namespace, text));
    if ns.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!("--pod {text:?}: expected <namespace>/<name>"));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// Whether the pod has Istio's sidecar: an `istio-proxy` container (or init container, for
/// Kubernetes' native sidecars).
pub fn has_sidecar(pod: &Value) -> bool {
    ["containers", "initContainers"]
        .iter()
        .any(|k| pod["spec"][k].as_array().is_some_and(|cs| cs.iter().any(|c| c["name"] == "istio-proxy")))
}

/// The pod's IP and its sidecar's admin port (`proxyAdminPort` in the `proxy.istio.io/config`
/// annotation, else 15000). Err: not running, no IP yet, or no istio-proxy container.
pub fn admin_target(pod: &Value) -> Result<(String, u16), String> {
    let name = format!(
        "pod {}/{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or("")
    );
    if !has_sidecar(pod) {
        return Err(format!("{name} has no istio-proxy container: it is not in the mesh"));
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("Unknown");
    let ip = pod["status"]["podIP"].as_str().filter(|ip| !ip.is_empty());
    let Some(ip) = ip.filter(|_| phase == "Running") else {
        return Err(format!("{name} is {phase}, without a pod IP to reach"));
    };
    let port = match pod["metadata"]["annotations"][PROXY_CONFIG].as_str() {
        Some(config) => proxy_admin_port(config)
            .unwrap_or(Ok(DEFAULT_ADMIN_PORT))
            .map_err(|e| format!("{name}: annotation {PROXY_CONFIG}: {e}"))?,
        None => DEFAULT_ADMIN_PORT,
    };
    Ok((ip.to_string(), port))
}

/// `proxyAdminPort` from a ProxyConfig written as YAML or JSON (`proxyAdminPort: 15001`,
/// `{"proxyAdminPort": 15001}`); None when it is not set.
fn proxy_admin_port(config: &str) -> Option<Result<u16, String>> {
    let (_, rest) = config.split_once("proxyAdminPort")?;
    let rest = rest.trim_start_matches(['"', '\'']).trim_start();
    let value: String = rest.strip_prefix(':')?.trim_start().chars().take_while(char::is_ascii_digit).collect();
    Some(value.parse::<u16>().map_err(|_| format!("proxyAdminPort {value:?} is not a port")))
}

/// The IP of an endpoint address (`10.0.0.1:8080`, `[fd00::2]:8080`).
pub fn ip_of(address: &str) -> &str {
    match address.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => address.rsplit_once(':').map_or(address, |(ip, _)| ip),
    }
}

/// Pod names by IP: from EndpointSlices' `targetRef` (kind Pod) and from pods' `status.podIPs`.
pub fn names_by_ip(endpoint_slices: &[Value], pods: &[Value]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(name) = pod["metadata"]["name"].as_str() else { continue };
        let ips = pod["status"]["podIPs"].as_array().into_iter().flatten().filter_map(|p| p["ip"].as_str());
        for ip in ips.chain(pod["status"]["podIP"].as_str()) {
            out.insert(ip.to_string(), name.to_string());
        }
    }
    for slice in endpoint_slices {
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            let target = &endpoint["targetRef"];
            let Some(name) = target["name"].as_str().filter(|_| target["kind"] == "Pod") else { continue };
            for ip in endpoint["addresses"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                out.insert(ip.to_string(), name.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: Value, containers: &[&str], phase: &str, ip: &str) -> Value {
        json!({"metadata": {"namespace": "shop", "name": "web-1", "annotations": annotations},
               "spec": {"containers": containers.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
               "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}]}})
    }

    #[test]
    fn a_pod_by_namespace_and_name() {
        assert_eq!(parse_ref("shop/web-1", "default").unwrap(), ("shop".into(), "web-1".into()));
        assert_eq!(parse_ref("web-1", "default").unwrap(), ("default".into(), "web-1".into()));
        assert!(parse_ref("shop/", "default").is_err() && parse_ref("a/b/c", "d").is_err());
    }

    #[test]
    fn the_sidecars_admin_port_from_the_pod() {
        let plain = pod(json!({}), &["app", "istio-proxy"], "Running", "10.1.0.7");
        assert_eq!(admin_target(&plain).unwrap(), ("10.1.0.7".into(), 15000));
        let yaml = pod(
            json!({PROXY_CONFIG: "concurrency: 2\nproxyAdminPort: 15100\n"}),
            &["istio-proxy"],
            "Running",
            "10.1.0.7",
        );
        assert_eq!(admin_target(&yaml).unwrap().1, 15100);
        let json_config =
            pod(json!({PROXY_CONFIG: r#"{"proxyAdminPort": 15200}"#}), &["istio-proxy"], "Running", "10.1.0.7");
        assert_eq!(admin_target(&json_config).unwrap().1, 15200);
        let other = pod(json!({PROXY_CONFIG: "concurrency: 2"}), &["istio-proxy"], "Running", "10.1.0.7");
        assert_eq!(admin_target(&other).unwrap().1, 15000);
        let bad = pod(json!({PROXY_CONFIG: "proxyAdminPort: 99999"}), &["istio-proxy"], "Running", "10.1.0.7");
        assert!(admin_target(&bad).unwrap_err().contains("not a port"));
        let bare = pod(json!({}), &["app"], "Running", "10.1.0.7");
        assert!(admin_target(&bare).unwrap_err().contains("no istio-proxy container"));
        let pending = pod(json!({}), &["istio-proxy"], "Pending", "");
        assert!(admin_target(&pending).unwrap_err().contains("is Pending"));
    }

    #[test]
    fn endpoint_addresses_to_pod_names() {
        assert_eq!(
            (ip_of("10.0.0.1:8080"), ip_of("[fd00::2]:8080"), ip_of("10.0.0.3")),
            ("10.0.0.1", "fd00::2", "10.0.0.3")
        );
        let pods = [pod(json!({}), &["app"], "Running", "10.0.0.1")];
        let slices = [json!({"endpoints": [
            {"addresses": ["fd00::2"], "targetRef": {"kind": "Pod", "name": "cart-b"}},
            {"addresses": ["10.0.0.9"], "targetRef": {"kind": "Node", "name": "n"}}]})];
        let names = names_by_ip(&slices, &pods);
        assert_eq!(names.get("10.0.0.1").map(String::as_str), Some("web-1"));
        assert_eq!(names.get("fd00::2").map(String::as_str), Some("cart-b"));
        assert!(!names.contains_key("10.0.0.9"));
    }
}
