"""wasmplugin/ against a real Istio control plane: etcd + kube-apiserver + istiod, sidecars through
the real pilot-agent with the pip Envoy, the filter delivered over ECDS (see tailweight_mesh.py for
the layout: aggregator replicas with their own sidecars in `tailweight`, client + destination
services in the opted-in namespace `shop`, an intruder in `other`).

The tests share one mesh and run in file order; the later ones change it (stop replicas, swap the
module URL, delete the WasmPlugin) and restore what the next ones need.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
import yaml

import tailweight_mesh as tm
from cluster import ISTIO_CACHE, TW_CACHE, VERSIONS, ControlPlane, Sidecar, http_get
from tailweight_e2e.procs import wait_for

SERVICES = ["backend"] + [f"svc-{i}" for i in range(8)]  # 9 destination clusters to shard
REGISTRY = ISTIO_CACHE / "bin" / f"registry-{VERSIONS['GGCR_VERSION']}"
ORAS = TW_CACHE / "bin" / "oras-v1.3.6"  # as mk/oci.mk installs it
OCI_LAYOUT = tm.REPO / "build" / "oci" / "tailweight-filter"


@dataclass
class Mesh:
    cp: ControlPlane
    client: Sidecar
    intruder: Sidecar
    replicas: list[tm.Replica]
    backends: dict[str, tuple[str, int]]
    url: str = ""
    stopped: list[tm.Replica] = field(default_factory=list)

    def install(self, url: str | None = None, plugin_config: dict | None = None) -> None:
        """`kubectl apply -k` of our overlay of wasmplugin/ (module URL, pluginConfig overrides)."""
        self.url = url or self.url
        overlay = tm.write_overlay(self.cp.dir / "overlay", self.url, SERVICES, plugin_config)
        self.cp.apply_kustomization(overlay)

    @property
    def live(self) -> list[tm.Replica]:
        return [r for r in self.replicas if r not in self.stopped]

    def traffic(self, rounds: int = 3, services: list[str] = SERVICES) -> list:
        """`rounds` requests to each service through the client's sidecar; returns the responses."""
        return [tm.send(self.client, s) for _ in range(rounds) for s in services]


@pytest.fixture(scope="module")
def mesh(control_plane) -> Mesh:
    missing = [str(p) for p in (tm.WASM, tm.AGGREGATOR) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {missing} (make wasm aggregator-static)")
    cp = control_plane
    for ns in (tm.AGG_NS, tm.CLIENT_NS, tm.OTHER_NS):
        cp.create_namespace(ns)
    backends = {name: cp.start_backend(name, cp.ip(n)) for name, n in tm.BACKENDS.items()}
    tm.apply_services(cp, SERVICES, backends)
    mesh = Mesh(cp, None, None, [], backends)  # type: ignore[arg-type]
    mesh.install(url=f"file://{tm.WASM}")
    mesh.replicas = [tm.start_replica(cp, i) for i in range(tm.REPLICAS)]
    # The client (opted in) and an intruder (namespace `other`): real outbound listeners on :8080.
    client_ip, intruder_ip = cp.ip(tm.CLIENT_HOST), cp.ip(tm.INTRUDER_HOST)
    cp.apply_sidecar_resource(tm.CLIENT_NS, "client", {"app": "client"}, bind_ip=client_ip,
                              egress_port=tm.PORT, hosts=("./*", f"{tm.AGG_NS}/*"))
    cp.apply_sidecar_resource(tm.OTHER_NS, "intruder", {"app": "intruder"}, bind_ip=intruder_ip,
                              egress_port=tm.PORT, hosts=(f"{tm.AGG_NS}/*",))
    # The client keeps Istio's default stats inclusion (its "wasm" prefix covers the filter's
    # wasmcustom.* metrics), as in a real cluster.
    mesh.client = cp.start_sidecar(tm.CLIENT_NS, "client", ip=client_ip, labels={"app": "client"},
                                   stats_inclusion=())
    mesh.intruder = cp.start_sidecar(tm.OTHER_NS, "intruder", ip=intruder_ip, labels={"app": "intruder"})
    for sc in (mesh.client, mesh.intruder):
        wait_for(lambda sc=sc: f"{sc.ip}_{tm.PORT}" in sc.listeners(), 30, f"{sc.proxy_id} outbound listener")
    wait_for(lambda: tm.send(mesh.client, "backend").ok, 30, "a first 200 through the client's sidecar")
    return mesh


# Per-request counters; the report counters and gauges move with every tick.
REQUEST_COUNTERS = ("picks", "picks_honoured", "picks_not_honoured", "explorations", "fallbacks", "untracked")


def settle(sidecar: Sidecar) -> dict[str, int]:
    """The filter's counters once the per-request ones read the same twice, 0.3 s apart (on_log,
    which accounts a request, runs after the response went out)."""
    def stable():
        first = tm.filter_stats(sidecar)
        time.sleep(0.3)
        second = tm.filter_stats(sidecar)
        same = all(first.get(k) == second.get(k) for k in REQUEST_COUNTERS)
        return second if same else None
    return wait_for(stable, 15, "filter counters to settle")


def delta(after: dict[str, int], before: dict[str, int], key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


# ---------------------------------------------------------------------------------------------------
# The manifests as shipped: the apiserver (with Istio's CRDs) accepts every object


@pytest.mark.parametrize("directory", [tm.WASMPLUGIN, tm.WASMPLUGIN / "overlays" / "example"],
                         ids=["base", "overlays/example"])
def test_manifests_accepted_by_the_apiserver(mesh, directory):
    r = mesh.cp.apply_kustomization(directory, check=False, dry_run=True)
    assert r.returncode == 0, r.stderr
    for kind in ("wasmplugin", "envoyfilter", "destinationrule", "authorizationpolicy",
                 "deployment", "poddisruptionbudget", "service"):
        assert f"{kind}." in r.stdout or f"{kind}/" in r.stdout, (kind, r.stdout)


# ---------------------------------------------------------------------------------------------------
# (a) the filter is in the client's sidecar


def test_filter_loaded_via_ecds(mesh):
    client = mesh.client
    ecds = wait_for(lambda: {k: v for k, v in client.ecds_filters().items()
                             if f"/{tm.CLIENT_NS}.tailweight~" in k}, 30, "tailweight ECDS filter")
    (name, config), = ecds.items()
    wasm = config["ecds_filter"]["typed_config"]
    vm = wasm["config"]["vm_config"]
    assert vm["runtime"] == "envoy.wasm.runtime.v8"
    assert vm["code"]["local"]["filename"] == str(tm.WASM), vm["code"]
    assert set(vm["environment_variables"]["host_env_keys"]) == {"POD_NAME", "POD_NAMESPACE"}, vm
    assert wasm["config"].get("fail_open") is True or wasm["config"].get("failure_policy") == "FAIL_OPEN", wasm
    plugin_config = json.loads(wasm["config"]["configuration"]["value"])
    assert plugin_config["aggregator"]["cluster"] == tm.AGG_CLUSTER, plugin_config
    # In the outbound listener's HTTP filter chain, before the router (match: mode CLIENT).
    listener = yaml.safe_dump(client.listeners()[f"{client.ip}_{tm.PORT}"])
    assert listener.index(name) < listener.index("envoy.filters.http.router"), "filter after the router"
    # Loaded in V8 and counting: its metrics are in /stats.
    tm.send(client, "backend")
    stats = wait_for(lambda: (s := tm.filter_stats(client)).get("picks", 0) + s.get("fallbacks", 0) > 0 and s,
                     15, "wasmcustom.tailweight.* in /stats")
    assert {"picks", "picks_honoured", "reports_sent", "config_errors"} <= stats.keys(), stats
    assert stats["config_errors"] == 0
    # Only the opted-in namespace runs it: not the aggregator's sidecars, not namespace `other`.
    for sc in [mesh.intruder] + [r.sidecar for r in mesh.replicas]:
        assert "tailweight~" not in json.dumps(sc.listeners()), f"{sc.proxy_id} got a tailweight filter"


# ---------------------------------------------------------------------------------------------------
# (b) Envoy sends each request to the endpoint the filter picked


def test_requests_steered_to_the_picked_endpoint(mesh):
    client = mesh.client
    clusters = {c["cluster"]["name"]: c["cluster"]
                for c in client.config_dump(resource="dynamic_active_clusters")["configs"]}
    lb = json.dumps(clusters[tm.cluster_of("backend")].get("load_balancing_policy"))
    assert "envoy.load_balancing_policies.override_host" in lb and tm.OVERRIDE_HEADER in lb, lb
    assert "least_request" in lb, f"fallback should be least_request: {lb}"
    # The aggregator's cluster keeps its consistent hash (the EnvoyFilter patches only opted-in services).
    assert clusters[tm.AGG_CLUSTER]["lb_policy"] == "MAGLEV", clusters[tm.AGG_CLUSTER]

    mesh.traffic(rounds=30, services=["backend"])  # warm-up: the filter learns the endpoints
    before = settle(client)
    responses = mesh.traffic(rounds=60, services=["backend"])
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    steered = [r for r in responses if r.headers["x-echo-override"]]
    addresses = {f"{ip}:{port}" for ip, port in mesh.backends.values()}
    for r in steered:
        first, *retries = r.headers["x-echo-override"].split(",")
        assert {first, *retries} <= addresses, r.headers
        assert first == r.headers["x-backend-address"], f"picked {first}, served by {r.headers['x-backend-address']}"
    after = settle(client)
    # Every pick arrived with its request and was honoured; the rest were the filter's explorations
    # (left to least_request on purpose; more while a cluster is young, ~1% later).
    picks = delta(after, before, "picks")
    assert picks == len(steered), (picks, len(steered))
    assert delta(after, before, "explorations") + delta(after, before, "fallbacks") == 60 - picks
    assert delta(after, before, "picks_honoured") == picks and delta(after, before, "picks_not_honoured") == 0
    assert picks >= 40, f"only {picks} of 60 requests carried a pick"


# ---------------------------------------------------------------------------------------------------
# (c) reports reach the aggregator through the mesh; weights come back


def test_reports_reach_aggregator_and_weights_come_back(mesh):
    client = mesh.client
    before = settle(client)
    mesh.traffic(rounds=3)
    backend = tm.cluster_of("backend")

    def owner_view():
        for r in mesh.live:
            view = next((c for c in r.weights()["clusters"] if c["name"] == backend), None)
            if view and len(view["endpoints"]) == len(mesh.backends):
                return r, view
        return None
    owner, view = wait_for(owner_view, 30, f"the aggregator's view of {backend}")
    assert {e["address"] for e in view["endpoints"]} == {f"{ip}:{p}" for ip, p in mesh.backends.values()}
    assert all(e["weight"] > 0 for e in view["endpoints"]), view
    # What the mesh delivered: one report per destination cluster, the shard header naming it, the
    # reporter id from the pod (vmConfig.env POD_NAME/POD_NAMESPACE from the proxy's environment).
    records = [x for x in owner.records() if x["clusters"] == [backend]]
    assert records, owner.records()[-5:]
    assert {x["reporter"] for x in records} == {"client.shop"}, records[-3:]
    assert all(x["shard"] == backend and x["status"] == 200 and x["path"] == "/v1/report" for x in records)
    # The replies came back and were applied (reports go out for clusters with traffic, each
    # report interval).
    def answered():
        s = tm.filter_stats(client)
        grew = delta(s, before, "reports_ok") > 0 and delta(s, before, "views_applied") > 0
        return s if grew else None
    after = wait_for(answered, 15, "reports_ok and views_applied to grow")
    assert after["reports_failed"] <= after["reports_ok"] // 10, after
    # Over Istio mTLS into the owner's sidecar, whose RBAC filter let them through.
    stats = owner.sidecar.stats()
    inbound = f"listener.{owner.ip}_{tm.PORT}."
    assert sum(int(v) for k, v in stats.items() if k.startswith(inbound) and k.endswith("ssl.handshake")) > 0
    assert sum(int(v) for k, v in stats.items() if k.endswith("rbac.allowed")) > 0


def test_authorization_policy_admits_only_opted_in_namespaces(mesh):
    replica = mesh.live[0]
    # The policy reached the aggregator's sidecar as an RBAC filter on its inbound listener.
    inbound = yaml.safe_dump(replica.sidecar.listeners()[f"{replica.ip}_{tm.PORT}"])
    assert "envoy.filters.http.rbac" in inbound and "tailweight-aggregator" in inbound
    headers = {"Host": tm.AGG_HOST, "content-type": "application/json"}

    def post(sidecar_ip: str):
        return _post(f"http://{sidecar_ip}:{tm.PORT}/v1/report", headers)
    # From the opted-in namespace (mTLS identity ns/shop): through RBAC to the app, which refuses
    # the empty report with its own one-line 400.
    ok = post(mesh.client.ip)
    assert ok.status_code == 400 and "RBAC" not in ok.text, (ok.status_code, ok.text)
    # From namespace `other`: an mTLS identity, but not an opted-in one.
    denied = post(mesh.intruder.ip)
    assert denied.status_code == 403 and "RBAC: access denied" in denied.text, (denied.status_code, denied.text)
    # Plaintext straight to the replica's inbound listener: no identity, no reports ...
    plain = _post(f"http://{replica.ip}:{tm.PORT}/v1/report", headers)
    assert plain.status_code == 403, (plain.status_code, plain.text)
    # ... but metrics stay open for Prometheus.
    metrics = http_get(f"http://{replica.ip}:{tm.PORT}/metrics")
    assert metrics.status_code == 200 and "tailweight_reports_accepted_total" in metrics.text


def _post(url: str, headers: dict[str, str]) -> requests.Response:
    with requests.Session() as s:
        s.trust_env = False
        return s.post(url, data=b"{}", headers=headers, timeout=10)


# ---------------------------------------------------------------------------------------------------
# (c) two replicas: each destination cluster's reports land on one replica; failover


def owners(mesh: Mesh) -> dict[str, list[int]]:
    """cluster -> the replicas holding it (from each live replica's /v1/weights)."""
    out: dict[str, list[int]] = {}
    for r in mesh.live:
        for name in r.clusters():
            out.setdefault(name, []).append(r.index)
    return out


def wait_all_owned(mesh: Mesh, what: str) -> dict[str, list[int]]:
    wanted = {tm.cluster_of(s) for s in SERVICES}

    def complete():
        mesh.traffic(rounds=1)
        o = owners(mesh)
        return o if wanted <= o.keys() else None
    return wait_for(complete, 40, what, interval_s=0.5)


def test_each_cluster_reports_to_exactly_one_replica(mesh):
    o = wait_all_owned(mesh, "every destination cluster at some replica")
    # Several reports per cluster later, still one replica each.
    for _ in range(3):
        mesh.traffic(rounds=1)
        time.sleep(1)
    o = owners(mesh)
    split = {c: rs for c, rs in o.items() if len(rs) != 1}
    assert not split, f"clusters reported to more than one replica: {split}"
    for r in mesh.live:  # the replica's own record of what it received agrees
        received = {c for x in r.records() for c in x["clusters"]}
        assert received == {c for c, rs in o.items() if rs == [r.index]}, (r.index, received)


def test_replicas_share_the_clusters(mesh):
    o = wait_all_owned(mesh, "every destination cluster at some replica")
    per_replica = {r.index: sorted(c for c, rs in o.items() if r.index in rs) for r in mesh.live}
    # 9 clusters on a 2-replica maglev table: all on one replica has probability 2^-8 if hashed.
    assert all(per_replica.values()), f"one replica owns every cluster: {per_replica}"


def test_stopped_replica_clusters_move_to_the_other(mesh):
    o = wait_all_owned(mesh, "every destination cluster at some replica")
    # Stop the replica that owns most clusters (with the filter as it is: all of them).
    counts = {r.index: sum(1 for rs in o.values() if r.index in rs) for r in mesh.live}
    gone = max(mesh.live, key=lambda r: counts[r.index])
    survivor = next(r for r in mesh.live if r is not gone)
    moved = {c for c, rs in o.items() if gone.index in rs}
    before = settle(mesh.client)
    t0 = time.monotonic()
    tm.stop_replica(mesh.cp, gone)
    mesh.stopped.append(gone)

    def relearned():
        responses = mesh.traffic(rounds=1)
        assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
        return moved <= survivor.clusters()
    wait_for(relearned, 40, f"clusters of replica {gone.index} at replica {survivor.index}", interval_s=0.5)
    print(f"\n[istio] {len(moved)} clusters moved to replica {survivor.index} "
          f"{time.monotonic() - t0:.1f} s after replica {gone.index} stopped")
    received = {c for x in survivor.records() if x["status"] == 200 for c in x["clusters"]}
    assert moved <= received
    after = settle(mesh.client)
    assert delta(after, before, "reports_ok") > 0


# ---------------------------------------------------------------------------------------------------
# (d) the apiserver refuses an invalid WasmPlugin with a clear message


def our_wasmplugin() -> dict:
    built = subprocess.run(["kubectl", "kustomize", str(tm.WASMPLUGIN)], check=True,
                           capture_output=True, text=True).stdout
    return next(d for d in yaml.safe_load_all(built) if d["kind"] == "WasmPlugin")


@pytest.mark.parametrize("mutate,message", [
    (lambda s: s.update(failStrategy="FAIL_OPENED"), 'spec.failStrategy: Unsupported value: "FAIL_OPENED"'),
    (lambda s: s["match"][0].update(mode="OUTBOUND"), 'spec.match[0].mode: Unsupported value: "OUTBOUND"'),
    (lambda s: s["vmConfig"]["env"][0].update(value="client"), "value may only be set when valueFrom is INLINE"),
    (lambda s: s.update(url="ftp://example.invalid/f.wasm"), "url must have schema one of [http, https, file, oci]"),
], ids=["failStrategy", "match-mode", "env-host-with-value", "url-scheme"])
def test_invalid_wasmplugin_rejected_by_apiserver(mesh, mutate, message):
    doc = our_wasmplugin()
    doc["metadata"].update(name="tailweight-bad", namespace=tm.CLIENT_NS)
    mutate(doc["spec"])
    r = mesh.cp.apply_yaml(yaml.safe_dump(doc), check=False)
    assert r.returncode != 0, f"apiserver accepted an invalid WasmPlugin: {r.stdout}"
    assert 'WasmPlugin "tailweight-bad" is invalid' in r.stderr and message in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------
# Bad input: invalid pluginConfig -> one clear log line, traffic passes untouched (FAIL_OPEN)


def test_invalid_plugin_config_passes_traffic(mesh):
    client = mesh.client
    try:
        mesh.install(plugin_config={"explore_ratio": 2})
        line = "invalid plugin configuration: field `explore_ratio`: expected a number in 0..=0.5, got 2"
        wait_for(lambda: line in tm.envoy_log(client), 30, "the filter's configuration error in the log")
        before = settle(client)
        assert before["config_errors"] > 0
        responses = mesh.traffic(rounds=20, services=["backend"])
        assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
        assert not any(r.headers["x-echo-override"] for r in responses), "a disabled filter steered"
        after = settle(client)
        assert delta(after, before, "picks") == 0
    finally:
        mesh.install(plugin_config={})
    # The valid configuration steers again.
    wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering after the fix")


# ---------------------------------------------------------------------------------------------------
# The module from http:// and oci:// (pilot-agent downloads it; Envoy loads the local copy)


def test_module_from_http_and_oci_urls(mesh):
    cp, client = mesh.cp, mesh.client
    layout_index = OCI_LAYOUT / "index.json"
    if not (REGISTRY.is_file() and ORAS.is_file() and layout_index.is_file()):
        pytest.skip(f"need {REGISTRY}, {ORAS} and {OCI_LAYOUT} (make istio-bins oci-wasm)")
    try:
        # http:// — a plain file server, as for a module published on a web server.
        base = tm.serve_directory(cp, tm.WASM.parent)
        mesh.install(url=f"{base}/{tm.WASM.name}")
        module = wait_for(lambda: (f := tm.active_module(client)) and f != str(tm.WASM) and f, 60,
                          "the http:// module in Envoy")
        assert Path(module).read_bytes() == tm.WASM.read_bytes()
        wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering (http://)")

        # oci:// — the image `make oci-wasm` built, pushed to a registry with oras.
        tag = json.loads(layout_index.read_text())["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        registry = tm.start_registry(cp, REGISTRY)
        ref = f"{registry}/tailweight/tailweight-filter:{tag}"
        subprocess.run([str(ORAS), "cp", "--no-tty", "--to-plain-http", "--from-oci-layout",
                        f"{OCI_LAYOUT}:{tag}", ref], check=True, capture_output=True, timeout=60)
        mesh.install(url=f"oci://{ref}")
        module = wait_for(lambda: (f := tm.active_module(client)) and f not in (str(tm.WASM), module) and f,
                          60, "the oci:// module in Envoy")
        assert Path(module).read_bytes() == tm.WASM.read_bytes()
        wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering (oci://)")
    finally:
        mesh.install(url=f"file://{tm.WASM}")
    wait_for(lambda: tm.active_module(client) == str(tm.WASM), 30, "back to the file:// module")


def test_unfetchable_module_fails_open(mesh):
    """failStrategy FAIL_OPEN: a module pilot-agent cannot download becomes an allow-all filter."""
    cp, client = mesh.cp, mesh.client
    try:
        base = tm.serve_directory(cp, tm.WASM.parent)
        mesh.install(url=f"{base}/no-such-module.wasm")

        def replaced():
            config = next((c for n, c in client.ecds_filters().items() if f"/{tm.CLIENT_NS}.tailweight~" in n), None)
            typed = config and config["ecds_filter"]["typed_config"]
            return typed if typed and typed["@type"].endswith("rbac.v3.RBAC") else None
        typed = wait_for(replaced, 60, "pilot-agent's allow-all stand-in for the missing module")
        assert typed.get("rules_stat_prefix") == "wasm-default-allow", typed
        responses = mesh.traffic(rounds=5)
        assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
        assert not any(r.headers["x-echo-override"] for r in responses)
        assert "applying allow RBAC filter" in tm.envoy_log(client)
    finally:
        mesh.install(url=f"file://{tm.WASM}")
    wait_for(lambda: tm.active_module(client) == str(tm.WASM), 30, "back to the file:// module")


# ---------------------------------------------------------------------------------------------------
# Bad input: the aggregator unreachable -> local-only, no request fails


def test_aggregator_unreachable_sidecars_decide_locally(mesh):
    client = mesh.client
    for r in mesh.live:  # crash every replica (processes gone, endpoints still listed)
        for proc in (r.app, r.relay):
            proc.kill()
        mesh.stopped.append(r)
    before = settle(client)
    responses = mesh.traffic(rounds=10)
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    wait_for(lambda: settle(client)["reports_failed"] > before["reports_failed"], 30, "failed reports")
    during = settle(client)
    responses = mesh.traffic(rounds=20, services=["backend"])
    assert all(r.status_code == 200 for r in responses)
    steered = [r for r in responses if r.headers["x-echo-override"]]
    assert all(r.headers["x-echo-override"].split(",")[0] == r.headers["x-backend-address"] for r in steered)
    after = settle(client)
    # Still steering, from local state only.
    assert delta(after, during, "picks") == len(steered) >= 10
    assert delta(after, during, "picks_not_honoured") == 0
    assert "local-only decisions meanwhile" in tm.envoy_log(client)


# ---------------------------------------------------------------------------------------------------
# (e) deleting the WasmPlugin removes the filter; traffic keeps flowing


def test_deleting_the_wasmplugin_removes_the_filter(mesh):
    client = mesh.client
    assert tm.active_module(client)
    mesh.cp.delete("wasmplugin", tm.CLIENT_NS, "tailweight")
    listener = f"{client.ip}_{tm.PORT}"
    wait_for(lambda: "tailweight~" not in yaml.safe_dump(client.listeners()[listener]), 30,
             "filter gone from the outbound listener")
    responses = mesh.traffic(rounds=5)
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    assert not any(r.headers["x-echo-override"] for r in responses), "no filter, yet a pick arrived"
