"""wasmplugin/ against a real Istio control plane: etcd + kube-apiserver + istiod, sidecars through
the real pilot-agent with the pip Envoy, the filter delivered over ECDS (see tailweight_mesh.py for
the layout: aggregator replicas with their own sidecars in `tailweight`, client + destination
services in the opted-in namespace `shop`, an intruder in `other`).

The tests share one mesh and run in file order; the later ones change it (stop replicas, swap the
module URL, delete the WasmPlugin) and restore what the next ones need.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import requests
import yaml

import tailweight_mesh as tm
from cluster import ISTIO_CACHE, TW_CACHE, VERSIONS, ControlPlane, Sidecar, http_get
from harness.emulator import BackendSettings, Emulator
from harness.emulator import start as start_emulator
from tailweight_e2e import paths
from tailweight_e2e.procs import wait_for

SERVICES = ["backend"] + [f"svc-{i}" for i in range(8)]  # 9 HTTP destination clusters to shard
# Every opted-in destination: the HTTP services on port 8080 and the gRPC service `ping`.
DESTINATIONS = [(s, tm.PORT) for s in SERVICES] + [(tm.GRPC_SERVICE, tm.GRPC_PORT)]
# Over the manifests' pluginConfig in every install here: per-endpoint pick counters, so the gRPC
# test can compare the filter's picks with what each backend served.
TEST_PLUGIN_CONFIG = {"per_endpoint_metrics": True}
GRPC_BACKENDS = 3
RPCS = 300  # gRPC calls per measured phase
REGISTRY = ISTIO_CACHE / "bin" / f"registry-{VERSIONS['GGCR_VERSION']}"
ORAS = TW_CACHE / "bin" / "oras-v1.3.6"  # as mk/oci.mk installs it
OCI_LAYOUT = tm.REPO / "build" / "oci" / "tailweight-filter"
EMULATOR = paths.RELEASE / "tailweight-emulator"  # the gRPC backends (`make native`)
DOWNSTREAM_CX_TOTAL = r"listener\..*\.downstream_cx_total"
STRIP_ENVOYFILTER = "tailweight-strip-incoming-header"
STRIP_FILTER = "tailweight.strip-incoming-override-header"  # its HTTP filter's name in the listener


@dataclass
class Mesh:
    cp: ControlPlane
    client: Sidecar
    intruder: Sidecar
    replicas: list[tm.Replica]
    backends: dict[str, tuple[str, int]]
    emulator: Emulator
    url: str = ""
    stopped: list[tm.Replica] = field(default_factory=list)

    def install(self, url: str | None = None, plugin_config: dict | None = None) -> None:
        """`kubectl apply -k` of our overlay of wasmplugin/ (module URL, pluginConfig overrides)."""
        self.url = url or self.url
        config = {**TEST_PLUGIN_CONFIG, **(plugin_config or {})}
        overlay = tm.write_overlay(self.cp.dir / "overlay", self.url, DESTINATIONS, config)
        self.cp.apply_kustomization(overlay)

    @property
    def live(self) -> list[tm.Replica]:
        return [r for r in self.replicas if r not in self.stopped]

    def traffic(self, rounds: int = 3, services: list[str] = SERVICES) -> list:
        """`rounds` requests to each service through the client's sidecar; returns the responses."""
        return [tm.send(self.client, s) for _ in range(rounds) for s in services]


@pytest.fixture(scope="module")
def mesh(control_plane) -> Mesh:
    missing = [str(p) for p in (tm.WASM, tm.AGGREGATOR, EMULATOR) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {missing} (make build aggregator-static)")
    cp = control_plane
    for ns in (tm.AGG_NS, tm.CLIENT_NS, tm.OTHER_NS):
        cp.create_namespace(ns)
    backends = {name: cp.start_backend(name, cp.ip(n)) for name, n in tm.BACKENDS.items()}
    tm.apply_services(cp, SERVICES, backends)
    emulator = start_emulator(cp.procs, [BackendSettings(workers=4, base_ms=2, protocol="grpc")] * GRPC_BACKENDS,
                              name="grpc-emulator")
    tm.apply_grpc_service(cp, emulator.ports)
    mesh = Mesh(cp, None, None, [], backends, emulator)  # type: ignore[arg-type]
    mesh.install(url=f"file://{tm.WASM}")
    mesh.replicas = [tm.start_replica(cp, i) for i in range(tm.REPLICAS)]
    # The client (opted in) and an intruder (namespace `other`): real outbound listeners on :8080.
    client_ip, intruder_ip = cp.ip(tm.CLIENT_HOST), cp.ip(tm.INTRUDER_HOST)
    cp.apply_sidecar_resource(tm.CLIENT_NS, "client", {"app": "client"}, bind_ip=client_ip,
                              egress_ports={tm.PORT: "HTTP", tm.GRPC_PORT: "GRPC"},
                              hosts=("./*", f"{tm.AGG_NS}/*"))
    cp.apply_sidecar_resource(tm.OTHER_NS, "intruder", {"app": "intruder"}, bind_ip=intruder_ip,
                              egress_ports={tm.PORT: "HTTP"}, hosts=(f"{tm.AGG_NS}/*",))
    # The client keeps Istio's default stats inclusion (its "wasm" prefix covers the filter's
    # wasmcustom.* metrics), as in a real cluster, plus its listeners' connection counts.
    mesh.client = cp.start_sidecar(tm.CLIENT_NS, "client", ip=client_ip, labels={"app": "client"},
                                   stats_inclusion=(DOWNSTREAM_CX_TOTAL,))
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


@pytest.mark.parametrize("directory", [tm.WASMPLUGIN, tm.WASMPLUGIN / "overlays" / "example",
                                       tm.WASMPLUGIN / "overlays" / "load-stamps"],
                         ids=["base", "overlays/example", "overlays/load-stamps"])
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
        listeners = json.dumps(sc.listeners())
        assert "tailweight~" not in listeners, f"{sc.proxy_id} got a tailweight filter"
        assert STRIP_FILTER not in listeners, f"{sc.proxy_id} got the header removal"


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
# An override header the application sets never steers: the sidecar removes it before the filter
# (wasmplugin/client/envoyfilter-strip-header.yaml). Checked here with the filter healthy, and in
# each state without a working filter further down (invalid pluginConfig, unfetchable module,
# WasmPlugin deleted).


def forge(mesh: Mesh, n: int = 30) -> tuple[str, list[requests.Response]]:
    """`n` requests to `backend` whose application set the override header itself, naming
    backend-a; returns that address and the responses (all 200)."""
    ip, port = mesh.backends["backend-a"]
    target = f"{ip}:{port}"
    responses = [tm.send(mesh.client, "backend", headers={tm.OVERRIDE_HEADER: target}) for _ in range(n)]
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    return target, responses


def assert_not_steered_by(target: str, responses: list[requests.Response]) -> None:
    """The forged header did not decide: the requests spread over the endpoints (least_request or
    the filter: at most ~2/3 of them to any one endpoint), not all to `target`."""
    served = [r.headers["x-backend-address"] for r in responses]
    assert len(set(served)) >= 2 and served.count(target) < len(served), (target, served)


def assert_header_removed(responses: list[requests.Response]) -> None:
    """No backend received an override header: the sidecar removed the forged one and no filter
    wrote one (echo_backend.py echoes what arrived in x-echo-override)."""
    arrived = [r.headers["x-echo-override"] for r in responses if r.headers["x-echo-override"]]
    assert not arrived, f"override headers reached the backends: {arrived}"


def test_forged_override_header_removed_before_the_filter(mesh):
    client = mesh.client
    tailweight = next(n for n in client.ecds_filters() if f"/{tm.CLIENT_NS}.tailweight~" in n)
    for port in (tm.PORT, tm.GRPC_PORT):  # every outbound HTTP listener: the removal comes first
        chain = yaml.safe_dump(client.listeners()[f"{client.ip}_{port}"])
        assert STRIP_FILTER in chain and chain.index(STRIP_FILTER) < chain.index(tailweight), chain
    before = settle(client)
    target, responses = forge(mesh)
    after = settle(client)
    # The filter never saw the application's header (else it counts it as replaced or trusted) ...
    assert delta(after, before, "incoming_header_replaced") == 0, (before, after)
    assert delta(after, before, "incoming_header_trusted") == 0
    # ... and its own picks decided: each steered request went where the filter's header said.
    steered = [r for r in responses if r.headers["x-echo-override"]]
    for r in steered:
        assert r.headers["x-echo-override"].split(",")[0] == r.headers["x-backend-address"], r.headers
    assert delta(after, before, "picks") == delta(after, before, "picks_honoured") == len(steered) >= 20
    # Requests the filter left to least_request (explorations) arrived without any header.
    assert_not_steered_by(target, responses)


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
    # Accepted with --identity=xfcc: the replica's sidecar verified the client's certificate and
    # appended its SPIFFE ID (the last element, the one the aggregator reads).
    principals = {x["xfcc"].rpartition(",")[2].partition("URI=")[2].partition(";")[0] for x in records}
    assert len(principals) == 1 and principals.pop().startswith("spiffe://cluster.local/ns/shop/sa/"), records[-3:]
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


def test_load_stamps_written_by_the_destination_sidecar_only(mesh):
    """wasmplugin/server (match SERVER, role server) in the aggregator's namespace: its sidecars
    stamp every response of their inbound listener; the client's sidecar (its WasmPlugin matches
    CLIENT and does not read stamps) passes the stamp on untouched and stamps nothing itself."""
    docs = [d for d in yaml.safe_load_all(subprocess.run(
        ["kubectl", "kustomize", str(tm.WASMPLUGIN / "server")], check=True, capture_output=True, text=True,
        timeout=60).stdout) if d]
    (plugin,) = docs
    plugin["metadata"]["namespace"] = tm.AGG_NS
    plugin["spec"]["url"] = mesh.url
    manifest = yaml.safe_dump(plugin)

    def stamp() -> str | None:
        """The stamp of one answered request from the client to an aggregator replica, "" if none;
        None if the request failed (a sidecar's listener changing under it)."""
        try:
            r = http_get(f"http://{mesh.client.ip}:{tm.PORT}/metrics", headers={"Host": tm.AGG_HOST}, timeout=5)
        except requests.RequestException:
            return None
        return r.headers.get("x-tailweight-load", "") if r.status_code == 200 else None

    mesh.cp.apply_yaml(manifest)
    try:
        # istiod pushes the plugin to each replica's sidecar on its own: wait until requests spread
        # over the replicas come back stamped, ten in a row.
        wait_for(lambda: all(re.fullmatch(r"1;rif=\d+", stamp() or "") for _ in range(10)), 90,
                 "ten stamped responses in a row from the aggregator replicas' inbound sidecars")
        # The destinations in `shop` have no server plugin: nothing stamps their responses.
        assert all("x-tailweight-load" not in r.headers for r in mesh.traffic(rounds=1))
        written = sum(tm.filter_stats(r.sidecar).get("stamps_written", 0) for r in mesh.live)
        assert written >= 10, written  # the ten stamped answers waited for
        # Istio's inbound listener has direction INBOUND, which suits the role: no warning.
        for replica in mesh.live:
            assert "is the WasmPlugin's `match` mode right?" not in tm.envoy_log(replica.sidecar)
        assert "is the WasmPlugin's `match` mode right?" not in tm.envoy_log(mesh.client)
    finally:
        mesh.cp.delete("wasmplugin", tm.AGG_NS, plugin["metadata"]["name"])
        # The next tests talk to the replicas: wait until every sidecar dropped the plugin and its
        # listeners settled (ten answered, unstamped requests in a row).
        wait_for(lambda: all(stamp() == "" for _ in range(10)), 90, "the replicas' sidecars without the plugin")


def test_invented_reporter_ids_of_one_pod_are_one_principal(mesh):
    """Over real mTLS, a pod that reports under many made-up reporter ids is still one voice: the
    aggregator's principal is the SPIFFE ID its sidecar verified, not the body's `reporter`."""
    client = mesh.client
    mesh.traffic(rounds=2)
    # A cluster of its own, so that what is said there moves no other test's weights.
    cluster = "outbound|8080||made-up.shop.svc.cluster.local"

    def gauges() -> dict[str, float]:
        totals = {"tailweight_principals": 0.0, "tailweight_reporters_live": 0.0}
        for replica in mesh.live:
            text = http_get(f"http://{tm.LOCALHOST}:{replica.app_port}/metrics", timeout=5).text
            for key, _, value in (line.partition(" ") for line in text.splitlines()):
                if key in totals:
                    totals[key] += float(value)
        return totals
    # The client's own filter reports made its service account a principal already.
    before = wait_for(lambda: (g := gauges())["tailweight_principals"] >= 1 and g, 30, "the client's reports")
    headers = {"Host": tm.AGG_HOST, "content-type": "application/json", tm.SHARD_HEADER: cluster}
    liars = [f"{tm.INVENTED_REPORTER}{i}" for i in range(5)]
    for reporter in liars:
        body = {"version": 1, "reporter": reporter, "incarnation": 1, "interval_ms": 1000, "clusters": [
            {"name": cluster, "endpoints": [
                {"address": "10.9.9.9:8080", "requests": 1000, "errors": 1000, "latency_sum_us": 0,
                 "inflight": 0, "latency_ewma_us": 0, "latency_age_ms": 0}]}]}
        with requests.Session() as session:
            session.trust_env = False
            r = session.post(f"http://{client.ip}:{tm.PORT}/v1/report", data=json.dumps(body), headers=headers,
                             timeout=10)
        assert r.status_code == 200, (r.status_code, r.text)
    after = gauges()
    # Five more reporters, no more principals: each replica that took a lie already knew the
    # client's principal (its reports reach every replica that owns one of its clusters), or took
    # all five lies under that one new principal.
    assert after["tailweight_reporters_live"] >= before["tailweight_reporters_live"] + len(liars), (before, after)
    assert after["tailweight_principals"] <= before["tailweight_principals"] + 1, (before, after)
    # What they said goes when they stop saying it (and leaves the later tests' ownership alone).
    wait_for(lambda: all(cluster not in r.clusters() for r in mesh.live), 90, f"{cluster} to expire",
             interval_s=1.0)


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
# gRPC: a Service port named grpc-* (istiod: HTTP/2 upstream) with emulator backends. Here, after
# the replica tests: the ping cluster's reports must not change which clusters they see moving.


def grpc_served(mesh: Mesh) -> list[int]:
    """Calls each gRPC backend received so far (the emulator's own count), by backend index."""
    return [int(n) for n in mesh.emulator.requests_total()]


def grpc_errors(mesh: Mesh) -> list[int]:
    errors = mesh.emulator.metrics().get("emulator_errors_total", {})
    return [int(errors.get(i, 0)) for i in range(GRPC_BACKENDS)]


def grpc_picks(stats: dict[str, int], mesh: Mesh) -> list[int]:
    """The filter's picks per gRPC backend (per_endpoint_metrics: endpoint.<ip>_<port>.picks)."""
    keys = ["endpoint." + a.replace(".", "_").replace(":", "_") + ".picks" for a in mesh.emulator.addresses]
    return [stats.get(k, 0) for k in keys]


def client_connections(client: Sidecar, port: int) -> int:
    """Downstream connections the client's outbound listener on `port` accepted so far."""
    return int(client.stats("downstream_cx_total").get(f"listener.{client.ip}_{port}.downstream_cx_total", 0))


def minus(after: list[int], before: list[int]) -> list[int]:
    return [a - b for a, b in zip(after, before, strict=True)]


def grpc_phase(mesh: Mesh, channel: grpc.Channel) -> tuple[list[grpc.StatusCode], list[int], list[int], dict, dict]:
    """RPCS pings, 4 at a time: their status codes, the calls and the errors each backend counted
    meanwhile, and the filter's counters before and after."""
    before, served, errors = settle(mesh.client), grpc_served(mesh), grpc_errors(mesh)
    codes = tm.grpc_pings(channel, RPCS, streams=4)
    after = settle(mesh.client)
    return codes, minus(grpc_served(mesh), served), minus(grpc_errors(mesh), errors), before, after


def test_grpc_steered_per_rpc_on_one_connection(mesh):
    client = mesh.client
    cluster = tm.cluster_of(tm.GRPC_SERVICE, tm.GRPC_PORT)
    config = next(c["cluster"] for c in client.config_dump(resource="dynamic_active_clusters")["configs"]
                  if c["cluster"]["name"] == cluster)
    # istiod made it an HTTP/2 cluster (the port name), and the EnvoyFilter an override_host one.
    assert "http2_protocol_options" in json.dumps(config.get("typed_extension_protocol_options")), config
    assert "override_host" in json.dumps(config.get("load_balancing_policy")), config
    connections = client_connections(client, tm.GRPC_PORT)
    with tm.grpc_channel(client) as channel:
        warm_up = tm.grpc_pings(channel, 100, streams=4)  # the filter learns the endpoints
        assert set(warm_up) == {grpc.StatusCode.OK}, warm_up
        codes, served, _, before, after = grpc_phase(mesh, channel)
    assert set(codes) == {grpc.StatusCode.OK}, codes
    # All of it (warm-up included) over one HTTP/2 connection from the application.
    assert client_connections(client, tm.GRPC_PORT) - connections == 1
    picks = minus(grpc_picks(after, mesh), grpc_picks(before, mesh))
    left = delta(after, before, "explorations") + delta(after, before, "fallbacks")
    print(f"\n[istio] gRPC {RPCS} calls on one connection: picks per backend {picks}, served {served}, "
          f"{left} left to least_request")
    # Each RPC was decided on its own: the filter picked several endpoints ...
    assert sum(picks) == delta(after, before, "picks") and sum(p >= RPCS // 10 for p in picks) >= 2, picks
    # ... Envoy honoured every pick ...
    assert delta(after, before, "picks_honoured") == sum(picks) and delta(after, before, "picks_not_honoured") == 0
    # ... and the backends' own counts agree: each served its picks plus some of the calls the
    # filter left to least_request, and nothing else.
    assert sum(served) == RPCS and sum(picks) + left == RPCS, (served, picks, left)
    assert all(s >= p for s, p in zip(served, picks, strict=True)), (served, picks)
    assert sum(picks) >= RPCS * 0.8, f"only {sum(picks)} of {RPCS} calls carried a pick"


def test_grpc_failures_counted_and_avoided(mesh):
    """A backend answers every call UNAVAILABLE (trailers-only, as a failing gRPC server does):
    first without retries (a VirtualService), so every failure reaches the caller and the filter's
    on_log; then under Istio's default retry policy, which retries UNAVAILABLE elsewhere. Each phase
    fails a backend the filter has only seen healthy."""
    client = mesh.client
    vs_name = "ping-no-retries"
    no_retries = yaml.safe_dump({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": vs_name, "namespace": tm.CLIENT_NS},
        "spec": {"hosts": [tm.host_of(tm.GRPC_SERVICE)],
                 "http": [{"route": [{"destination": {"host": tm.host_of(tm.GRPC_SERVICE)}}],
                           "retries": {"attempts": 0}}]},
    })
    in_routes = lambda: f"virtual-service/{vs_name}" in json.dumps(  # noqa: E731
        client.config_dump(resource="dynamic_route_configs"))
    try:
        with tm.grpc_channel(client) as channel:
            mesh.cp.apply_yaml(no_retries)
            wait_for(in_routes, 30, f"VirtualService {vs_name} in the client's routes")
            failing = 0
            mesh.emulator.event([failing], "fail")
            codes, calls, failed, before, after = grpc_phase(mesh, channel)
            unavailable = codes.count(grpc.StatusCode.UNAVAILABLE)
            counted = delta(after, before, "failures")
            print(f"\n[istio] gRPC, backend {failing} failing, no retries: calls per backend {calls}, "
                  f"{unavailable} UNAVAILABLE, failures counted {counted}, "
                  f"suspensions {delta(after, before, 'suspensions')}")
            assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes
            # Every failure the backend answered reached the caller and was counted by the filter
            # (it had to see some: the backend was one of its endpoints in good standing) ...
            assert unavailable == failed[failing] == calls[failing] == counted >= 1, (unavailable, failed, counted)
            assert sum(failed) == failed[failing], failed
            # ... and the failing backend got few calls: suspended after two failures in a row, it
            # gets only probes (250 ms apart, backing off) and the odd exploration.
            assert calls[failing] <= RPCS * 0.1, calls

            # Istio's default retries: the caller sees no failure; the filter charges the failed
            # attempt to the endpoint it picked (a pick not honoured), and avoids it as well.
            mesh.cp.delete_yaml(no_retries)
            wait_for(lambda: not in_routes(), 30, f"VirtualService {vs_name} gone from the client's routes")
            mesh.emulator.event([failing], "recover")
            failing = 1
            mesh.emulator.event([failing], "fail")
            codes, attempts, failed, before, after = grpc_phase(mesh, channel)
        print(f"[istio] gRPC, backend {failing} failing, Istio's retries: attempts per backend {attempts}, "
              f"picks not honoured {delta(after, before, 'picks_not_honoured')}, "
              f"failures counted {delta(after, before, 'failures')}")
        assert set(codes) == {grpc.StatusCode.OK}, codes
        assert failed[failing] == attempts[failing] >= 1 and sum(failed) == failed[failing], (failed, attempts)
        assert attempts[failing] <= RPCS * 0.1, attempts
        # A pick Envoy tried and retried elsewhere is not honoured (and charged to the endpoint).
        assert delta(after, before, "picks_not_honoured") >= 1
    finally:
        mesh.emulator.event([0, 1], "recover")
        mesh.cp.delete_yaml(no_retries)


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
        # A disabled filter passes requests untouched: the application's header would steer, but
        # the sidecar removed it before.
        target, forged = forge(mesh)
        assert_header_removed(forged)
        assert_not_steered_by(target, forged)
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
        # No filter to replace the application's header: the sidecar removed it.
        target, forged = forge(mesh)
        assert_header_removed(forged)
        assert_not_steered_by(target, forged)
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
    # The override_host clusters stay (the EnvoyFilter is separate); the application's header
    # does not reach them.
    target, forged = forge(mesh)
    assert_header_removed(forged)
    assert_not_steered_by(target, forged)


def test_without_the_removal_a_forged_header_would_steer(mesh):
    """What the removal prevents (and proof that forge() would notice): with the WasmPlugin gone
    and the removal deleted too, Envoy follows the application's header for every request."""
    client = mesh.client
    listener = f"{client.ip}_{tm.PORT}"
    assert "tailweight~" not in yaml.safe_dump(client.listeners()[listener]), "runs after the WasmPlugin's deletion"
    mesh.cp.delete("envoyfilter", tm.CLIENT_NS, STRIP_ENVOYFILTER)
    wait_for(lambda: STRIP_FILTER not in yaml.safe_dump(client.listeners()[listener]), 30,
             "the removal gone from the outbound listener")
    target, forged = forge(mesh)
    assert [r.headers["x-backend-address"] for r in forged] == [target] * len(forged)
    assert {r.headers["x-echo-override"] for r in forged} == {target}
