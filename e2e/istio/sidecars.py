"""Sidecars: the real `pilot-agent proxy sidecar` running the pip Envoy for a pretend pod, and the
Envoy admin reads the tests make of it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from loopback import LOCALHOST, http_get
from tailweight_e2e import envoy_stats
from tailweight_e2e.procs import Proc, ProcGroup, retry_port_clash, wait_for
from versions import BINARIES, BOOTSTRAP_TEMPLATE, envoy_path

# pilot-agent keeps downloaded Wasm modules in this fixed path (constants.IstioDataDir upstream).
ISTIO_DATA_DIR = Path("/var/lib/istio/data")
ISTIOD_SAN = "istiod.istio-system.svc"  # the name in istiod's own serving certificate


@dataclass
class Sidecar:
    """One pilot-agent + Envoy, i.e. the sidecar of one (pretend) pod."""
    namespace: str
    pod: str
    ip: str
    admin_port: int
    status_port: int  # pilot-agent's status port (15020 in a pod): readiness, merged metrics
    dir: Path
    proc: Proc
    prometheus_port: int = 0  # Envoy's own Prometheus listener (15090 in a pod)
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
        return envoy_stats.parse_all(self.admin("/stats", **({"filter": filter} if filter else {})).text)

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



class SidecarRunner:
    """Part of ControlPlane: starts sidecars against its istiod (`self.xds_address`), as processes
    of `self.procs`, with pods and tokens from KubeApi."""
    dir: Path
    procs: ProcGroup
    xds_address: str

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
            proc = self.procs.start(f"sidecar-{namespace}.{pod}", [
                str(BINARIES["pilot-agent"]), "proxy", "sidecar",
                f"--domain={namespace}.svc.cluster.local", "--proxyLogLevel=warning",
                "--log_output_level=default:info",
            ], env=env, cwd=home)
            sc = Sidecar(namespace, pod, ip, admin, status, home, proc, prometheus_port=prom)
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
