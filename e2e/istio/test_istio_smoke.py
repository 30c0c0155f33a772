"""Smoke test of the real Istio control plane on 127.0.0.1, without the tailweight filter.

A pretend pod `client` (127.0.0.10) runs its sidecar through pilot-agent + upstream Envoy; two stdlib
HTTP backends on 127.0.0.21/.22 form the mesh service `backend.tailweight.test` (ServiceEntry +
WorkloadEntries). Proves: xDS + mTLS bootstrap work, traffic flows through the sidecar, the apiserver
validates WasmPlugins, and a WasmPlugin reaches the sidecar over ECDS.
"""

import os
from pathlib import Path

import pytest
import requests
import yaml

from cluster import LOCALHOST, free_port, http_get, wait_for

NS = "smoke"
CLIENT_IP = "127.0.0.10"
BACKENDS = {"backend-a": "127.0.0.21", "backend-b": "127.0.0.22"}
HOST = "backend.tailweight.test"
REPO = Path(__file__).resolve().parents[2]
# Any valid proxy-wasm module will do; by default the project's filter once `make wasm` built it.
WASM = Path(os.environ.get("TW_SMOKE_WASM", REPO / "build" / "tailweight_filter.wasm"))


@pytest.fixture(scope="module")
def mesh(control_plane):
    """Namespace, backends, their mesh service, and the client's sidecar with an outbound listener."""
    cp = control_plane
    cp.create_namespace(NS)
    endpoints = {name: cp.start_backend(name, ip) for name, ip in BACKENDS.items()}
    port = free_port(CLIENT_IP)  # the service port == the sidecar's outbound listener port
    cp.apply_loopback_service(NS, HOST, port, endpoints, labels={"app": "backend"})
    cp.apply_sidecar_resource(NS, "client", {"app": "client"}, bind_ip=CLIENT_IP, egress_port=port)
    sidecar = cp.start_sidecar(NS, "client", ip=CLIENT_IP, labels={"app": "client"})
    return cp, sidecar, port


def send(port: int) -> requests.Response:
    """One request through the client sidecar's outbound listener, routed by Host."""
    return http_get(f"http://{CLIENT_IP}:{port}/", headers={"Host": HOST}, timeout=5)


def test_request_through_sidecar_reaches_backends(mesh):
    cp, sidecar, port = mesh
    listener = f"{CLIENT_IP}_{port}"
    wait_for(lambda: listener in sidecar.listeners(), 30, f"listener {listener} active in Envoy")
    seen = set()
    for _ in range(30):
        r = wait_for(lambda: (r := send(port)).status_code == 200 and r, 15, "200 via sidecar")
        seen.add(r.headers["x-backend"])
    assert seen == set(BACKENDS), f"both backends should serve traffic, saw {seen}"
    assert int(sidecar.stats("upstream_rq_2xx")[f"cluster.outbound|{port}||{HOST}.upstream_rq_2xx"]) >= 30


def test_istiod_sees_sidecar_in_sync(mesh):
    cp, sidecar, _ = mesh
    def synced():
        for entry in cp.syncz():
            if entry.get("proxy", "").startswith(sidecar.proxy_id):
                return entry
    entry = wait_for(synced, 30, f"{sidecar.proxy_id} in /debug/syncz")
    for kind in ("cluster", "listener", "route"):
        assert entry.get(f"{kind}_type") == "SYNCED", entry
    dump = cp.istiod_config_dump(sidecar.proxy_id)
    assert dump.get("configs"), "istiod config_dump for the proxy is empty"
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
    ("ftp://example.invalid/x.wasm", {}, "url"),
    ("file:///x.wasm", {"phase": "NOT_A_PHASE"}, "phase"),
    ("file:///x.wasm", {"sha256": "abc"}, "sha256"),
])
def test_invalid_wasmplugin_rejected_by_apiserver(mesh, url, spec, message):
    cp, _, _ = mesh
    r = cp.apply_yaml(wasmplugin("bad", url, **spec), check=False)
    assert r.returncode != 0, f"apiserver accepted an invalid WasmPlugin: {r.stdout}"
    assert "is invalid" in r.stderr and message in r.stderr, r.stderr


def test_wasmplugin_reaches_sidecar_via_ecds(mesh):
    if not WASM.is_file():
        pytest.skip(f"no proxy-wasm module at {WASM} yet (`make wasm` builds it; or set TW_SMOKE_WASM)")
    cp, sidecar, port = mesh
    name = "tw-smoke"
    cp.apply_yaml(wasmplugin(name, f"file://{WASM}"))
    ecds_name = f"{NS}.{name}"
    config = wait_for(lambda: sidecar.ecds_filters().get(ecds_name), 30,
                      f"ECDS filter {ecds_name} in Envoy")
    wasm = config["ecds_filter"]["typed_config"]
    assert wasm["value"]["config"]["vm_config"]["code"]["local"]["filename"] == str(WASM), wasm
    # The outbound listener's HTTP filter chain now discovers the filter through ECDS.
    chain = yaml.safe_dump(sidecar.listeners()[f"{CLIENT_IP}_{port}"])
    assert ecds_name in chain
    # The module loaded into a V8 VM and requests still flow through the filter chain.
    wait_for(lambda: send(port).status_code == 200, 15, "200 with the Wasm filter active")
    created = sidecar.stats("wasm")
    assert any(k.endswith("runtime.v8.active") and int(v) > 0 for k, v in created.items()), created
    cp.delete_yaml(wasmplugin(name, f"file://{WASM}"))
    wait_for(lambda: ecds_name not in yaml.safe_dump(sidecar.listeners()[f"{CLIENT_IP}_{port}"]),
             30, "filter removed from the listener after deleting the WasmPlugin")
