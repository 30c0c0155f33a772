"""charts/tailweight against a real Istio control plane: etcd + kube-apiserver + istiod, sidecars
through the real pilot-agent with the pip Envoy, the filter delivered over ECDS (see
tailweight_mesh.py for the layout: aggregator replicas with their own sidecars in `tailweight`,
client + destination services in the opted-in namespace `shop`, an intruder in `other`).

The chart is packaged (`helm package`), pushed to a loopback OCI registry (`helm push`) and
installed from there (`helm upgrade --install oci://...`), as the docs tell users to. The tests share
one mesh and run in file order; the later ones change it (stop replicas, swap the module URL,
delete the WasmPlugin) and restore what the next ones need; the last one uninstalls the release.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import requests
import yaml

import tailweight_mesh as tm
from cluster import ControlPlane
from harness.emulator import BackendSettings, Emulator
from harness.emulator import start as start_emulator
from helm import template
from loopback import child_pids, http_get
from sidecars import Sidecar
from tailweight_e2e import paths
from tailweight_e2e.procs import wait_for
from versions import HELM, ISTIOCTL, MONITORING_CRDS, REGISTRY, TW_CACHE

SERVICES = ["backend"] + [f"svc-{i}" for i in range(8)]  # 9 HTTP destination clusters to shard
# Every opted-in destination: the HTTP services on port 8080 and the gRPC service `ping`.
DESTINATIONS = [(s, tm.PORT) for s in SERVICES] + [(tm.GRPC_SERVICE, tm.GRPC_PORT)]
# A Service that exists from the start but is opted in later by `helm upgrade`.
LATE_SERVICE = "late"
# Over the chart's filter settings in every install here: per-endpoint pick counters, so the tests
# can compare the filter's picks with what each backend served.
TEST_FILTER = {"perEndpointMetrics": True}
GRPC_BACKENDS = 3
RPCS = 300  # gRPC calls per measured phase
ORAS = TW_CACHE / "bin" / "oras-v1.3.6"  # as mk/oci.mk installs it
OCI_LAYOUT = tm.REPO / "build" / "oci" / "tailweight-filter"
EMULATOR = paths.RELEASE / "tailweight-emulator"  # the gRPC backends (`make native`)
DOWNSTREAM_CX_TOTAL = r"listener\..*\.downstream_cx_total"
STRIP_ENVOYFILTER = f"{tm.RELEASE}-strip-incoming-header"
STRIP_FILTER = "tailweight.strip-incoming-override-header"  # its HTTP filter's name in the listener
DOCS = tm.REPO / "docs" / "istio.md"
CHART_VERSION = yaml.safe_load((tm.CHART / "Chart.yaml").read_text())["version"]


@dataclass
class Mesh:
    cp: ControlPlane
    client: Sidecar
    intruder: Sidecar
    replicas: list[tm.Replica]
    backends: dict[str, tuple[str, int]]
    emulator: Emulator
    registry: str  # host:port of the loopback OCI registry (the chart, the oci:// module)
    chart: str  # oci://<registry>/charts/tailweight, as `helm push` published it
    url: str = ""
    destinations: list[tuple[str, int]] = field(default_factory=lambda: list(DESTINATIONS))
    extra_services: list[dict] = field(default_factory=list)  # more `services` entries, as written
    monitoring: dict = field(default_factory=dict)  # the `monitoring` values, once a test turned them on
    stopped: list[tm.Replica] = field(default_factory=list)

    def values(self, filter_settings: dict | None = None, **extra) -> dict:
        values = tm.chart_values(self.url, self.destinations, {**TEST_FILTER, **(filter_settings or {})}, **extra)
        values["services"] += self.extra_services
        if self.monitoring:
            values["monitoring"] = self.monitoring
        return values

    def install(self, url: str | None = None, filter_settings: dict | None = None, **extra) -> None:
        """`helm install` (the first time: docs/getting-started.md's command) or `helm upgrade` of
        the chart from the OCI registry, with our values (module URL, filter settings, any other
        top-level values)."""
        self.url = url or self.url
        upgrade = bool(self.cp.helm.run("list", "-n", tm.AGG_NS, "-q", "--all").stdout.strip())
        self.cp.helm.install(tm.RELEASE, self.chart, tm.AGG_NS, self.values(filter_settings, **extra),
                             version=CHART_VERSION, upgrade=upgrade)

    @property
    def live(self) -> list[tm.Replica]:
        return [r for r in self.replicas if r not in self.stopped]

    @property
    def sidecars(self) -> list[Sidecar]:
        return [self.client, self.intruder] + [r.sidecar for r in self.live]

    def traffic(self, rounds: int = 3, services: list[str] = SERVICES) -> list:
        """`rounds` requests to each service through the client's sidecar; returns the responses."""
        return [tm.send(self.client, s) for _ in range(rounds) for s in services]


@pytest.fixture(scope="module")
def mesh(control_plane) -> Mesh:
    missing = [str(p) for p in (tm.WASM, tm.AGGREGATOR, EMULATOR, HELM, REGISTRY) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {missing} (make build aggregator-static istio-bins)")
    cp = control_plane
    for ns in (tm.CLIENT_NS, tm.OTHER_NS):  # the applications'; the release's comes with the install
        cp.create_namespace(ns)
    backends = {name: cp.start_backend(name, cp.ip(n)) for name, n in tm.BACKENDS.items()}
    tm.apply_services(cp, SERVICES + [LATE_SERVICE], backends)
    emulator = start_emulator(cp.procs, [BackendSettings(workers=4, base_ms=2, protocol="grpc")] * GRPC_BACKENDS,
                              name="grpc-emulator")
    tm.apply_grpc_service(cp, emulator.ports)
    # The chart as released: packaged, pushed to an OCI registry, installed from there.
    registry = tm.start_registry(cp, REGISTRY)
    chart = cp.helm.push(cp.helm.package(tm.CHART, cp.dir / "charts"), registry)
    mesh = Mesh(cp, None, None, [], backends, emulator, registry, chart)  # type: ignore[arg-type]
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
    # The client's connections to the aggregator leave from its own address, as a pod's do.
    tm.bind_outbound_to_pod_ip(cp, tm.CLIENT_NS, "client-source-address", {"app": "client"}, client_ip)
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
# The chart's manifests: the apiserver (with Istio's CRDs) accepts every object of every values
# file the chart ships for CI, and the release installed from the OCI registry is the chart's.

CI_VALUES = sorted((tm.CHART / "ci").glob("*.yaml"))


def dry_run_strict(cp: ControlPlane, manifests: str) -> subprocess.CompletedProcess:
    """The apiserver's verdict on `manifests` without applying them: server-side dry run with
    strict field validation (an unknown field is an error, not silently pruned)."""
    return cp.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict",
                      "-f", "-", input=manifests, check=False)


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_chart_manifests_accepted_by_the_apiserver(mesh, values):
    manifests = template(tm.CHART, files=(values,)).stdout
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    # The monitors need the Prometheus Operator's CRDs (test_monitors_validated_by_the_crd_schema).
    manifests = yaml.safe_dump_all([d for d in docs if d["apiVersion"] != "monitoring.coreos.com/v1"])
    namespaces = {d["metadata"]["namespace"] for d in docs}
    for ns in namespaces:
        mesh.cp.create_namespace(ns)
    r = dry_run_strict(mesh.cp, manifests)
    assert r.returncode == 0, r.stderr
    native = yaml.safe_load(values.read_text()).get("module", {}).get("kind") == "native"
    kinds = ("envoyfilter", "destinationrule", "authorizationpolicy", "peerauthentication", "deployment",
             "poddisruptionbudget", "service") + (() if native else ("wasmplugin",))
    for kind in kinds:
        assert f"{kind}." in r.stdout or f"{kind}/" in r.stdout, (kind, r.stdout)


def test_release_installed_from_the_oci_registry(mesh):
    """`helm push` published the chart archive `helm package` made; the release came from there."""
    (release,) = json.loads(mesh.cp.helm.run("list", "-n", tm.AGG_NS, "-o", "json").stdout)
    assert (release["name"], release["status"], release["chart"]) == (
        tm.RELEASE, "deployed", f"tailweight-{CHART_VERSION}"), release
    shown = mesh.cp.helm.run("show", "chart", mesh.chart, "--version", CHART_VERSION, "--plain-http").stdout
    assert yaml.safe_load(shown)["version"] == CHART_VERSION
    kinds = {(d["kind"], d["metadata"].get("namespace")) for d in mesh.cp.helm.manifest(tm.RELEASE, tm.AGG_NS)}
    assert {("WasmPlugin", tm.CLIENT_NS), ("EnvoyFilter", tm.CLIENT_NS), ("PeerAuthentication", tm.AGG_NS),
            ("AuthorizationPolicy", tm.AGG_NS), ("DestinationRule", tm.AGG_NS)} <= kinds, kinds


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
    # What the docs' prerequisite check reads (`pilot-agent request GET server_info`): the proxy has
    # the override_host load balancer and the header_mutation filter.
    info = client.admin("/server_info").text
    assert '"envoy.load_balancing_policies.override_host"' in info and '"envoy.filters.http.header_mutation"' in info
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

    assert_steered(mesh, "backend")


def endpoint_picks(stats: dict[str, int], addresses: list[str]) -> list[int]:
    """The filter's picks per endpoint, of every cluster (per_endpoint_metrics:
    endpoint.<ip>:<port>.<cluster>.picks)."""
    return [sum(v for k, v in stats.items() if k.startswith(f"endpoint.{a}.") and k.endswith(".picks"))
            for a in addresses]


def assert_steered(mesh: Mesh, service: str, count: int = 60) -> None:
    """After a warm-up, `count` requests to `service` (alone: the per-endpoint counters are shared by
    every cluster): each one the filter picked for was served by the endpoint it picked, Envoy
    honoured every pick, and each endpoint's pick counter grew by exactly the picked requests it
    served; the rest were the filter's explorations."""
    client = mesh.client
    mesh.traffic(rounds=30, services=[service])  # warm-up: the filter learns the endpoints
    before = settle(client)
    responses = mesh.traffic(rounds=count, services=[service])
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    steered = [r for r in responses if r.headers["x-echo-override"]]
    addresses = sorted(f"{ip}:{port}" for ip, port in mesh.backends.values())
    for r in steered:
        first, *retries = r.headers["x-echo-override"].split(",")
        assert {first, *retries} <= set(addresses), r.headers
        assert first == r.headers["x-backend-address"], f"picked {first}, served by {r.headers['x-backend-address']}"
    after = settle(client)
    # Every pick arrived with its request and was honoured; the rest were the filter's explorations
    # (left to least_request on purpose; more while a cluster is young, ~1% later).
    picks = delta(after, before, "picks")
    assert picks == len(steered), (picks, len(steered))
    assert delta(after, before, "explorations") + delta(after, before, "fallbacks") == count - picks
    assert delta(after, before, "picks_honoured") == picks and delta(after, before, "picks_not_honoured") == 0
    served = [sum(r.headers["x-backend-address"] == a for r in steered) for a in addresses]
    assert minus(endpoint_picks(after, addresses), endpoint_picks(before, addresses)) == served, (addresses, served)
    assert picks >= count * 2 // 3, f"only {picks} of {count} requests carried a pick"


def processes(mesh: Mesh) -> dict[str, list[int]]:
    """Per sidecar, its pilot-agent's PID and its child processes' (Envoy): both change if the
    agent or its Envoy restarts."""
    children = child_pids()
    return {sc.proxy_id: [sc.proc.pid, *sorted(children.get(sc.proc.pid, []))] for sc in mesh.sidecars}


def test_helm_upgrade_steers_a_new_service_without_restarting_sidecars(mesh):
    """One more `services` entry and `helm upgrade`: the new service's calls are steered (its
    cluster gets override_host, the filter picks among its endpoints, every pick honoured) while
    every sidecar keeps running: same pilot-agent processes, Envoys not restarted."""
    client = mesh.client
    late = tm.cluster_of(LATE_SERVICE)
    responses = mesh.traffic(rounds=10, services=[LATE_SERVICE])
    assert all(r.status_code == 200 and not r.headers["x-echo-override"] for r in responses), "steered before"
    before = processes(mesh)
    assert all(len(pids) == 2 for pids in before.values()), before  # pilot-agent and its Envoy
    mesh.destinations.append((LATE_SERVICE, tm.PORT))
    mesh.install()
    wait_for(lambda: "override_host" in json.dumps(next(
        c["cluster"] for c in client.config_dump(resource="dynamic_active_clusters")["configs"]
        if c["cluster"]["name"] == late).get("load_balancing_policy")), 30, f"override_host on {late}")
    wait_for(lambda: tm.send(client, LATE_SERVICE).headers["x-echo-override"], 30, f"a pick for {LATE_SERVICE}")
    assert_steered(mesh, LATE_SERVICE)
    assert processes(mesh) == before


# ---------------------------------------------------------------------------------------------------
# An override header the application sets never steers: the sidecar removes it before the filter
# (the chart's <release>-strip-incoming-header EnvoyFilter). Checked here with the filter healthy, and in
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
    # Plaintext straight to the replica's inbound listener: the PeerAuthentication (STRICT) leaves
    # it no HTTP answer at all, for reports as for anything else ...
    for path in ("/v1/report", "/metrics"):
        with pytest.raises(requests.ConnectionError):
            _post(f"http://{replica.ip}:{tm.PORT}{path}", headers)
    # ... while in-mesh callers still read /metrics (an in-mesh Prometheus), and a Prometheus
    # outside the mesh scrapes the replica's metrics from its sidecar's merged metrics port
    # (test_metrics_visible_to_a_mesh_prometheus).
    metrics = http_get(f"http://{mesh.intruder.ip}:{tm.PORT}/metrics", headers={"Host": tm.AGG_HOST})
    assert metrics.status_code == 200 and "tailweight_reports_accepted_total" in metrics.text


def prometheus_text(url: str) -> dict[str, str]:
    """A Prometheus text exposition as {series name: "TYPE"} for every `# TYPE` line."""
    r = http_get(url, timeout=10)
    r.raise_for_status()
    return {line.split()[2]: line.split()[3] for line in r.text.splitlines() if line.startswith("# TYPE ")}


def test_metrics_visible_to_a_mesh_prometheus(mesh):
    """What a mesh's Prometheus scrapes, under Istio's default stats inclusion (the client adds one
    regexp for its listeners' connection counts, which matches none of the filter's stats): the
    filter's counters and gauges as tailweight_* on Envoy's Prometheus port (15090 in a pod, the
    chart's PodMonitor) and on pilot-agent's merged metrics port (15020, the prometheus.io
    annotations); the aggregator's on its sidecar's merged port (the chart's ServiceMonitor), which
    needs no mTLS while its own port is STRICT."""
    client = mesh.client
    mesh.traffic(rounds=2)
    matcher = next(c for c in client.config_dump()["configs"] if c["@type"].endswith("BootstrapConfigDump"))[
        "bootstrap"]["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"]
    regexes = [p["safe_regex"]["regex"] for p in matcher if "safe_regex" in p]
    assert DOWNSTREAM_CX_TOTAL in regexes and {"prefix": "wasm"} in matcher, matcher
    # Only Istio's default `wasm` prefix keeps the filter's stats: no regexp of the matcher matches them.
    assert not any(re.fullmatch(r, "wasmcustom.tailweight.picks") for r in regexes), regexes
    wanted = {"tailweight_picks": "counter", "tailweight_picks_honoured": "counter", "tailweight_reports_ok": "counter",
              "tailweight_weights_age_ms": "gauge", "tailweight_config_errors": "counter"}
    envoy = prometheus_text(f"http://{tm.LOCALHOST}:{client.prometheus_port}/stats/prometheus")
    merged = prometheus_text(f"http://{tm.LOCALHOST}:{client.status_port}/stats/prometheus")
    for name, kind in wanted.items():
        assert envoy.get(name) == kind, (name, sorted(k for k in envoy if k.startswith("tailweight")))
        assert merged.get(name) == kind, (name, sorted(k for k in merged if k.startswith("tailweight")))
    # The per-endpoint counters too (perEndpointMetrics): one series per endpoint and cluster, or one
    # name with upstream_endpoint/upstream_cluster labels where the bootstrap override tags them.
    assert any(re.fullmatch(r"tailweight_endpoint_(.+_)?picks", k) for k in envoy), sorted(envoy)
    replica = mesh.live[0]
    aggregator = prometheus_text(f"http://{tm.LOCALHOST}:{replica.sidecar.status_port}/stats/prometheus")
    assert aggregator.get("tailweight_reports_accepted_total") == "counter", sorted(aggregator)


def test_monitors_validated_by_the_crd_schema(mesh):
    """monitoring.enabled: `helm upgrade` installs a PodMonitor (the opted-in namespaces' sidecars)
    and a ServiceMonitor (the aggregator) that the apiserver validates against the Prometheus
    Operator's CRDs (from its pinned module); strict field validation refuses a monitor with a
    wrong type or an unknown field (so it would refuse a chart mistake). They name what
    test_metrics_visible_to_a_mesh_prometheus read: /stats/prometheus on Envoy's Prometheus port
    and on the aggregator sidecar's merged port, keeping the tailweight_* series."""
    if not MONITORING_CRDS.is_file():
        pytest.skip(f"not built: {MONITORING_CRDS} (make istio-bins)")
    cp = mesh.cp
    cp.apply_crds(MONITORING_CRDS, "the Prometheus Operator's CRDs")
    mesh.monitoring = {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}
    mesh.install()
    installed = [d for d in cp.helm.manifest(tm.RELEASE, tm.AGG_NS) if d["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(d["kind"] for d in installed) == ["PodMonitor", "ServiceMonitor"], installed
    for d in installed:
        live = cp.get_json(d["kind"].lower(), d["metadata"]["name"], "-n", d["metadata"]["namespace"])
        assert live["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    r = dry_run_strict(cp, yaml.safe_dump_all(installed))
    assert r.returncode == 0, r.stderr
    (pod_monitor,) = [d for d in installed if d["kind"] == "PodMonitor"]
    (service_monitor,) = [d for d in installed if d["kind"] == "ServiceMonitor"]
    # The controls: the same PodMonitor with a wrong type, or an unknown field, is refused.
    wrong_type = json.loads(json.dumps(pod_monitor))
    wrong_type["spec"]["podMetricsEndpoints"][0]["interval"] = 15
    typo = json.loads(json.dumps(pod_monitor))
    typo["spec"]["podMetricsEndpoints"][0]["pathh"] = "/stats/prometheus"
    for bad, message in ((wrong_type, "podMetricsEndpoints[0].interval"), (typo, "pathh")):
        r = dry_run_strict(cp, yaml.safe_dump(bad))
        assert r.returncode != 0 and message in r.stderr, r.stderr
    # What they scrape.
    assert pod_monitor["spec"]["namespaceSelector"]["matchNames"] == [tm.CLIENT_NS]
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http-envoy-prom", "/stats/prometheus")
    (service_endpoint,) = service_monitor["spec"]["endpoints"]
    metrics_service = cp.get_json("service", f"{tm.AGG_NAME}-metrics", "-n", tm.AGG_NS)
    (port,) = metrics_service["spec"]["ports"]
    assert (port["name"], port["targetPort"], service_endpoint["path"]) == (
        service_endpoint["port"], 15020, "/stats/prometheus"), (port, service_endpoint)
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= metrics_service["metadata"]["labels"].items()
    for monitor_endpoint in (endpoint, service_endpoint):
        (keep,) = monitor_endpoint["metricRelabelings"]
        assert keep["action"] == "keep" and keep["sourceLabels"] == ["__name__"]
        assert re.fullmatch(keep["regex"], "tailweight_picks") and re.fullmatch(keep["regex"], "tailweight_book_bytes")
        assert not re.fullmatch(keep["regex"], "envoy_cluster_upstream_rq_total")


# IST0133 "EnvoyFilter exposes internal implementation details": istioctl says it of every
# EnvoyFilter; the chart's are the documented way to switch a cluster's load balancer and to remove
# an application's override header (docs/istio.md, "The EnvoyFilters"), so that caveat stays, once
# for each of them.
ENVOYFILTER_CAVEAT = "IST0133"


def test_istioctl_analyze_finds_nothing_for_the_installed_chart(mesh):
    """The real istioctl (same istio module as istiod) against the e2e's apiserver, every
    namespace: of its messages about the release's objects, only the EnvoyFilter caveat remains.
    Messages about the harness's own objects (pretend pods without a proxy container, ...) are
    counted and printed, not asserted."""
    if not ISTIOCTL.is_file():
        pytest.skip(f"not built: {ISTIOCTL} (make istio-bins)")
    release = {f"{d['kind']} {d['metadata']['namespace']}/{d['metadata']['name']}"
               for d in mesh.cp.helm.manifest(tm.RELEASE, tm.AGG_NS)}
    out = subprocess.run([str(ISTIOCTL), "analyze", f"--kubeconfig={mesh.cp.kubeconfig}", "--all-namespaces",
                          "--output", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 79), out.stderr  # 79: messages at warning level or above
    messages = json.loads(out.stdout or "[]")
    ours = [m for m in messages if m["origin"] in release or any(o in m["message"] for o in release)]
    print(f"\n[istio] istioctl analyze: {len(messages)} messages, {len(ours)} about the release: "
          f"{sorted({(m['code'], m['origin']) for m in ours})}; others: "
          f"{sorted((m['code'], m['origin']) for m in messages if m not in ours)}")
    assert [m for m in ours if m["code"] != ENVOYFILTER_CAVEAT] == [], json.dumps(ours, indent=1)
    caveats = sorted(m["origin"] for m in ours)
    assert caveats == sorted(o for o in release if o.startswith("EnvoyFilter ")), caveats
    # And of the release's namespace (`helm install --create-namespace` made it, unlabelled) only
    # IST0102, "not enabled for injection": the chart's pods ask for their sidecar with their own
    # label (sidecar.istio.io/inject), which that analyzer does not read (docs/istio.md says so).
    assert [m["code"] for m in messages if m["origin"] == f"Namespace {tm.AGG_NS}"] == ["IST0102"], messages


def test_destination_sidecar_stamps_and_attests_its_callers_over_mtls(mesh):
    """A `services` entry with `loadStamps: true` and no clients, here for the aggregator itself:
    the chart's server-role WasmPlugin (match SERVER, role server) in the aggregator's namespace,
    whose sidecars then stamp every response of their inbound listener; the client's sidecar (not a
    client of that entry: its WasmPlugin does not read stamps) passes the stamp on untouched and
    stamps nothing itself. The same plugin attests (attest_clusters from `services`): each replica's
    sidecar POSTs to /v1/attest, through its own outbound mTLS, that it served the client's SPIFFE
    ID (the peer certificate its Envoy verified) at its endpoint, and the aggregator accepts it
    (204: the AuthorizationPolicy let the aggregator's namespace attest, and --attest-rule namespace
    let its principal speak for its own namespace's cluster)."""
    stamped = {"name": tm.AGG_NAME, "namespace": tm.AGG_NS, "port": tm.PORT, "clients": [], "loadStamps": True}
    mesh.extra_services.append(stamped)

    def stamp() -> str | None:
        """The stamp of one answered request from the client to an aggregator replica, "" if none;
        None if the request failed (a sidecar's listener changing under it)."""
        try:
            r = http_get(f"http://{mesh.client.ip}:{tm.PORT}/metrics", headers={"Host": tm.AGG_HOST}, timeout=5)
        except requests.RequestException:
            return None
        return r.headers.get("x-tailweight-load", "") if r.status_code == 200 else None

    client = f"spiffe://cluster.local/ns/{tm.CLIENT_NS}/sa/client"
    attester = f"spiffe://cluster.local/ns/{tm.AGG_NS}/sa/{tm.AGG_NAME}"

    def attested() -> list[dict]:
        """The accepted attestations naming the client as a source, at every replica."""
        return [a for r in mesh.live for a in r.attestations()
                if a["status"] == 204 and (a.get("sources") or {}).get(client, 0) > 0]

    mesh.install()
    try:
        plugin = mesh.cp.get_json("wasmplugin", f"{tm.RELEASE}-server", "-n", tm.AGG_NS)
        assert plugin["spec"]["match"] == [{"mode": "SERVER"}] and plugin["spec"]["pluginConfig"]["role"] == "server"
        assert plugin["spec"]["pluginConfig"]["attest_clusters"] == [tm.AGG_CLUSTER]
        reading = mesh.cp.get_json("wasmplugin", tm.RELEASE, "-n", tm.CLIENT_NS)["spec"]["pluginConfig"]
        assert tm.AGG_CLUSTER not in reading.get("load_stamp_clusters", []), \
            "no client reads the stamps of an entry without clients"
        # istiod pushes the plugin to each replica's sidecar on its own: wait until requests spread
        # over the replicas come back stamped, ten in a row.
        wait_for(lambda: all(re.fullmatch(r"1;rif=\d+", stamp() or "") for _ in range(10)), 90,
                 "ten stamped responses in a row from the aggregator replicas' inbound sidecars")
        # The destinations in `shop` have no sidecar of their own: nothing stamps their responses.
        assert all("x-tailweight-load" not in r.headers for r in mesh.traffic(rounds=1))
        written = sum(tm.filter_stats(r.sidecar).get("stamps_written", 0) for r in mesh.live)
        assert written >= 10, written  # the ten stamped answers waited for
        # Istio's inbound listener has direction INBOUND, which suits the role: no warning.
        for replica in mesh.live:
            assert "is the WasmPlugin's `match` mode right?" not in tm.envoy_log(replica.sidecar)
        assert "is the WasmPlugin's `match` mode right?" not in tm.envoy_log(mesh.client)
        # The attestations, end to end over mTLS: from a replica's inbound sidecar, about its own
        # endpoint, naming the client, delivered by the owning replica's sidecar with the
        # attester's verified identity, accepted by the aggregator.
        for _ in range(10):
            stamp()
        wait_for(attested, 30, f"an accepted attestation of {client}'s requests")
        endpoints = {f"{r.ip}:{tm.PORT}" for r in mesh.live}
        for a in attested():
            assert a["clusters"] == [tm.AGG_CLUSTER] and a["endpoint"] in endpoints, a
            assert a["xfcc"] and a["xfcc"].rsplit("URI=", 1)[-1].split(";")[0] == attester, a["xfcc"]
            assert a["shard"] == tm.AGG_CLUSTER, a
        # Every attestation the replicas got was accepted, and only one replica gets them (the
        # shard of the one cluster), like reports.
        everything = [a for r in mesh.live for a in r.attestations()]
        assert {a["status"] for a in everything} == {204}, [a for a in everything if a["status"] != 204][:3]
        assert len({r.index for r in mesh.live if r.attestations()}) == 1
        assert sum(tm.filter_stats(r.sidecar).get("attestations_sent", 0) for r in mesh.live) >= len(everything)
    finally:
        mesh.extra_services.remove(stamped)
        mesh.install()  # `helm upgrade` without the entry removes the server-role WasmPlugin
        # The next tests talk to the replicas: wait until every sidecar dropped the plugin and its
        # listeners settled (ten answered, unstamped requests in a row).
        wait_for(lambda: all(stamp() == "" for _ in range(10)), 90, "the replicas' sidecars without the plugin")


def test_attestations_name_only_the_senders_own_address(mesh):
    """The chart binds attestations to their sender (aggregator.senderAddress, on by default): istiod
    pushes its EnvoyFilter to each replica's own inbound sidecar as the first HTTP filter of the
    report port's listener, and the replicas run with --attest-address header:<its header>. Then
    the client's pod (namespace `shop`, which attests for its services' clusters) POSTs
    attestations through its own sidecar, over mTLS, to the aggregator: for its own address they
    are accepted (204), for another pod's (a backend of the cluster) refused with 403 (the
    aggregator's `attest_not_senders_address`), also when the client itself sends the header or an
    x-forwarded-for naming that pod: the aggregator's sidecar overwrites the one and ignores the
    other."""
    deployment = mesh.cp.get_json("deployment", tm.AGG_NAME, "-n", tm.AGG_NS)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--attest-address=header:{tm.SENDER_HEADER}" in container["args"], container["args"]

    def first_http_filter(replica: tm.Replica) -> dict | None:
        """The first HTTP filter of the replica's inbound report listener, as its Envoy runs it."""
        listener = replica.sidecar.listeners().get(f"{replica.ip}_{tm.PORT}")
        if listener is None:
            return None
        for chain in listener["active_state"]["listener"]["filter_chains"]:
            for f in chain["filters"]:
                if f["name"] == "envoy.filters.network.http_connection_manager":
                    return f["typed_config"]["http_filters"][0]
        return None

    for replica in mesh.live:
        wait_for(lambda r=replica: (first_http_filter(r) or {}).get("name") == "tailweight.attest-sender-address",
                 60, f"{replica.name}'s inbound listener led by the sender-address filter")
        (mutation,) = first_http_filter(replica)["typed_config"]["mutations"]["request_mutations"]
        assert mutation["append"]["header"] == {"key": tm.SENDER_HEADER,
                                                "value": "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%"}
        assert mutation["append"]["append_action"] == "OVERWRITE_IF_EXISTS_OR_ADD"

    client = mesh.client
    other_pod = mesh.backends["backend-a"][0]
    assert other_pod != client.ip
    sent: list[str] = []

    def attest(endpoint: str, headers: dict[str, str] | None = None) -> requests.Response:
        """One attestation for `endpoint` of the cluster of `backend`, through the client's sidecar."""
        incarnation = 7000 + len(sent)
        sent.append(endpoint)
        body = {"version": 1, "cluster": tm.cluster_of("backend"), "endpoint": endpoint,
                "incarnation": incarnation, "interval_ms": 1000,
                "sources": [{"principal": f"spiffe://cluster.local/ns/{tm.CLIENT_NS}/sa/client",
                             "requests": 1, "errors": 0}]}
        with requests.Session() as s:
            s.trust_env = False
            return s.post(f"http://{client.ip}:{tm.PORT}{tm.ATTEST_PATH}", json=body, timeout=10,
                          headers={"Host": tm.AGG_HOST, **(headers or {})})

    own, foreign = f"{client.ip}:{tm.PORT}", f"{other_pod}:{tm.PORT}"
    r = attest(own)
    assert r.status_code == 204, (r.status_code, r.text)
    r = attest(foreign)
    assert r.status_code == 403 and r.text.startswith(
        f"endpoint: \"{foreign}\" is not the attesting sender's address {client.ip}"), (r.status_code, r.text)
    forged = {tm.SENDER_HEADER: other_pod, "x-forwarded-for": other_pod}
    r = attest(foreign, forged)
    assert r.status_code == 403 and f"sender's address {client.ip} " in r.text, (r.status_code, r.text)
    r = attest(own, forged)
    assert r.status_code == 204, (r.status_code, r.text)
    # What the replicas' sidecars delivered: the sender address was the client pod's every time.
    mine = [a for rep in mesh.live for a in rep.attestations()
            if a.get("endpoint") in (own, foreign) and a.get("clusters") == [tm.cluster_of("backend")]]
    assert sorted((a["endpoint"], a["status"]) for a in mine) == sorted(
        [(own, 204), (own, 204), (foreign, 403), (foreign, 403)]), mine
    assert {a["sender"] for a in mine} == {client.ip}, mine


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
    # Five more reporters, no more principals: each replica that took a lie already knew the
    # client's principal (its reports reach every replica that owns one of its clusters), or took
    # all five lies under that one new principal. Scrapes share one /metrics page for up to a
    # second (the chart keeps --metrics-page-max-age-ms at its default): wait for a page after them.
    wanted = before["tailweight_reporters_live"] + len(liars)
    after = wait_for(lambda: (g := gauges())["tailweight_reporters_live"] >= wanted and g, 10,
                     f"{len(liars)} more live reporters in /metrics", interval_s=0.5)
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


def weights_read_command(cluster: str) -> str:
    """The in-mesh read of one cluster's weights that docs/istio.md gives ("Reading the weights"),
    for `cluster`: its shell lines that set C and compute KEY, as bash runs them."""
    blocks = re.findall(r"```sh\n(.*?)```", DOCS.read_text(), re.S)
    (block,) = [b for b in blocks if "x-tailweight-shard: $KEY" in b]
    lines = [line for line in block.splitlines() if line.startswith(("C=", "h=", "KEY="))]
    assert len(lines) == 3, block
    lines[0] = f"C='{cluster}'"
    return "\n".join(lines) + '\necho "$KEY"; echo "${C//|/%7C}"'


def test_weights_read_in_mesh_from_the_owning_replica(mesh):
    """The documented way to read weights without going around the aggregator's sidecar: from a
    pod of an opted-in namespace (here: through the client's sidecar, as its application's curl
    would go), GET /v1/weights?cluster=<c> with x-tailweight-shard set to the shard key the doc's
    shell lines compute. The mesh's consistent hash sends it to the replica that owns <c>: every
    cluster's read answers 200 with that cluster's view (a replica that does not own it answers 404)."""
    o = wait_all_owned(mesh, "every destination cluster at some replica")
    for cluster in sorted(c for c, rs in o.items() if c in {tm.cluster_of(s) for s in SERVICES}):
        out = subprocess.run(["bash", "-c", weights_read_command(cluster)], capture_output=True, text=True,
                             check=True, timeout=10).stdout.split()
        key, query = out
        assert key.endswith(f".{tm.AGG_HOST}") and re.fullmatch(r"[0-9a-f]{16}", key.split(".")[0]), key
        r = http_get(f"http://{mesh.client.ip}:{tm.PORT}/v1/weights?cluster={query}",
                     headers={"Host": f"{tm.AGG_NAME}.{tm.AGG_NS}:{tm.PORT}", tm.SHARD_HEADER: key})
        assert r.status_code == 200, (cluster, o[cluster], r.status_code, r.text)
        (view,) = r.json()["clusters"]
        addresses = {f"{ip}:{port}" for ip, port in mesh.backends.values()}
        assert view["name"] == cluster and view["endpoints"], view
        assert {e["address"] for e in view["endpoints"]} <= addresses, view


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
    """The filter's picks per gRPC backend."""
    return endpoint_picks(stats, mesh.emulator.addresses)


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
    built = template(tm.CHART, files=(tm.CHART / "ci" / "example-values.yaml",)).stdout
    return next(d for d in yaml.safe_load_all(built) if d and d["kind"] == "WasmPlugin")


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
        mesh.install(filter_settings={"exploreRatio": 2})
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
        mesh.install()
    # The valid configuration steers again.
    wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering after the fix")


# ---------------------------------------------------------------------------------------------------
# The module from http:// and oci:// (pilot-agent downloads it; Envoy loads the local copy)


def test_module_from_http_and_oci_urls(mesh):
    cp, client = mesh.cp, mesh.client
    layout_index = OCI_LAYOUT / "index.json"
    if not (ORAS.is_file() and layout_index.is_file()):
        pytest.skip(f"need {ORAS} and {OCI_LAYOUT} (make oci-wasm)")
    try:
        # http:// — a plain file server, as for a module published on a web server (the chart
        # gives the agent the module's sha256 to check).
        base = tm.serve_directory(cp, tm.WASM.parent)
        mesh.install(url=f"{base}/{tm.WASM.name}")
        module = wait_for(lambda: (f := tm.active_module(client)) and f != str(tm.WASM) and f, 60,
                          "the http:// module in Envoy")
        assert Path(module).read_bytes() == tm.WASM.read_bytes()
        wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering (http://)")

        # oci:// — the image `make oci-wasm` built, pushed to the registry with oras, pinned by
        # its manifest digest (module.oci.digest).
        (manifest,) = json.loads(layout_index.read_text())["manifests"]
        tag = manifest["annotations"]["org.opencontainers.image.ref.name"]
        repository = f"{mesh.registry}/tailweight/tailweight-filter"
        subprocess.run([str(ORAS), "cp", "--no-tty", "--to-plain-http", "--from-oci-layout",
                        f"{OCI_LAYOUT}:{tag}", f"{repository}:{tag}"], check=True, capture_output=True, timeout=60)
        mesh.install(url=f"oci://{repository}@{manifest['digest']}")
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
# module.kind native: the same sidecar code as an Envoy dynamic module, wired by EnvoyFilters


def test_native_shell_steers_and_reports_then_the_wasm_shell_comes_back(mesh):
    """`helm upgrade` with module.kind native: the WasmPlugin goes, the native shell (the .so at
    module.native.path, here the build's own file: the sidecars are this machine's processes) is
    in the outbound listener before the router, every pick is honoured with no override header
    written (it sets the upstream override host), its metrics keep the Wasm shell's names, and its
    reports reach the aggregator through the mesh. Then back to the Wasm shell."""
    client, listener = mesh.client, f"{mesh.client.ip}_{tm.PORT}"

    def chain() -> str:
        return yaml.safe_dump(client.listeners()[listener])

    native = {"kind": "native", "native": {"path": str(paths.NATIVE)}}
    try:
        mesh.install(module=native)
        wait_for(lambda: "tailweight.native" in chain() and "tailweight~" not in chain(), 60,
                 "the native shell in place of the WasmPlugin's filter")
        assert chain().index("tailweight.native") < chain().index("envoy.filters.http.router")
        assert not mesh.cp.kubectl("get", "wasmplugin", "-n", tm.CLIENT_NS, "-o", "name").stdout.strip()
        mesh.traffic(rounds=30, services=["backend"])  # warm-up: the shell learns the endpoints
        before = settle(client)
        responses = mesh.traffic(rounds=60, services=["backend"])
        assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
        assert not any(r.headers["x-echo-override"] for r in responses), "the native shell writes no header"
        after = settle(client)
        picks = delta(after, before, "picks")
        assert picks >= 40, after
        assert delta(after, before, "picks_honoured") == picks and delta(after, before, "picks_not_honoured") == 0
        assert delta(after, before, "explorations") + delta(after, before, "fallbacks") == 60 - picks
        assert after["config_errors"] == before.get("config_errors", 0)
        # Since `before`: the report with the 60 requests' news may have gone out before `after` was
        # read, and an idle sidecar sends none without news.
        wait_for(lambda: settle(client)["reports_ok"] > before["reports_ok"], 30, "a report answered by the aggregator")
    finally:
        mesh.install(url=f"file://{tm.WASM}")
    wait_for(lambda: "tailweight~" in chain() and "tailweight.native" not in chain(), 60, "the Wasm shell back")
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


# ---------------------------------------------------------------------------------------------------
# (f) `helm uninstall` under load: nothing fails, traffic goes on unsteered. The last test.

UNINSTALL_LOAD_REQUESTS, UNINSTALL_LOAD_S = 3000, 120  # the load loop's bounds


def test_helm_uninstall_leaves_traffic_flowing_unsteered(mesh):
    """`helm upgrade` first restores every object the tests above deleted by hand (Helm recreates
    a missing object of its release), so the client steers again; then `helm uninstall` while a
    load loop (bounded in count and time) sends requests through the client's sidecar: no request
    fails, and once the sidecar has dropped the filter, the header removal and override_host,
    requests spread over the endpoints with no pick."""
    client, listener = mesh.client, f"{mesh.client.ip}_{tm.PORT}"
    mesh.install(url=f"file://{tm.WASM}")

    def chain() -> str:
        return yaml.safe_dump(client.listeners()[listener])

    def backend_lb() -> str:
        clusters = client.config_dump(resource="dynamic_active_clusters")["configs"]
        return json.dumps(next(c["cluster"] for c in clusters if c["cluster"]["name"] == tm.cluster_of("backend")))

    wait_for(lambda: "tailweight~" in chain() and STRIP_FILTER in chain(), 30, "the release restored")
    wait_for(lambda: tm.send(client, "backend").headers["x-echo-override"], 30, "steering before the uninstall")
    mesh.traffic(rounds=30, services=["backend"])  # warm-up: the restored filter learns the endpoints
    results: list[tuple[object, str]] = []
    stop = threading.Event()

    def load() -> None:
        deadline = time.monotonic() + UNINSTALL_LOAD_S
        for _ in range(UNINSTALL_LOAD_REQUESTS):
            if stop.is_set() or time.monotonic() > deadline:
                return
            try:
                r = tm.send(client, "backend")
                results.append((r.status_code, r.headers.get("x-echo-override", "")))
            except requests.RequestException as e:
                results.append((repr(e), ""))

    loop = threading.Thread(target=load, name="uninstall-load")
    loop.start()
    try:
        wait_for(lambda: len(results) >= 20, 30, "the load loop under way")
        mesh.cp.helm.uninstall(tm.RELEASE, tm.AGG_NS)
        wait_for(lambda: "tailweight~" not in chain() and STRIP_FILTER not in chain()
                 and "override_host" not in backend_lb(), 60, "the client's sidecar without tailweight")
        during = len(results)
        wait_for(lambda: len(results) >= during + 50, 60, "50 more requests after the uninstall")
    finally:
        stop.set()
        loop.join(UNINSTALL_LOAD_S + 30)
    failed = [r for r in results if r[0] != 200]
    print(f"\n[istio] helm uninstall under load: {len(results)} requests, {len(failed)} failed, "
          f"{sum(bool(h) for _, h in results)} steered")
    assert not failed, failed[:5]
    assert sum(bool(h) for _, h in results[:20]) >= 10, "the load did not start steered"
    responses = mesh.traffic(rounds=30, services=["backend"])
    assert all(r.status_code == 200 and not r.headers["x-echo-override"] for r in responses)
    assert len({r.headers["x-backend-address"] for r in responses}) >= 2
    assert mesh.cp.helm.run("list", "-n", tm.AGG_NS, "-q").stdout.strip() == ""
    for kind, ns in (("wasmplugin", tm.CLIENT_NS), ("envoyfilter", tm.CLIENT_NS), ("peerauthentication", tm.AGG_NS)):
        items = mesh.cp.get_json(kind, "-n", ns)["items"]
        left = [i for i in items if tm.HARNESS_LABEL not in i["metadata"].get("labels", {})]
        assert left == [], kind
