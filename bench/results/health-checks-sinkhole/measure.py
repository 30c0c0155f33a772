"""An HTTP sinkhole with one client Envoy (--concurrency 2) in front of 10 emulator backends (2
workers, 5 ms, jitter 0.2): Fortio sends 300 rps over 8 connections for 30 s, and from 8 s on
backend 3 answers every request 503 at once. Prints, per policy, Fortio's requests and errors and
what backend 3 got after the fault (users' requests and health checks), with the filter's counters.

Run from e2e/ after `make wasm` and `cargo build --release -p tailweight-emulator`:
    PYTHONPATH=. ~/.cache/tailweight/venv/bin/python ../bench/results/health-checks-sinkhole/measure.py
"""
import tempfile
import time
from pathlib import Path

from harness import emulator as emu
from harness import fortio
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.procs import ProcGroup

RUNS = [
    ("least_request", "least_request", {}),
    ("tailweight_local, health checks off", "tailweight_local", {}),
    ("tailweight_local, health checks on", "tailweight_local", {"health_check_path": "/healthz"}),
]
COUNTERS = ("suspensions", "explorations", "health_checks_sent", "health_checks_failed")


def run(policy, plugin_config):
    logs = Path(tempfile.mkdtemp()) / "logs"
    with ProcGroup(logs) as group:
        backends = emu.start(group, [emu.BackendSettings(workers=2, base_ms=5, jitter=0.2) for _ in range(10)])
        config = envoy_configs.render_client_envoy(backends.addresses, policy, wasm_path=paths.WASM,
                                                   plugin_config=plugin_config)
        proxy = envoy.start(group, "envoy", config, concurrency=2)
        out = logs.parent / "fortio.json"
        load = fortio.start_load(group, "fortio", proxy.url(), 300, 8, 30, out)
        time.sleep(8)
        backends.event([3], "fail")
        at_fault = backends.requests_total()[3]
        load.popen.wait(90)
        total, errors = fortio.counts(fortio.read(out))
        got = int(backends.requests_total()[3] - at_fault)
        counters = {c: proxy.stat("wasmcustom.tailweight." + c) for c in COUNTERS}
        return {"requests": total, "errors": errors, "backend_3_after_fault": got, **counters}


if __name__ == "__main__":
    for name, policy, plugin_config in RUNS:
        print(name, run(policy, plugin_config), flush=True)
