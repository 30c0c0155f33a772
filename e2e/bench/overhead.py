"""`make bench-overhead`: what the filter costs inside Envoy, by the method Azure uses for the Istio
add-on: Fortio at 1,000 qps, 16 connections, 1 KB payload, 30 s, through Envoy (a) with no wasm
filter, (b) with an empty wasm filter, (c) with tailweight — one run, same backends, same cluster
(override_host with least_request fallback) so only the filter differs.

Envoy CPU per request = (utime + stime of the Envoy process over the run) / requests, from /proc.
Envoy runs pinned to one core and Fortio plus the backends to the other, when there are two.
Also: seconds from starting Envoy to /ready, with and without the filter (median of several starts).

    python -m bench.overhead --out bench/results [--seconds 30] [--qps 1000]
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import requests
import yaml

from bench import emulator as emu
from bench import fortio
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.procs import ProcGroup, free_port

EMPTY_WASM = paths.REPO / "build" / "empty_filter.wasm"
VARIANTS = {"no_wasm": None, "empty_wasm": EMPTY_WASM, "tailweight": paths.WASM}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def envoy_yaml(variant: str, listen: int, admin: int, backends) -> str:
    wasm = VARIANTS[variant]
    cfg = yaml.safe_load(envoy_configs.render_client_envoy(
        listen, admin, backends, "tailweight_local", wasm_path=wasm or paths.WASM))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    if wasm is None:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    return yaml.safe_dump(cfg)


def pinned(core: int, argv):
    return ["taskset", "-c", str(core), *map(str, argv)] if os.cpu_count() and os.cpu_count() > 1 else list(argv)


def start_envoy(group, variant, backends, name):
    listen, admin = free_port(), free_port()
    config = group.log_dir / f"{name}.yaml"
    config.write_text(envoy_yaml(variant, listen, admin, backends))
    started = time.monotonic()
    proc = group.start(name, pinned(1, [paths.envoy(), "-c", config, "--concurrency", "1",
                                        "--base-id", admin, "--disable-hot-restart"]))
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        if not proc.alive() or time.monotonic() - started > 60:
            raise RuntimeError(f"{name} did not become ready:\n{proc.log()[-2000:]}")
        time.sleep(0.005)
    return proc, listen, admin, time.monotonic() - started


def run(out_dir: Path, seconds: float, qps: float, connections: int, payload: int, starts: int) -> dict:
    results = {"method": {"qps": qps, "connections": connections, "payload_bytes": payload, "seconds": seconds,
                          "envoy": "1.40.0, --concurrency 1, pinned to core 1"}, "variants": {}}
    with tempfile.TemporaryDirectory() as tmp, ProcGroup(Path(tmp) / "logs") as group:
        backends = emu.start(group, [emu.BackendSettings(workers=64, base_ms=0.2, payload_bytes=payload)] * 3)
        for variant in VARIANTS:
            ready = []
            for i in range(starts):
                proc, _, _, took = start_envoy(group, variant, backends.addresses, f"{variant}-start{i}")
                ready.append(took)
                proc.stop()
            proc, listen, admin, _ = start_envoy(group, variant, backends.addresses, variant)
            out = Path(tmp) / f"{variant}.json"
            argv = fortio.load_argv(f"http://127.0.0.1:{listen}/", qps, connections, seconds, out,
                                    payload_bytes=payload)
            # Warm up (V8 tiers up, connections open), then measure.
            warm = group.start(f"{variant}-warmup", pinned(0, fortio.load_argv(
                f"http://127.0.0.1:{listen}/", qps, connections, 5, Path(tmp) / "warm.json", payload_bytes=payload)))
            warm.popen.wait(120)
            cpu0 = cpu_seconds(proc.pid)
            load = group.start(f"{variant}-load", pinned(0, argv))
            load.popen.wait(seconds + 120)
            cpu1 = cpu_seconds(proc.pid)
            data = fortio.read(out)
            total, errors = fortio.counts(data)
            pct = fortio.client_percentiles(data)
            results["variants"][variant] = {
                "requests": total, "errors": errors,
                "p50_ms": pct.get("p50"), "p90_ms": pct.get("p90"), "p99_ms": pct.get("p99"),
                "envoy_cpu_s": cpu1 - cpu0,
                "envoy_cpu_us_per_request": (cpu1 - cpu0) / max(total, 1) * 1e6,
                "start_to_ready_s": statistics.median(ready), "start_to_ready_all_s": ready,
            }
            if variant == "tailweight":
                stats = envoy.Envoy(proc, admin).stats("wasmcustom.tailweight.")
                results["variants"][variant]["filter_picks"] = stats.get("wasmcustom.tailweight.picks", 0)
            proc.stop()
            print(f"[overhead] {variant}: {results['variants'][variant]['envoy_cpu_us_per_request']:.1f} us/request, "
                  f"p99 {pct.get('p99', float('nan')):.2f} ms", flush=True)
    v = results["variants"]
    results["tailweight_minus_no_wasm_us"] = v["tailweight"]["envoy_cpu_us_per_request"] - v["no_wasm"]["envoy_cpu_us_per_request"]
    results["empty_minus_no_wasm_us"] = v["empty_wasm"]["envoy_cpu_us_per_request"] - v["no_wasm"]["envoy_cpu_us_per_request"]
    results["tailweight_minus_empty_us"] = v["tailweight"]["envoy_cpu_us_per_request"] - v["empty_wasm"]["envoy_cpu_us_per_request"]
    results["wasm_bytes"] = paths.WASM.stat().st_size
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "overhead.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "overhead.md").write_text(markdown(results))
    return results


def markdown(r: dict) -> str:
    m = r["method"]
    lines = [
        "# Filter overhead",
        "",
        f"Fortio {m['qps']:g} qps, {m['connections']} connections, {m['payload_bytes']} B payload, "
        f"{m['seconds']:g} s per variant, one run; Envoy {m['envoy']}. Same backends and cluster for all.",
        "",
        "| variant | requests | errors | p50 ms | p90 ms | p99 ms | Envoy CPU us/request | start to ready s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {v['requests']} | {v['errors']} | {v['p50_ms']:.2f} | {v['p90_ms']:.2f} | "
                     f"{v['p99_ms']:.2f} | {v['envoy_cpu_us_per_request']:.1f} | {v['start_to_ready_s']:.3f} |")
    lines += [
        "",
        f"- tailweight over no filter: **{r['tailweight_minus_no_wasm_us']:+.1f} us** of Envoy CPU per request "
        f"(target <= 45 us); the empty V8 filter alone: {r['empty_minus_no_wasm_us']:+.1f} us; "
        f"tailweight's own logic over the empty filter: {r['tailweight_minus_empty_us']:+.1f} us.",
        f"- tailweight_filter.wasm: {r['wasm_bytes']} bytes.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=paths.REPO / "bench" / "results")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--qps", type=float, default=1000)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--payload", type=int, default=1024)
    ap.add_argument("--starts", type=int, default=5)
    a = ap.parse_args()
    print(markdown(run(a.out, a.seconds, a.qps, a.connections, a.payload, a.starts)))


if __name__ == "__main__":
    main()
