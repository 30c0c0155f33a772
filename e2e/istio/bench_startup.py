"""Sidecar start-up with and without tailweight on the loopback Istio control plane (cluster.py).

Times a sidecar from pilot-agent's start until Envoy's admin /ready answers LIVE ("envoy") and until
pilot-agent's readiness probe passes ("agent"), for a client calling 1 service and 50 services (one
outbound listener and one cluster each, see many_services.py), without tailweight and with its
namespace opted in (WasmPlugin from file:// + the EnvoyFilters, as the chart installs them).
Each case is its own namespace, so nothing changes between starts; the cases take turns within a
round (the order rotating per round), and each case's first start is a discarded warm-up.

Also read at each start, once ready: the outbound listeners and clusters of the services, Envoy's
V8 VM counts (active, created) and the RSS of pilot-agent + Envoy.

Usage (after `make istio-bins wasm`):
    ~/.cache/tailweight/venv/bin/python e2e/istio/bench_startup.py [--starts 7] [--concurrency 2]
Writes bench/results/istio-startup.json and .md (or --out DIR). A benchmark, not a test: nothing is
asserted beyond the configuration each start must have.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # e2e/istio (cluster, ...) and e2e/ (tailweight_e2e)

import many_services as ms  # noqa: E402
import tailweight_mesh as tm  # noqa: E402
from cluster import ControlPlane  # noqa: E402
from loopback import tree_rss_kb  # noqa: E402
from sidecars import Sidecar  # noqa: E402
from versions import VERSIONS, envoy_path  # noqa: E402

SIZES = (1, 50)
METRICS = ("envoy_s", "agent_s", "rss_mb")


def envoy_version() -> str:
    out = subprocess.run([envoy_path(), "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"/(\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else out.strip()


def case_name(services: int, tailweight: bool) -> str:
    return f"{services} service{'s' if services > 1 else ''}, {'tailweight' if tailweight else 'plain Istio'}"


def measure(cp: ControlPlane, many: ms.ManyServices, concurrency: int) -> dict:
    """One start of the case's client sidecar, until ready; what it had then; stopped again."""
    sidecar: Sidecar = many.start_client(cp, concurrency)
    try:
        rss_mb = tree_rss_kb(sidecar.proc.pid) / 1024
        clusters = [c["cluster"]["name"] for c in sidecar.config_dump(resource="dynamic_active_clusters")["configs"]]
        listeners = many.listeners(sidecar)
        chains = json.dumps([sidecar.listeners()[name] for name in listeners])
        start = {
            "envoy_s": sidecar.startup_s["envoy"], "agent_s": sidecar.startup_s["agent"],
            "rss_mb": round(rss_mb, 1), "listeners": len(listeners),
            "clusters": sum(1 for c in clusters if c.startswith("outbound|") and f".{many.namespace}." in c),
            "filter_in_chains": chains.count(f"{many.namespace}.tailweight~"),
            **{f"v8_{k}": v for k, v in ms.v8_vms(sidecar).items()},
        }
    finally:
        cp.stop_sidecar(sidecar)
    # The configuration each start must have had, else its time means something else.
    expected_filters = many.count if many.tailweight else 0
    if (start["listeners"], start["clusters"], start["filter_in_chains"]) != (many.count, many.count, expected_filters):
        raise RuntimeError(f"{many.namespace}: unexpected configuration at ready: {start}")
    return start


def summarise(starts: list[dict]) -> dict:
    out = {}
    for key in METRICS:
        values = [s[key] for s in starts]
        out[key] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}
    for key in ("v8_active", "v8_created"):
        out[key] = sorted({s.get(key, 0) for s in starts})
    return out


def spread(values: dict) -> str:
    return f"{values['median']:.2f} [{values['min']:.2f}-{values['max']:.2f}]"


def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [
        "# Sidecar start-up with and without tailweight",
        "",
        f"pilot-agent start until Envoy's `/ready` is LIVE (`envoy`) and until pilot-agent's readiness "
        f"passes (`agent`): median of {cfg['starts']} starts per case (after one discarded warm-up), cases "
        f"interleaved; min-max in brackets. Envoy {cfg['envoy']} (pip), `concurrency: {cfg['concurrency']}`, "
        f"istiod/pilot-agent {cfg['istio']}, the module from `file://` ({cfg['wasm_bytes']} bytes); "
        f"2 shared cores (load average {cfg['load_before']} before, {cfg['load_after']} after). "
        "Each service has its own outbound listener and cluster; with tailweight every listener's chain "
        "has the filter (ECDS) and the header removal, every cluster `override_host`.",
        "",
        "| case | envoy ready s | agent ready s | RSS at ready MB | V8 VMs active (created) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for case in result["cases"]:
        s = case["summary"]
        vms = f"{'/'.join(map(str, s['v8_active']))} ({'/'.join(map(str, s['v8_created']))})"
        lines.append(f"| {case['name']} | {spread(s['envoy_s'])} | {spread(s['agent_s'])} | "
                     f"{s['rss_mb']['median']:.0f} | {vms} |")
    lines += ["", "Added by tailweight (difference of the medians):", ""]
    by = {(c["services"], c["tailweight"]): c["summary"] for c in result["cases"]}
    for n in SIZES:
        plain, tw = by[(n, False)], by[(n, True)]
        lines.append(f"- {n} service{'s' if n > 1 else ''}: envoy ready "
                     f"{tw['envoy_s']['median'] - plain['envoy_s']['median']:+.2f} s, RSS "
                     f"{tw['rss_mb']['median'] - plain['rss_mb']['median']:+.0f} MB;")
    lines += ["", f"V8 VMs: {result['vms_note']}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=7, help="measured starts per case (default 7)")
    parser.add_argument("--concurrency", type=int, default=2, help="Envoy workers (Istio's default: 2)")
    parser.add_argument("--out", type=Path, default=tm.REPO / "bench" / "results")
    args = parser.parse_args()
    if not tm.WASM.is_file():
        sys.exit(f"{tm.WASM} missing: run `make wasm`")
    load_before = round(os.getloadavg()[0], 1)
    with ControlPlane() as cp:
        cases = []
        for i, n in enumerate(SIZES):
            for j, tailweight in enumerate((False, True)):
                host = 30 + 4 * (2 * i + j)
                namespace = f"startup-{n}-{'tailweight' if tailweight else 'plain'}"
                cases.append(ms.apply(cp, namespace, n, cp.ip(host), cp.ip(host + 1), tailweight))
        starts: dict[str, list[dict]] = {c.namespace: [] for c in cases}
        for c in cases:  # warm-up: istiod's caches for the namespace, the binaries in the page cache
            measure(cp, c, args.concurrency)
        for r in range(args.starts):
            for c in cases[r % len(cases):] + cases[:r % len(cases)]:
                starts[c.namespace].append(measure(cp, c, args.concurrency))
                print(f"round {r + 1}/{args.starts} {c.namespace}: {starts[c.namespace][-1]}", flush=True)
    active = {s.get("v8_active") for c in cases if c.tailweight for s in starts[c.namespace]}
    result = {
        "config": {"starts": args.starts, "concurrency": args.concurrency, "envoy": envoy_version(),
                   "istio": VERSIONS["ISTIO_VERSION"], "wasm_bytes": tm.WASM.stat().st_size,
                   "load_before": load_before, "load_after": round(os.getloadavg()[0], 1)},
        "cases": [{"name": case_name(c.count, c.tailweight), "services": c.count, "tailweight": c.tailweight,
                   "summary": summarise(starts[c.namespace]), "starts": starts[c.namespace]} for c in cases],
        "vms_note": (f"{sorted(active)} active with tailweight at concurrency {args.concurrency}, with 1 "
                     "listener and with 50: one VM per thread (each worker and the main thread) plus the "
                     "base VM, shared by every listener's chain, none per listener."),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "istio-startup.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "istio-startup.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
