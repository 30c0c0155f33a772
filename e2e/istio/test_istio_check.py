"""The `tailweight` CLI against the e2e apiserver: `tailweight check` finds each silent failure it
knows once the bad objects exist (and reports no error before), and `tailweight endpoints --pod`
finds a pod's sidecar through the apiserver and names the endpoints' pods.

The chart is installed with Helm from charts/tailweight (release `twc-tailweight` in namespace
`twc-agg`, opting `twc-web` in for `cart.twc-shop`), so `check` reads the objects the chart makes.
There is no kubelet here: the aggregator's pods, the client pod and the destination's pods are
objects the test writes (with or without an istio-proxy container), and the client's "sidecar" is
a stub Envoy admin server in this process on the pod's IP (a host of the run's /24) and the admin
port its proxy.istio.io/config annotation names.

Namespaces `twc-*`, host numbers .170-.175 of the run's /24.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

import tailweight_mesh as tm
from tailweight_e2e.paths import binary
from versions import MONITORING_CRDS

RELEASE = "twc-tailweight"  # contains the chart's name: objects are named twc-tailweight-*
AGG_NS, WEB_NS, SHOP_NS = "twc-agg", "twc-web", "twc-shop"
AGGREGATOR = f"{RELEASE}-aggregator"
AGG_HOST = f"{AGGREGATOR}.{AGG_NS}.svc.cluster.local"
CLUSTER = f"outbound|8080||cart.{SHOP_NS}.svc.cluster.local"
SELECTOR = {"app.kubernetes.io/name": "tailweight-aggregator", "app.kubernetes.io/instance": RELEASE}

# The Prometheus Operator's Prometheus kind, reduced to what the apiserver needs to store one (the
# pinned CRD file has the monitors only).
PROMETHEUS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheuses.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "Prometheus", "plural": "prometheuses", "singular": "prometheus",
                       "listKind": "PrometheusList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def pod(cp, namespace: str, name: str, ip: str, labels: dict | None = None, annotations: dict | None = None,
        sidecar: bool = True) -> None:
    """A Pod object that looks Running at ip, with an istio-proxy container when `sidecar`."""
    containers = [{"name": "app", "image": "tailweight.invalid/none"}]
    if sidecar:
        containers.append({"name": "istio-proxy", "image": "tailweight.invalid/proxy"})
    cp.apply_yaml(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"nodeName": "loopback", "containers": containers},
    }))
    status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                         "conditions": [{"type": "Ready", "status": "True"}]}}
    cp.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def tailweight(cp, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary("tailweight")), f"--kubeconfig={cp.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=120)


def check(cp) -> tuple[int, list[dict]]:
    """`tailweight check -o json`: its exit code and the findings about this test's objects."""
    r = tailweight(cp, "check", "-o", "json")
    assert r.returncode in (0, 1), r.stderr
    ours = [f for f in json.loads(r.stdout) if "twc-" in f["object"] or "twc-" in f["problem"]]
    return r.returncode, ours


def kinds(findings: list[dict]) -> dict[str, dict]:
    return {f"{f['kind']} {f['object']}": f for f in findings}


@pytest.fixture(scope="module")
def installed(control_plane):
    cp = control_plane
    if not MONITORING_CRDS.is_file():
        pytest.skip(f"not built: {MONITORING_CRDS} (make istio-bins)")
    binary("tailweight")
    cp.apply_crds(MONITORING_CRDS, "the Prometheus Operator's CRDs")
    cp.apply_yaml(yaml.safe_dump(PROMETHEUS_CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/prometheuses.monitoring.coreos.com", "--timeout=60s")
    for ns in (WEB_NS, SHOP_NS):
        cp.create_namespace(ns)
    values = {
        "services": [{"name": "cart", "namespace": SHOP_NS, "port": 8080, "clients": [WEB_NS]}],
        "module": tm.module_values("file:///var/lib/tailweight/tailweight_filter.wasm"),
        "monitoring": {"enabled": True, "labels": {"release": "prom"}},
    }
    cp.helm.install(RELEASE, str(tm.CHART), AGG_NS, values)
    cp.kubectl("label", "namespace", AGG_NS, "istio-injection=enabled", "--overwrite")
    cp.apply_yaml(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "cart", "namespace": SHOP_NS},
        "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": 8080}]}}))
    # Two aggregator replicas with their sidecars, and a Prometheus that selects both monitors.
    for i in (0, 1):
        pod(cp, AGG_NS, f"{AGGREGATOR}-{i}", cp.ip(170 + i), labels=SELECTOR)
    cp.apply_yaml(yaml.safe_dump({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": "prom", "namespace": AGG_NS},
        "spec": {"serviceMonitorSelector": {"matchLabels": {"release": "prom"}},
                 "podMonitorSelector": {"matchLabels": {"release": "prom"}}}}))
    yield cp
    cp.helm.uninstall(RELEASE, AGG_NS)
    for ns in (AGG_NS, WEB_NS, SHOP_NS):
        cp.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")


def test_check_finds_each_silent_failure(installed):
    cp = installed
    _, findings = check(cp)
    # (The exit code may be 1 here: other tests' pretend aggregator pods have no istio-proxy.)
    assert [f for f in findings if f["severity"] == "error"] == [], findings

    # Revisioned Istio: the client namespace on revision `canary`, the aggregator's namespace not
    # labelled for it, and a replica that came up without a sidecar.
    cp.kubectl("label", "namespace", WEB_NS, "istio.io/rev=canary")
    cp.kubectl("label", "namespace", AGG_NS, "istio-injection-")
    pod(cp, AGG_NS, f"{AGGREGATOR}-bare", cp.ip(172), labels=SELECTOR, sidecar=False)
    # The aggregator's Service exported to its own namespace only.
    cp.kubectl("annotate", "service", AGGREGATOR, "-n", AGG_NS, "networking.istio.io/exportTo=.")
    # A Sidecar in the client namespace whose egress leaves the aggregator out.
    # A DestinationRule on the steered host with locality weighting and a simple load balancer.
    cp.apply_yaml(yaml.safe_dump_all([
        {"apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
         "metadata": {"name": "default", "namespace": WEB_NS},
         "spec": {"egress": [{"hosts": ["./*", f"{SHOP_NS}/*", "istio-system/*"]}]}},
        {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
         "metadata": {"name": "cart", "namespace": SHOP_NS},
         "spec": {"host": "cart", "trafficPolicy": {"loadBalancer": {
             "simple": "ROUND_ROBIN",
             "localityLbSetting": {"enabled": True, "distribute": [
                 {"from": "region1/zone1/*", "to": {"region1/zone1/*": 80, "region1/zone2/*": 20}}]}}}}},
    ]))
    # The Prometheus selects pod monitors by a label the chart's PodMonitor does not carry.
    cp.kubectl("patch", "prometheus", "prom", "-n", AGG_NS, "--type=merge",
               "-p", json.dumps({"spec": {"podMonitorSelector": {"matchLabels": {"release": "other"}}}}))
    # A client pod naming a bootstrap ConfigMap its namespace does not have.
    pod(cp, WEB_NS, "client-old", cp.ip(173),
        annotations={"sidecar.istio.io/bootstrapOverride": "gone-sidecar-bootstrap"})

    code, findings = check(cp)
    found = kinds(findings)
    expected = {
        f"aggregator-without-sidecar Pod {AGG_NS}/{AGGREGATOR}-bare": "error",
        f"aggregator-hidden-by-export-to Service {AGG_NS}/{AGGREGATOR}": "error",
        f"aggregator-hidden-by-sidecar Sidecar {WEB_NS}/default": "error",
        f"locality-lb-conflict DestinationRule {SHOP_NS}/cart": "error",
        f"load-balancer-ignored DestinationRule {SHOP_NS}/cart": "warning",
        f"monitor-not-selected PodMonitor {AGG_NS}/{RELEASE}-sidecars": "warning",
        f"bootstrap-override-missing Pod {WEB_NS}/client-old": "error",
    }
    assert {k: found[k]["severity"] for k in expected if k in found} == expected, json.dumps(findings, indent=1)
    assert code == 1
    fix = found[f"aggregator-without-sidecar Pod {AGG_NS}/{AGGREGATOR}-bare"]["fix"]
    assert fix.startswith(f"kubectl label namespace {AGG_NS} istio-injection- istio.io/rev=canary"), fix
    assert CLUSTER in found[f"locality-lb-conflict DestinationRule {SHOP_NS}/cart"]["problem"]
    assert f"ServiceMonitor {AGG_NS}/{AGGREGATOR}" not in " ".join(found), found  # it is selected

    # Without the annotation, the mesh's default hides it (the mesh config of revision `canary`,
    # which twc-web is labelled with; istiod here reads its own from a file).
    cp.kubectl("annotate", "service", AGGREGATOR, "-n", AGG_NS, "networking.istio.io/exportTo-")
    mesh = "rootNamespace: istio-system\ndefaultServiceExportTo:\n- \".\"\n"
    cp.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "istio-canary", "namespace": "istio-system"},
                                  "data": {"mesh": mesh}}))
    try:
        _, findings = check(cp)
    finally:
        cp.delete("configmap", "istio-system", "istio-canary")
    found = kinds(findings)
    assert f"aggregator-hidden-by-mesh-default Service {AGG_NS}/{AGGREGATOR}" in found, found
    assert f"aggregator-hidden-by-export-to Service {AGG_NS}/{AGGREGATOR}" not in found, found

    # The table: every finding numbered with its fix.
    r = tailweight(cp, "check")
    assert r.returncode == 1 and "fixes:" in r.stdout and "aggregator-hidden-by-sidecar" in r.stdout, r.stdout


class StubAdmin(BaseHTTPRequestHandler):
    """Envoy's admin /clusters?format=json and /stats as a sidecar with the filter answers them."""
    hosts: list[str] = []

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/clusters"):
            body = json.dumps({"cluster_statuses": [{"name": CLUSTER, "host_statuses": [
                {"address": {"socket_address": {"address": h, "port_value": 8080}}} for h in self.hosts]}]})
        elif self.path.startswith("/stats"):
            body = "".join(f"wasmcustom.tailweight.endpoint.{h}:8080.{CLUSTER}.picks: {10 * (i + 1)}\n"
                           f"wasmcustom.tailweight.endpoint.{h}:8080.{CLUSTER}.state: 0\n"
                           for i, h in enumerate(self.hosts)) + "wasmcustom.tailweight.weights_age_ms: 300\n"
        else:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_endpoints_by_pod_name_with_pod_names(installed):
    cp = installed
    client_ip, cart_ips = cp.ip(174), [cp.ip(175), cp.ip(171)]
    StubAdmin.hosts = cart_ips
    server = ThreadingHTTPServer((client_ip, 0), StubAdmin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        admin_port = server.server_address[1]
        pod(cp, WEB_NS, "client", client_ip, annotations={"proxy.istio.io/config": f"proxyAdminPort: {admin_port}\n"})
        pod(cp, SHOP_NS, "cart-a", cart_ips[0], labels={"app": "cart"}, sidecar=False)
        # The second address belongs to no pod of the destination's namespace: its address stays.
        r = tailweight(cp, "endpoints", "--pod", f"{WEB_NS}/client", "--reach", "direct", "--cluster", CLUSTER,
                       "--window-s", "0", "-o", "json")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert [(e["pod"], e["address"], e["picks"]) for e in report["endpoints"]] == [
            ("cart-a", f"{cart_ips[0]}:8080", 10), (None, f"{cart_ips[1]}:8080", 20)], report
        table = tailweight(cp, "endpoints", "--pod", f"{WEB_NS}/client", "--reach", "direct", "--cluster", CLUSTER,
                           "--window-s", "0")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[1].startswith("POD ") and "cart-a" in table.stdout, table.stdout
        # A pod without a sidecar is refused with the reason.
        bare = tailweight(cp, "endpoints", "--pod", f"{SHOP_NS}/cart-a", "--cluster", CLUSTER)
        assert bare.returncode == 1 and "no istio-proxy container" in bare.stderr, bare.stderr
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
