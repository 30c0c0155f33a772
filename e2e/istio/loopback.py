"""Loopback helpers of the Istio e2e: plain HTTP without proxies, the echo backends, RSS of a
process tree. Everything here stays on 127.0.0.0/8."""

from __future__ import annotations

import sys
from pathlib import Path

import requests

from tailweight_e2e.procs import ProcGroup, ready_port

HERE = Path(__file__).resolve().parent
LOCALHOST = "127.0.0.1"


def http_get(url: str, timeout: float = 5, **kw) -> requests.Response:
    """GET without any proxy from the environment (all our traffic stays on loopback)."""
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, timeout=timeout, **kw)



def start_http_backend(group: ProcGroup, ip: str, name: str) -> int:
    """echo_backend.py on ip, a port of its own choosing (returned): answers every GET with its name
    (also in header x-backend)."""
    ready = group.ready_file(f"backend-{name}")
    proc = group.start(f"backend-{name}", [sys.executable, str(HERE / "echo_backend.py"), name, ip, str(ready)])
    return ready_port(ready, proc, 10)  # written once it listens



def child_pids() -> dict[int, list[int]]:
    """Every process's children, by parent PID, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_rss_kb(pid: int) -> int:
    """RSS of pid plus all its descendants, from /proc."""
    children = child_pids()
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
