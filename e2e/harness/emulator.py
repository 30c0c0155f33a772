"""The backend emulator process (target/release/tailweight-emulator) seen from Python: start it with
one port per backend (ports it picks itself), read its /metrics, send it events."""
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import requests

from tailweight_e2e import paths
from tailweight_e2e.procs import Proc, ProcGroup, read_ready_file

_SERIES = re.compile(r'^(\w+)\{backend="(\d+)",address="([^"]+)"\}\s+(\S+)$')


@dataclass
class BackendSettings:
    workers: int
    base_ms: float
    speed: float = 1.0
    jitter: float = 0.0
    payload_bytes: int = 0
    protocol: str = "http"  # or "grpc"
    cold_factor: float = 1.0
    cold_s: float = 0.0
    absent: bool = False  # not listening until a `join` event
    load_stamps: bool = False  # write the load stamp a server-role sidecar would (HTTP only)

    def lifecycle_spec(self) -> str:
        """The --backend keys beyond the service-time ones, only those that differ from the defaults."""
        keys = []
        if self.protocol != "http":
            keys.append(f"protocol={self.protocol}")
        if self.cold_factor != 1.0 or self.cold_s != 0.0:
            keys.append(f"cold_factor={self.cold_factor},cold_s={self.cold_s}")
        if self.absent:
            keys.append("absent=1")
        if self.load_stamps:
            keys.append("load_stamps=1")
        return "".join("," + k for k in keys)


def parse_metrics(text: str) -> dict[str, dict[int, float]]:
    """Prometheus text -> {family: {backend index: value}}; plus unlabelled series under index -1."""
    out: dict[str, dict[int, float]] = {}
    for line in text.splitlines():
        m = _SERIES.match(line)
        if m:
            out.setdefault(m.group(1), {})[int(m.group(2))] = float(m.group(4))
        elif line and not line.startswith("#"):
            name, _, value = line.partition(" ")
            try:
                out.setdefault(name, {})[-1] = float(value)
            except ValueError:
                pass
    return out


class Emulator:
    def __init__(self, proc: Proc, admin_port: int, ports: list[int]):
        self.proc = proc
        self.admin_port = admin_port
        self.ports = ports
        self.admin = f"http://127.0.0.1:{admin_port}"
        self._session = requests.Session()

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def metrics(self) -> dict[str, dict[int, float]]:
        return parse_metrics(self._session.get(f"{self.admin}/metrics", timeout=5).text)

    def requests_total(self) -> list[float]:
        counts = self.metrics().get("emulator_requests_total", {})
        return [counts.get(i, 0.0) for i in range(len(self.ports))]

    def event(self, backends: Sequence[int], action: str, value: float | None = None) -> None:
        params = {"backends": ",".join(str(i) for i in backends), "action": action}
        if value is not None:
            params["value"] = repr(float(value))
        r = self._session.post(f"{self.admin}/event", params=params, timeout=5)
        if r.status_code != 200:
            raise RuntimeError(f"emulator event {params}: {r.status_code} {r.text.strip()}")


def start(group: ProcGroup, backends: Sequence[BackendSettings], seed: int = 1, name: str = "emulator") -> Emulator:
    """Start one emulator process serving every backend on its own 127.0.0.1 port; the emulator
    binds port 0 for each (and its admin) and reports the ports it got in its --ready-file."""
    ready_file = group.ready_file(name)
    argv = [paths.binary("tailweight-emulator"), "--admin-port", 0, "--seed", seed, "--ready-file", ready_file]
    for b in backends:
        argv += ["--backend", f"port=0,workers={b.workers},base_ms={b.base_ms},speed={b.speed},"
                              f"jitter={b.jitter},payload_bytes={b.payload_bytes}"]
        argv[-1] += b.lifecycle_spec()
    proc = group.start(name, argv)
    ports = json.loads(read_ready_file(ready_file, proc, 20))
    return Emulator(proc, int(ports["admin"]), [int(p) for p in ports["backends"]])
