"""Smoke test of the real Istio control plane on 127.0.0.1, without the tailweight filter.

A pretend pod `client` (ip .10 of the run's 127.X.Y.0/24) runs its sidecar through pilot-agent +
upstream Envoy; two stdlib HTTP backends (.21, .22) form the mesh service `backend.tailweight.test`
(ServiceEntry + WorkloadEntries). Proves: xDS + mTLS bootstrap work, traffic flows through the sidecar, the apiserver
validates WasmPlugins, and a WasmPlugin reaches the sidecar over ECDS.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from cluster import ControlPlane
from loopback import http_get
from sidecars import Sidecar
from tailweight_e2e.procs import wait_for

NS = "smoke"
BACKENDS = {"backend-a": 21, "backend-b": 22}  # name -> host number in the run's 127.X.Y.0/24
HOST = "backend.tailweight.test"
REPO = Path(__file__).resolve().parents[2]
# Any valid proxy-wasm module will do; by default the project's filter once `make wasm` built it.
WASM = Path(os.environ.get("TW_SMOKE_WASM", REPO / "build" / "tailweight_filter.wasm"))


@dataclass
class Mesh:
    cp: ControlPlane
    sidecar: Sidecar
    port: int  # the service port == the client sidecar's outbound listener port

    @property
    def listener(self) -> str:
        return f"{self.sidecar.ip}_{self.port}"

    def send(self) -> requests.Response:
        """One request through the client sidecar's outbound listener, routed by Host."""
        return http_get(f"http://{self.sidecar.ip}:{self.port}/", headers={"Host": HOST}, timeout=5)


@pytest.fixture(scope="module")
def mesh(control_plane) -> Mesh:
    """Namespace, backends, their mesh service, and the client's sidecar with an outbound listener."""
    cp = control_plane
    cp.create_namespace(NS)
    endpoints = {name: cp.start_backend(name, cp.ip(n)) for name, n in BACKENDS.items()}
    client_ip = cp.ip(10)
    port = cp.procs.reserve_port()  # pilot-agent's Envoy binds it and cannot report a port-0 bind
    cp.apply_loopback_service(NS, HOST, port, endpoints, labels={"app": "backend"})
    cp.apply_sidecar_resource(NS, "client", {"app": "client"}, bind_ip=client_ip, egress_ports={port: "HTTP"})
    sidecar = cp.start_sidecar(NS, "client", ip=client_ip, labels={"app": "client"})
    return Mesh(cp, sidecar, port)


def test_request_through_sidecar_reaches_backends(mesh):
    sidecar = mesh.sidecar
    wait_for(lambda: mesh.listener in sidecar.listeners(), 30, f"listener {mesh.listener} in Envoy")
    seen = set()
    for _ in range(30):
        r = wait_for(lambda: (r := mesh.send()).status_code == 200 and r, 15, "200 via the sidecar")
        seen.add(r.headers["x-backend"])
    assert seen == set(BACKENDS), f"both backends should serve traffic, saw {seen}"
    stat = f"cluster.outbound|{mesh.port}||{HOST};.upstream_rq_2xx"  # Istio's `;` tag delimiter
    assert int(sidecar.stats("upstream_rq_2xx").get(stat, 0)) >= 30


def test_istiod_sees_sidecar_in_sync(mesh):
    cp, sidecar = mesh.cp, mesh.sidecar
    def synced():
        return next((e for e in cp.syncz() if e.get("proxy") == sidecar.proxy_id), None)
    entry = wait_for(synced, 30, f"{sidecar.proxy_id} in istiod /debug/syncz")
    for kind in ("cluster", "listener", "route", "endpoint"):  # Envoy ACKed what istiod sent last
        assert entry.get(f"{kind}_sent") and entry[f"{kind}_sent"] == entry.get(f"{kind}_acked"), entry
    dump = cp.istiod_config_dump(sidecar.proxy_id)
    assert dump.get("configs"), "istiod's config_dump for the proxy is empty"
    # The workload certificate came from istiod's CA through pilot-agent (SDS).
    secrets = sidecar.config_dump(resource="dynamic_active_secrets")["configs"]
    assert any(s.get("name") == "default" for s in secrets), secrets


def wasmplugin(name: str, url: str, **spec) -> str:
    return yaml.safe_dump({
        "apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "client"}}, "url": url, **spec},
    })


@pytest.mark.parametrize("url,spec,message", [
    ("ftp://example.invalid/x.wasm", {}, "url must have schema one of [http, https, file, oci]"),
    ("file:///x.wasm", {"phase": "NOT_A_PHASE"}, "spec.phase"),
    ("file:///x.wasm", {"sha256": "abc"}, "spec.sha256"),
])
def test_invalid_wasmplugin_rejected_by_apiserver(mesh, url, spec, message):
    r = mesh.cp.apply_yaml(wasmplugin("bad", url, **spec), check=False)
    assert r.returncode != 0, f"apiserver accepted an invalid WasmPlugin: {r.stdout}"
    assert 'WasmPlugin "bad" is invalid' in r.stderr and message in r.stderr, r.stderr


def test_wasmplugin_reaches_sidecar_via_ecds(mesh):
    if not WASM.is_file():
        pytest.skip(f"no proxy-wasm module at {WASM} yet (`make wasm` builds it; or set TW_SMOKE_WASM)")
    cp, sidecar = mesh.cp, mesh.sidecar
    name = "tw-smoke"
    doc = wasmplugin(name, f"file://{WASM}")
    cp.apply_yaml(doc)
    # This istio translates a WasmPlugin into a TrafficExtension: the ECDS resource is named
    # extensions.istio.io/trafficextension/<ns>.<name>~istio-translated-wasmplugin.
    def delivered():
        return next(((k, c) for k, c in sidecar.ecds_filters().items() if f"/{NS}.{name}~" in k
                     or k == f"{NS}.{name}"), None)
    ecds_name, config = wait_for(delivered, 30, f"ECDS filter for WasmPlugin {NS}/{name} in Envoy")
    vm = config["ecds_filter"]["typed_config"]["config"]["vm_config"]
    assert vm["runtime"] == "envoy.wasm.runtime.v8" and vm["code"]["local"]["filename"] == str(WASM), vm
    # The outbound listener's HTTP filter chain now discovers the filter through ECDS.
    assert ecds_name in yaml.safe_dump(sidecar.listeners()[mesh.listener])
    # The module loaded into a V8 VM, and requests still pass the filter chain.
    wait_for(lambda: mesh.send().status_code == 200, 15, "200 with the Wasm filter in the chain")
    wasm_stats = sidecar.stats("wasm")
    assert any(k.endswith("v8.active") and int(v) > 0 for k, v in wasm_stats.items()), wasm_stats
    # Deleting the WasmPlugin takes the filter out of the listener again.
    cp.delete_yaml(doc)
    wait_for(lambda: ecds_name not in yaml.safe_dump(sidecar.listeners()[mesh.listener]), 30,
             "filter removed from the listener after deleting the WasmPlugin")
