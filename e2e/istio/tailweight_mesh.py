"""tailweight installed with its Helm chart (charts/tailweight) onto the loopback Istio control plane
(see cluster.py).

What runs (all on the control plane's private 127.X.Y.0/24, see ControlPlane.ip):
- namespace `tailweight` (the release's): the aggregator Service, DestinationRule,
  PeerAuthentication, AuthorizationPolicy ... from the chart, and two replicas, each = the
  aggregator binary (the static build the Dockerfile ships) + a recording relay
  (report_recorder.py) + its own inbound sidecar through pilot-agent. A replica is what the
  chart's Deployment would run: a WorkloadEntry (EndpointSlices refuse loopback) with the pod
  template's labels, the aggregator's service account, Istio mTLS, and the pod's prometheus.io
  annotations handed to its pilot-agent as Istio's injector would.
- namespace `shop` (opted in: the chart's `services` list): the Services `backend` and `svc-0..`,
  all served by the same echo backends (plaintext WorkloadEntries), and the pod `client` whose
  sidecar runs the filter and binds a real outbound listener on port 8080.
- namespace `other` (not opted in): the pod `intruder`, a sidecar with an mTLS identity that the
  AuthorizationPolicy must refuse.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import requests
import yaml

from cluster import ControlPlane
from loopback import LOCALHOST, http_get
from sidecars import Sidecar
from tailweight_e2e import aggregator
from tailweight_e2e.procs import Proc, ready_port, retry_port_clash, wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHART = REPO / "charts" / "tailweight"
RELEASE = "tailweight"  # `helm install tailweight ...`: object names start with it
# The module under test: the project's filter (override with TW_ISTIO_WASM to try another build).
WASM = Path(os.environ.get("TW_ISTIO_WASM", REPO / "build" / "tailweight_filter.wasm"))
# The aggregator as the Dockerfile ships it: `make aggregator-static` (TW_ISTIO_AGGREGATOR: another build).
AGGREGATOR = Path(os.environ.get("TW_ISTIO_AGGREGATOR",
                               REPO / "target" / "x86_64-unknown-linux-musl" / "release" / "tailweight-aggregator"))

AGG_NS, CLIENT_NS, OTHER_NS = "tailweight", "shop", "other"
PORT = 8080  # every Service port here (aggregator and destinations), as in the chart
AGG_NAME = f"{RELEASE}-aggregator"
AGG_HOST = f"{AGG_NAME}.{AGG_NS}.svc.cluster.local"
AGG_CLUSTER = f"outbound|{PORT}||{AGG_HOST}"
REPLICA_LABEL = "tailweight.test/replica"
OVERRIDE_HEADER = "x-gateway-destination-endpoint"
SHARD_HEADER = "x-tailweight-shard"
ATTEST_PATH = "/v1/attest"
# Reporter names of the reports tests invent (not a filter's).
INVENTED_REPORTER = "invented-"
# The header the aggregator's own inbound sidecar writes the caller's address into (the chart's
# aggregator.senderAddress.header), which its --attest-address reads.
SENDER_HEADER = "x-tailweight-sender-address"
# The label of resources the harness makes for itself (not the chart's): uninstall leaves them.
HARNESS_LABEL = "tailweight-e2e/harness"
# Host numbers in the control plane's /24 (test_istio_smoke uses .10-.22 of the same one).
CLIENT_HOST, INTRUDER_HOST, FIRST_REPLICA_HOST = 110, 111, 131
BACKENDS = {"backend-a": 121, "backend-b": 122, "backend-c": 123}  # name -> host number
REPLICAS = 2
# The gRPC destination: Service `ping`, port 9090 named grpc-* (istiod: protocol GRPC, HTTP/2
# upstream), backends from the emulator (`protocol=grpc`) answering Fortio's ping.
GRPC_SERVICE, GRPC_PORT, GRPC_PORT_NAME = "ping", 9090, "grpc-ping"
PING_METHOD = "/fgrpc.PingServer/Ping"


def host_of(service: str, namespace: str = CLIENT_NS) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def cluster_of(service: str, port: int = PORT, namespace: str = CLIENT_NS) -> str:
    """The Envoy cluster a client's sidecar routes `service` to (what the filter steers)."""
    return f"outbound|{port}||{host_of(service, namespace)}"


# ---------------------------------------------------------------------------------------------------
# The chart's values as a user would write them


def module_values(url: str) -> dict:
    """The chart's `module` values for a module URL: file:///path, http://... (checked against the
    sha256 of WASM, the module the tests serve) or oci://<registry>/<repo>(:tag|@sha256:digest)."""
    if url.startswith("file://"):
        return {"source": "file", "file": {"path": url.removeprefix("file://")}}
    if url.startswith(("http://", "https://")):
        return {"source": "http", "http": {"url": url, "sha256": hashlib.sha256(WASM.read_bytes()).hexdigest()}}
    ref = url.removeprefix("oci://")
    repository, _, digest = ref.partition("@")
    if digest:
        return {"source": "oci", "oci": {"repository": repository, "digest": digest}}
    repository, _, tag = ref.rpartition(":")
    return {"source": "oci", "oci": {"repository": repository, "tag": tag}}


def chart_values(url: str, destinations: list[tuple[str, int]], filter_settings: dict | None = None,
                 namespace: str = CLIENT_NS, aggregator: bool = True, **extra) -> dict:
    """Values that opt `namespace` in for `destinations` ((service, port) pairs of that namespace,
    one `services` entry each), the module at `url`, the filter's knobs `filter_settings`, and the
    aggregator unless not `aggregator` (then only the opt-in); `extra`: more top-level values."""
    return {
        "services": [{"name": service, "namespace": namespace, "port": port} for service, port in destinations],
        "module": module_values(url),
        "filter": filter_settings or {},
        "aggregator": {"enabled": aggregator},
        **extra,
    }


# ---------------------------------------------------------------------------------------------------
# Destination services and their backends


def apply_services(cp: ControlPlane, services: list[str], backends: dict[str, tuple[str, int]]) -> None:
    """Kubernetes Services `backend` (selector app=backend) and the others (selector tier=pool),
    all selecting the same plaintext WorkloadEntries, one per echo backend."""
    docs = []
    for service in services:
        selector = {"app": "backend"} if service == "backend" else {"tier": "pool"}
        docs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": service, "namespace": CLIENT_NS},
                     "spec": {"selector": selector,
                              "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}})
    cp.apply_yaml(yaml.safe_dump_all(docs))
    for name, (ip, port) in backends.items():
        cp.apply_workload_entry(CLIENT_NS, name, ip, {"app": "backend", "tier": "pool"},
                                ports={"http": port})


def apply_grpc_service(cp: ControlPlane, backend_ports: list[int]) -> None:
    """The Kubernetes Service `ping` (port GRPC_PORT named `grpc-ping`: istiod makes its cluster
    HTTP/2) over one plaintext WorkloadEntry per gRPC backend of the emulator (127.0.0.1:<port>)."""
    cp.apply_yaml(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": GRPC_SERVICE, "namespace": CLIENT_NS},
        "spec": {"selector": {"app": GRPC_SERVICE},
                 "ports": [{"name": GRPC_PORT_NAME, "port": GRPC_PORT, "targetPort": GRPC_PORT_NAME}]},
    }))
    for i, port in enumerate(backend_ports):
        cp.apply_workload_entry(CLIENT_NS, f"{GRPC_SERVICE}-{i}", LOCALHOST, {"app": GRPC_SERVICE},
                                ports={GRPC_PORT_NAME: port})


def grpc_channel(client: Sidecar) -> grpc.Channel:
    """One gRPC channel (one HTTP/2 connection) to the client sidecar's outbound listener on
    GRPC_PORT, with the Service's name as :authority (the listener routes by it). Its own
    subchannel pool: grpc-core otherwise shares connections process-wide."""
    return grpc.insecure_channel(f"{client.ip}:{GRPC_PORT}", options=[
        ("grpc.default_authority", f"{host_of(GRPC_SERVICE)}:{GRPC_PORT}"),
        ("grpc.use_local_subchannel_pool", 1),
    ])


def grpc_pings(channel: grpc.Channel, count: int, streams: int, timeout_s: float = 10) -> list[grpc.StatusCode]:
    """`count` Fortio pings (/fgrpc.PingServer/Ping, an empty PingMessage, as the emulator serves
    it), `streams` at a time on the channel's one connection; returns each call's status code."""
    ping = channel.unary_unary(PING_METHOD, request_serializer=None, response_deserializer=None)
    codes = []
    for start in range(0, count, streams):
        calls = [ping.future(b"", timeout=timeout_s) for _ in range(min(streams, count - start))]
        for call in calls:
            try:
                call.result()
            except grpc.RpcError:
                pass
            codes.append(call.code())
    return codes


def bind_outbound_to_pod_ip(cp: ControlPlane, namespace: str, name: str, selector: dict[str, str],
                            ip: str) -> None:
    """The sidecar of the pods `selector` picks opens its connections to the aggregator from the
    pod's own address `ip`, as every connection out of a real pod does (here the kernel would pick
    127.0.0.1 for any loopback destination). The aggregator's sidecar then sees `ip` as the caller's
    address (the chart's sender-address EnvoyFilter). An EnvoyFilter `name` of the harness only."""
    cp.apply_yaml(yaml.safe_dump({
        "apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter",
        "metadata": {"name": name, "namespace": namespace, "labels": {HARNESS_LABEL: "true"}},
        "spec": {"workloadSelector": {"labels": selector}, "configPatches": [{
            "applyTo": "CLUSTER",
            "match": {"context": "SIDECAR_OUTBOUND", "cluster": {"service": AGG_HOST, "portNumber": PORT}},
            "patch": {"operation": "MERGE", "value": {
                "upstream_bind_config": {"source_address": {"address": ip, "port_value": 0}}}},
        }]},
    }))


# ---------------------------------------------------------------------------------------------------
# Aggregator replicas


@dataclass
class Replica:
    """One aggregator pod: the app, the recording relay in front of it, and its sidecar."""
    index: int
    ip: str
    app_port: int
    records_path: Path
    app: Proc
    relay: Proc
    sidecar: Sidecar

    @property
    def name(self) -> str:
        return f"{AGG_NAME}-{self.index}"

    def weights(self) -> dict:
        """GET /v1/weights on the app's own port (the tests' view from inside the pod; users read
        the weights in-mesh, see docs/istio.md "Reading the weights")."""
        r = http_get(f"http://{LOCALHOST}:{self.app_port}/v1/weights", timeout=5)
        r.raise_for_status()
        return r.json()

    def clusters(self) -> set[str]:
        return {c["name"] for c in self.weights()["clusters"]}

    def posts(self) -> list[dict]:
        """Every POST the mesh delivered to this replica: one dict each (see report_recorder.py)."""
        if not self.records_path.exists():
            return []
        return [json.loads(line) for line in self.records_path.read_text().splitlines() if line]

    def records(self) -> list[dict]:
        """The reports the mesh delivered to this replica from the filters (attestations are
        `attestations()`); reports a test made up itself (reporter INVENTED_REPORTER*) are left out."""
        return [r for r in self.posts()
                if r["path"] != ATTEST_PATH and not str(r.get("reporter")).startswith(INVENTED_REPORTER)]

    def attestations(self) -> list[dict]:
        """The attestations (POST /v1/attest) the mesh delivered to this replica: cluster, endpoint,
        {principal: requests}, the x-forwarded-client-cert and sender address (SENDER_HEADER) its
        sidecar wrote, the app's status."""
        return [r for r in self.posts() if r["path"] == ATTEST_PATH]


def start_replica(cp: ControlPlane, index: int) -> Replica:
    """Aggregator replica `index` at .131+index, as a pod of the installed Deployment would run:
    app (its container's args, but on a port of its own) + relay + WorkloadEntry with the pod
    template's labels and service account + sidecar (pilot-agent) that merges the app's metrics as
    the pod's prometheus.io annotations say (Istio's injector hands them to the agent)."""
    deployment = cp.get_json("deployment", AGG_NAME, "-n", AGG_NS)
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    service_account = pod["spec"]["serviceAccountName"]
    ip = cp.ip(FIRST_REPLICA_HOST + index)
    name = f"{AGG_NAME}-{index}"
    # Its listeners on loopback ports of their own: the report listener on the port the harness
    # gives it (--listen), the read-only one (the chart's --read-only-listen) on a reserved port.
    read_only_port = cp.procs.reserve_port()
    args = [a for a in container["args"] if not a.startswith("--listen=")]
    args = [f"--read-only-listen={LOCALHOST}:{read_only_port}" if a.startswith("--read-only-listen=") else a
            for a in args]
    assert f"--read-only-listen={LOCALHOST}:{read_only_port}" in args, container["args"]
    app = aggregator.start(cp.procs, f"{name}-app", args=args, binary=AGGREGATOR)
    records = cp.dir / f"{name}-reports.jsonl"
    relay_ready = cp.procs.ready_file(f"{name}-relay")
    relay = cp.procs.start(f"{name}-relay", [sys.executable, str(HERE / "report_recorder.py"),
                                             LOCALHOST, str(app.port), str(records), str(relay_ready)])
    relay_port = ready_port(relay_ready, relay, 15)  # written once it listens
    labels = {**pod["metadata"]["labels"], REPLICA_LABEL: str(index)}
    annotations = pod["metadata"]["annotations"]
    # The pod's scrape port is the container's read-only port (the agent scrapes around the
    # sidecar): here the app's read-only listener.
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert annotations["prometheus.io/port"] == str(container_ports["http-read-only"]), annotations
    scrape = {"scrape": annotations["prometheus.io/scrape"], "path": annotations["prometheus.io/path"],
              "port": str(read_only_port)}
    # Egress: istiod's namespace and the aggregator's own Service, which a server-role filter in
    # this pod attests to (as in a real pod, which sees every Service).
    cp.apply_ingress_sidecar_resource(AGG_NS, name, {REPLICA_LABEL: str(index)}, bind_ip=ip,
                                      port=PORT, app_port=relay_port,
                                      egress_hosts=("istio-system/*", f"./{AGG_HOST}"))
    cp.apply_workload_entry(AGG_NS, name, ip, labels, ports={"http": PORT}, service_account=service_account,
                            mtls=True)
    # Its server-role filter attests under this address: its attestations leave from it too.
    bind_outbound_to_pod_ip(cp, AGG_NS, f"{name}-source-address", {REPLICA_LABEL: str(index)}, ip)
    sidecar = cp.start_sidecar(AGG_NS, name, ip=ip, labels=labels, service_account=service_account,
                               extra_env={"ISTIO_PROMETHEUS_ANNOTATIONS": json.dumps(scrape)})
    listener = f"{ip}_{PORT}"
    wait_for(lambda: listener in sidecar.listeners(), 30, f"{name} inbound listener {listener}")
    return Replica(index, ip, app.port, records, app.proc, relay, sidecar)


def stop_replica(cp: ControlPlane, replica: Replica) -> None:
    """The pod goes away: Kubernetes would drop its endpoint (here: the WorkloadEntry and the Pod)
    and the processes end."""
    cp.delete("workloadentry", AGG_NS, replica.name)
    cp.delete("pod", AGG_NS, replica.name)
    cp.stop_sidecar(replica.sidecar)
    for proc in (replica.relay, replica.app):
        proc.stop()
        if proc in cp.procs.procs:
            cp.procs.procs.remove(proc)


# ---------------------------------------------------------------------------------------------------
# Reading the client's sidecar


def send(client: Sidecar, service: str, timeout: float = 5, headers: dict[str, str] | None = None
         ) -> requests.Response:
    """One request through the client's outbound listener (port 8080), routed by Host."""
    return http_get(f"http://{client.ip}:{PORT}/", headers={"Host": host_of(service), **(headers or {})},
                    timeout=timeout)


def filter_stats(sidecar: Sidecar) -> dict[str, int]:
    """The filter's own metrics (wasmcustom.tailweight.*), as ints."""
    out = {}
    for name, value in sidecar.stats("wasmcustom.tailweight").items():
        if value.strip().lstrip("-").isdigit():
            out[name.removeprefix("wasmcustom.tailweight.")] = int(value)
    return out


def envoy_log(sidecar: Sidecar) -> str:
    """pilot-agent's log, which carries its Envoy's log (incl. the filter's lines)."""
    return sidecar.proc.log()


def active_module(sidecar: Sidecar) -> str | None:
    """The local file the client's tailweight filter runs from (pilot-agent rewrites http:// and
    oci:// URLs to its download cache), or None when no such filter is configured."""
    for name, config in sidecar.ecds_filters().items():
        if f"/{CLIENT_NS}.tailweight~" in name:
            vm = config["ecds_filter"]["typed_config"].get("config", {}).get("vm_config", {})
            return vm.get("code", {}).get("local", {}).get("filename")
    return None


# ---------------------------------------------------------------------------------------------------
# Module sources for the http:// and oci:// variants


def serve_directory(cp: ControlPlane, directory: Path) -> str:
    """A plain HTTP file server on 127.0.0.1 for `directory` (file_server.py); returns its base URL."""
    name = f"http-files-{len(cp.procs.procs)}"
    ready = cp.procs.ready_file(name)
    proc = cp.procs.start(name, [sys.executable, str(HERE / "file_server.py"), str(directory),
                                         LOCALHOST, str(ready)])
    return f"http://{LOCALHOST}:{ready_port(ready, proc, 15)}"  # written once it listens


def start_registry(cp: ControlPlane, binary: Path) -> str:
    """go-containerregistry's registry on 127.0.0.1 (build/registry); returns host:port. It cannot
    report a port-0 bind: a reserved port (tailweight_e2e/procs.py)."""
    def start() -> str:
        address = f"{LOCALHOST}:{cp.procs.reserve_port()}"
        proc = cp.procs.start("oci-registry", [str(binary), f"--listen={address}"])
        wait_for(lambda: http_get(f"http://{address}/v2/", timeout=1).ok, 15, "OCI registry /v2/", proc)
        return address
    return retry_port_clash(start)
