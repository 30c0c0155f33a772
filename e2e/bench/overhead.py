"""`make bench-overhead`: what the filter costs inside Envoy, by the method Azure uses for the Istio
add-on: Fortio at 1,000 qps, 16 connections, 1 KB payload, 30 s, through Envoy (a) with no wasm
filter, (b) with an empty wasm filter, (c) with tailweight — one run, same backends, same cluster
(override_host with least_request fallback) so only the filter differs.

Envoy CPU per request = (utime + stime of the Envoy process over the run) / requests, from /proc.
Envoy runs pinned to one core and Fortio plus the backends to the other, when there are two.
The variants run interleaved for `--rounds` rounds and each figure is the median over the rounds,
so a burst of noise on this shared machine skews one sample, not a variant. The costs one variant
adds over another are medians of per-round differences: the variants of a round ran back to back,
under the same load from the rest of the machine.
Also: seconds from starting Envoy to /ready, with and without the filter (median of several starts).

    python -m bench.overhead --out bench/results [--seconds 30] [--qps 1000] [--rounds 3]
        [--variant NAME=path/to/filter.wasm ...]   (extra variants, e.g. experimental builds)
    python -m bench.overhead --rerender --out bench/results   (the tables again from overhead.json)
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench import emulator as emu
from bench import fortio
from bench.cpu import cpu_seconds
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.procs import ProcGroup

EMPTY_WASM = paths.REPO / "build" / "empty_filter.wasm"
VARIANTS = {"no_wasm": None, "empty_wasm": EMPTY_WASM, "tailweight": paths.WASM}


def envoy_yaml(wasm, backends) -> str:
    cfg = yaml.safe_load(envoy_configs.render_client_envoy(backends, "tailweight_local", wasm_path=wasm or paths.WASM))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    if wasm is None:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "envoy.filters.http.wasm"]
    return yaml.safe_dump(cfg)


def pin_prefix(core: int) -> list:
    """taskset to `core` when there are two cores or more (else nothing)."""
    return ["taskset", "-c", str(core)] if os.cpu_count() and os.cpu_count() > 1 else []


def pinned(core: int, argv) -> list:
    return [*pin_prefix(core), *map(str, argv)]


def start_envoy(group, wasm, backends, name):
    """Envoy pinned to core 1; returns it and the seconds from start to /ready (polled every 5 ms)."""
    started = time.monotonic()
    e = envoy.start(group, name, envoy_yaml(wasm, backends), command_prefix=pin_prefix(1), poll_s=0.005)
    return e, time.monotonic() - started


def measure(group, wasm, backends, name, tmp, seconds, qps, connections, payload) -> dict:
    """One variant, one round: warm up 5 s, then `seconds` of load; Envoy CPU per request."""
    e, _ = start_envoy(group, wasm, backends.addresses, name)
    url = e.url()
    warm = group.start(f"{name}-warmup", pinned(0, fortio.load_argv(url, qps, connections, 5, tmp / "warm.json",
                                                                    payload_bytes=payload)))
    warm.popen.wait(120)  # V8 tiers up, connections open
    out = tmp / f"{name}.json"
    cpu0 = cpu_seconds(e.proc.pid)
    load = group.start(f"{name}-load", pinned(0, fortio.load_argv(url, qps, connections, seconds, out,
                                                                  payload_bytes=payload)))
    load.popen.wait(seconds + 120)
    cpu1 = cpu_seconds(e.proc.pid)
    data = fortio.read(out)
    total, errors = fortio.counts(data)
    sample = {"requests": total, "errors": errors, **{f"{k}_ms": v for k, v in fortio.client_percentiles(data).items()},
              "envoy_cpu_us_per_request": (cpu1 - cpu0) / max(total, 1) * 1e6}
    if wasm == paths.WASM:
        sample["filter_picks"] = e.stat("wasmcustom.tailweight.picks")
    e.proc.stop()
    return sample


def median_of(samples, key):
    values = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(values) if values else None


def run(out_dir: Path, seconds: float, qps: float, connections: int, payload: int, starts: int, rounds: int,
        variants: dict) -> dict:
    results = {"method": {"qps": qps, "connections": connections, "payload_bytes": payload, "seconds": seconds,
                          "rounds": rounds, "envoy": "1.40.0, --concurrency 1, pinned to core 1"}, "variants": {}}
    with tempfile.TemporaryDirectory() as tmp, ProcGroup(Path(tmp) / "logs") as group:
        tmp = Path(tmp)
        backends = emu.start(group, [emu.BackendSettings(workers=64, base_ms=0.2, payload_bytes=payload)] * 3)
        ready = {v: [] for v in variants}
        for v, wasm in variants.items():
            for i in range(starts):
                e, took = start_envoy(group, wasm, backends.addresses, f"{v}-start{i}")
                ready[v].append(took)
                e.proc.stop()
        samples = {v: [] for v in variants}
        for r in range(rounds):
            for v, wasm in variants.items():
                samples[v].append(measure(group, wasm, backends, f"{v}-r{r}", tmp, seconds, qps, connections, payload))
                print(f"[overhead] round {r + 1}/{rounds} {v}: "
                      f"{samples[v][-1]['envoy_cpu_us_per_request']:.1f} us/request", flush=True)
        for v in variants:
            results["variants"][v] = {
                "requests": sum(s["requests"] for s in samples[v]),
                "errors": sum(s["errors"] for s in samples[v]),
                **{k: median_of(samples[v], k) for k in ("p50_ms", "p90_ms", "p99_ms", "envoy_cpu_us_per_request")},
                "envoy_cpu_us_per_request_all": [round(s["envoy_cpu_us_per_request"], 1) for s in samples[v]],
                "start_to_ready_s": statistics.median(ready[v]), "start_to_ready_all_s": ready[v],
            }
    results["wasm_bytes"] = paths.WASM.stat().st_size
    return write(out_dir, results)


def paired_difference(variants: dict, a: str, b: str) -> dict:
    """Envoy CPU per request of `a` minus `b`, round by round, and the median of those."""
    per_round = [x - y for x, y in zip(variants[a]["envoy_cpu_us_per_request_all"],
                                       variants[b]["envoy_cpu_us_per_request_all"], strict=True)]
    return {"median_us": statistics.median(per_round), "per_round_us": [round(d, 1) for d in per_round]}


def write(out_dir: Path, results: dict) -> dict:
    v = results["variants"]
    results["tailweight_minus_no_wasm"] = paired_difference(v, "tailweight", "no_wasm")
    results["empty_minus_no_wasm"] = paired_difference(v, "empty_wasm", "no_wasm")
    results["tailweight_minus_empty"] = paired_difference(v, "tailweight", "empty_wasm")
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
        f"{m['seconds']:g} s per variant and round, {m['rounds']} interleaved rounds (medians shown); "
        f"Envoy {m['envoy']}. Same backends and cluster for all.",
        "",
        "| variant | requests | errors | p50 ms | p90 ms | p99 ms | Envoy CPU us/request | start to ready s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {v['requests']} | {v['errors']} | {v['p50_ms']:.2f} | {v['p90_ms']:.2f} | "
                     f"{v['p99_ms']:.2f} | {v['envoy_cpu_us_per_request']:.1f} | {v['start_to_ready_s']:.3f} |")
    def diff(key: str) -> str:
        d = r[key]
        return f"{d['median_us']:+.1f} us (rounds: {', '.join(f'{x:+.1f}' for x in d['per_round_us'])})"

    lines += [
        "",
        "Added Envoy CPU per request, median of the per-round differences:",
        "",
        f"- tailweight over no filter: **{diff('tailweight_minus_no_wasm')}** (target <= 45 us);",
        f"- the empty V8 filter over no filter: {diff('empty_minus_no_wasm')};",
        f"- tailweight's own logic over the empty filter: {diff('tailweight_minus_empty')}.",
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=WASM",
                    help="an extra variant: a name and a proxy-wasm module")
    ap.add_argument("--rerender", action="store_true", help="rewrite the tables from --out's overhead.json")
    a = ap.parse_args()
    if a.rerender:
        print(markdown(write(a.out, json.loads((a.out / "overhead.json").read_text()))))
        return
    variants = dict(VARIANTS)
    for spec in a.variant:
        name, _, wasm = spec.partition("=")
        if not name or not Path(wasm).is_file():
            ap.error(f"--variant {spec!r}: expected NAME=path/to/existing.wasm")
        variants[name] = Path(wasm)
    print(markdown(run(a.out, a.seconds, a.qps, a.connections, a.payload, a.starts, a.rounds, variants)))


if __name__ == "__main__":
    main()
