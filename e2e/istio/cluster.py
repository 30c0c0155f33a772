"""A real Istio control plane on 127.0.0.1, without containers or a kubelet.

etcd + kube-apiserver + istiod (pilot-discovery) run as local processes built by build/build.sh;
sidecars run through the real `pilot-agent proxy sidecar` with the pip Envoy. Pods exist only as API
objects whose status we patch by hand (pod IPs 127.X.Y.n, see ControlPlane.ip).
See /work/shared/ISTIO-FACTS.md.

Usage:
    with ControlPlane() as cp:
        cp.create_namespace("demo")
        sc = cp.start_sidecar("demo", "client", ip=cp.ip(10), labels={"app": "client"})

ControlPlane is assembled from its parts, one concept each: the processes and their lifecycle
(here), kubectl and pretend pods (kube.KubeApi), mesh resources for loopback workloads
(mesh_resources.MeshResources), sidecars (sidecars.SidecarRunner), and Helm against its apiserver
(helm.Helm, `cp.helm`).

Every process gets its own process group and is stopped by its PID at teardown (also on failure,
and at interpreter exit through atexit). Ports: our own servers bind port 0 and report the port they
got; etcd, kube-apiserver, istiod and pilot-agent cannot, so they get reserved ports and are started
again on fresh ones if a port was taken after all (tailweight_e2e/procs.py explains the scheme). The
run's 127.X.Y.0/24 is reserved the same way.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from helm import Helm
from kube import KubeApi
from loopback import LOCALHOST, http_get, start_http_backend, tree_rss_kb
from mesh_resources import MeshResources
from sidecars import SidecarRunner
from tailweight_e2e.procs import Proc, ProcGroup, reserve, retry_port_clash, wait_for
from versions import BINARIES, CRDS, missing_parts

ADMIN_TOKEN = "tailweight-e2e-admin-token"


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@dataclass
class ControlPlane(KubeApi, MeshResources, SidecarRunner):
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

    # -- CRDs and Helm --------------------------------------------------------------------------------

    def _apply_crds(self) -> None:
        """Istio's CRDs (incl. their validation rules, so the apiserver rejects bad resources)."""
        self.apply_crds(CRDS, "Istio's CRDs")
        self.create_namespace("istio-system")

    def apply_crds(self, path: Path, what: str) -> None:
        """Applies the CRDs in `path` and waits until the apiserver serves them (Established)."""
        self.kubectl("apply", "--server-side", "-f", str(path), timeout=120)
        # Asked again when it fails: right after the apply it can fail transiently; a real timeout
        # still ends in kubectl's error (wait_for names the last one).
        wait_for(lambda: self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s",
                                      timeout=90), 120, f"{what} Established")

    @cached_property
    def helm(self) -> Helm:
        """Helm against this apiserver, with its own config, cache and data dirs."""
        return Helm(self.kubeconfig, self.dir / "helm")

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
