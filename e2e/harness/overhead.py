"""`make bench-overhead`: what the filter costs a fleet of sidecars, variant against variant:
no wasm filter (no_wasm), an empty V8 filter (empty_wasm: what running any wasm filter costs),
tailweight, and any `--variant NAME=path.wasm` (e.g. an experimental build). Every variant gets the
same Envoy bootstrap (harness.overhead_configs) but for the HTTP filter.

1. Start-up (harness.overhead_startup): wall time from starting Envoy to /ready and Envoy's CPU time
   until then, at --concurrency 1 and 2 with both cores free, and at 2 confined to one core (a busy
   node: the compile cannot run beside anything); a listener and one cluster, local-only; the
   variants' starts interleaved; phases (module compile) from Envoy's own log at wasm:debug.
2. Memory at --concurrency 2: RSS 1 s and 10 s after /ready; 90 s after /ready with the sidecar
   bootstrap override the chart ships (Envoy releasing free heap pages); and after a few minutes
   of load spread over 64 clusters x 1,000 endpoints with the aggregator on (a synthetic reporter,
   harness.overhead_reporter, makes the aggregator's views list every endpoint, so the filter learns
   them; its `endpoints_tracked` gauge says how many it reached). `--flat-minutes N`: RSS every 30 s
   for N minutes under light load.
3. Envoy CPU per request at 1,000 qps, HTTP/1.1 (16 connections, 1 KB) and gRPC (Fortio ping, 2
   connections x 8 streams, to HTTP/2 backends), at --concurrency 1 and 2: one Envoy per variant
   and concurrency, all started first; then rounds in which each variant is loaded in turn, back to
   back (the order rotating). Added CPU = the median of the per-round differences, with a
   distribution-free confidence interval (harness.overhead_measure.median_interval). Latency
   percentiles from the rounds' merged histograms.
4. Light load at --concurrency 2, the aggregator configured: Envoy CPU per second idle and at 1,
   10, 100 and 1,000 rps, every variant loaded at the same time (paired in time), CPU from the
   threads' schedstat (ns); beside them tailweight with the sidecar bootstrap override
   (`tailweight_releasing`).
5. Where the harness's client sidecars live (harness.overhead_sidecar): --concurrency 2, 15 emulated
   endpoints with the seed's service times, the aggregator on, 10 / 50 / 150 / 1,000 rps, against
   Envoy's least_request LB without a filter, paired rounds; beside them floor_wasm
   (bench/wasm-probes/floor.wat), the least any steering Wasm filter pays.
6. Instructions per request and idle second, by callgrind in Envoy (harness.overhead_instructions).

Envoys run pinned to core 1, load generators and backends to core 0 (when there are two cores);
CPU is read from /proc, so what the rest of the machine does costs a variant time, not CPU. The
tables: harness.overhead_tables.

    python -m harness.overhead [--out bench/results] [--quick] [--rounds N] [--seconds S] [--starts N]
        [--fleet-seconds S] [--flat-minutes N] [--only SECTION ...] [--logs DIR]
        [--variant NAME=path/to/filter.wasm ...]
    python -m harness.overhead --rerender --out bench/results   (the tables again from overhead.json)
"""
import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import requests

from harness import emulator as emu
from harness import fortio
from harness import overhead_configs as configs
from harness import overhead_instructions as instructions
from harness import overhead_measure as measure
from harness import overhead_sidecar as sidecar
from harness import overhead_startup as startup
from harness import overhead_tables as tables
from harness.cpu import cpu_seconds
from tailweight_e2e import aggregator, envoy, paths
from tailweight_e2e.procs import Proc, ProcGroup, wait_for

EMPTY_WASM = paths.REPO / "build" / "empty_filter.wasm"
# The least a steering Wasm filter pays (bench/wasm-probes/floor.wat): sections 5 and 6 only.
FLOOR_WASM = paths.REPO / "build" / "floor_filter.wasm"
RESULTS = paths.REPO / "bench" / "results"
QUICK_RESULTS = paths.REPO / "build" / "bench-overhead-quick"  # a smoke run never replaces the results
# tailweight_native: the native shell (an Envoy dynamic module: overhead_configs.is_native), the same
# sidecar code as the tailweight Wasm module.
VARIANTS = {"no_wasm": None, "empty_wasm": EMPTY_WASM, tables.TAILWEIGHT: paths.WASM,
            "tailweight_native": paths.NATIVE}
TRACKED = "wasmcustom.tailweight.endpoints_tracked"
ENVOY_CORE, LOAD_CORE = 1, 0
# Started once per section; the minimal config's cluster names this endpoint, never contacted.
UNUSED_BACKEND = startup.UNUSED_BACKEND


@dataclass(frozen=True)
class Settings:
    starts: int  # per variant and concurrency
    memory_starts: int  # idle RSS: Envoys started per variant
    idle_late_s: float  # the second idle RSS sample, seconds after /ready
    released_late_s: float  # idle RSS of an Envoy releasing free heap pages, seconds after /ready
    fleet_clusters: int
    fleet_endpoints: int
    fleet_qps: float
    fleet_connections: int
    fleet_seconds: float
    fleet_idle_timeout_s: float
    rounds: int
    seconds: float  # per variant, round and configuration
    warmup_s: float
    qps: float
    connections: int
    payload: int
    grpc_connections: int
    grpc_streams: int
    light_rates: tuple[float, ...]
    light_seconds: float
    light_rounds: int  # the rates' steps, repeated (each round every rate once, in order)
    flat_minutes: float
    flat_rps: float
    sidecar_rates: tuple[float, ...] = (10, 50, 150, 1000)
    sidecar_seconds: float = 20  # per round at rates loading every variant at once
    sidecar_rounds: int = 5
    sidecar_connections: int = 16
    instruction_requests: int = 200  # 0: skip section 6
    instruction_idle_s: float = 15
    instruction_probes: bool = True  # the ABI's price list (harness.overhead_probes)
    concurrencies: tuple[int, ...] = (1, 2)


FULL = Settings(starts=7, memory_starts=3, idle_late_s=10, released_late_s=90, fleet_clusters=64,
                fleet_endpoints=1000, fleet_qps=3000, fleet_connections=96, fleet_seconds=150, fleet_idle_timeout_s=1.0,
                rounds=10, seconds=6, warmup_s=5, qps=1000, connections=16, payload=1024,
                grpc_connections=2, grpc_streams=8, light_rates=(0, 1, 10, 100, 1000), light_seconds=20, light_rounds=5,
                flat_minutes=0, flat_rps=10)
QUICK = dataclasses.replace(FULL, starts=1, memory_starts=1, released_late_s=12, fleet_clusters=4,
                            fleet_endpoints=50, fleet_qps=200, fleet_connections=8, fleet_seconds=6, rounds=2,
                            seconds=1, warmup_s=0.5, light_seconds=2, light_rounds=1, sidecar_seconds=2,
                            sidecar_rounds=1, instruction_requests=0)


def log(text: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


rotated = startup.rotated


def fortio_run(group: ProcGroup, name: str, target: str, qps: float, connections: int, seconds: float,
               out: Path, payload: int = 0, grpc_streams: int = 0) -> Proc:
    """Fortio pinned to the load core; gRPC ping load (`grpc_streams` streams per connection) when
    `grpc_streams` > 0, else HTTP/1.1 (to `target`, a URL)."""
    argv = fortio.load_argv(target, qps, connections, seconds, out, payload_bytes=payload)
    if grpc_streams:
        argv[2:2] = ["-grpc", "-ping", "-s", str(grpc_streams)]  # after `fortio load`
    return group.start(name, [*measure.pin_prefix(LOAD_CORE), *argv])


def finish(proc: Proc, seconds: float, out: Path) -> dict:
    proc.popen.wait(seconds + 120)
    return fortio.read(out)


def counts(result: dict) -> tuple[int, int]:
    """(calls, failed calls) of an HTTP or a gRPC ping run (gRPC's good answers count as "OK")."""
    total, _ = fortio.counts(result)
    codes = result.get("RetCodes") or {}
    ok = int(codes.get("200", 0)) + int(codes.get("OK", 0)) + int(codes.get("SERVING", 0))
    return total, total - ok


# ---- 2. memory -------------------------------------------------------------------------------------


def section_idle_memory(group: ProcGroup, variants: dict, s: Settings) -> dict:
    """Each repetition starts every variant twice (Envoys side by side do not change each other's
    RSS): with the benchmark's bootstrap, reading RSS 1 s and `idle_late_s` after /ready, and with
    the chart's sidecar bootstrap override (Envoy releasing free heap pages), reading RSS
    `released_late_s` after /ready (tcmalloc releases nothing while its heap peaked within a minute)."""
    samples: dict[str, list[dict]] = {v: [] for v in variants}
    cfg = {v: configs.client(w, [UNUSED_BACKEND]) for v, w in variants.items()}
    for rep in range(s.memory_starts):
        running, releasing = [], []
        for v in rotated(variants, rep):
            e = envoy.start(group, f"idle-{v}-{rep}", configs.render(cfg[v]), concurrency=2)
            ready = time.monotonic()
            measure.wait_until(ready + 1.0)
            running.append((v, e, ready, measure.rss_bytes(e.proc.pid)))
            r = envoy.start(group, f"idle-released-{v}-{rep}",
                            configs.render(configs.with_sidecar_bootstrap_override(cfg[v])), concurrency=2)
            releasing.append((v, r, time.monotonic()))
        for v, e, ready, rss_1s in running:
            measure.wait_until(ready + s.idle_late_s)
            samples[v].append({"rss_1s_mib": rss_1s / measure.MIB,
                               "rss_late_mib": measure.rss_bytes(e.proc.pid) / measure.MIB,
                               **heap_mib(e)})
            e.proc.stop()
        for v, r, ready in releasing:
            measure.wait_until(ready + s.released_late_s)
            sample = samples[v][-1]
            sample["rss_released_mib"] = measure.rss_bytes(r.proc.pid) / measure.MIB
            sample.update({f"released_{k}": x for k, x in heap_mib(r).items()})
            r.proc.stop()
        log(f"idle memory {rep + 1}/{s.memory_starts}: " + ", ".join(
            f"{v} {samples[v][-1]['rss_late_mib']:.1f} MiB (releasing {samples[v][-1]['rss_released_mib']:.1f})"
            for v in variants))
    return samples


def heap_mib(e: envoy.Envoy) -> dict:
    """Envoy's own heap (tcmalloc, admin /memory) in MiB: what its objects hold (`allocated`), free
    pages it keeps mapped (`pageheap_free`: counted in RSS, e.g. what V8 freed after compiling the
    module) and its threads' caches."""
    m = requests.get(f"{e.admin}/memory", timeout=5).json()
    return {"heap_allocated_mib": int(m["allocated"]) / measure.MIB,
            "heap_free_mib": int(m["pageheap_free"]) / measure.MIB,
            "thread_caches_mib": int(m["total_thread_cache"]) / measure.MIB}


def views_list_all(url: str, cluster: str, endpoints: int) -> bool:
    body = requests.get(f"{url}/v1/weights", params={"cluster": cluster}, timeout=5).json()
    return any(len(c.get("endpoints", [])) >= endpoints for c in body.get("clusters", []))


def upstream_connections(stats: dict[str, int]) -> int:
    return sum(v for k, v in stats.items() if k.startswith("cluster.fleet_") and k.endswith(".upstream_cx_active"))


def section_fleet_memory(group: ProcGroup, variants: dict, s: Settings, tmp: Path) -> dict:
    """RSS after `fleet_seconds` of load over fleet_clusters x fleet_endpoints, each variant in
    turn, the aggregator and the synthetic reporter running throughout."""
    backends = emu.start(group, [emu.BackendSettings(workers=4, base_ms=0.5)] * s.fleet_endpoints,
                         name="fleet-emulator")
    # One synthetic reporter stands for the whole fleet: give its identity the whole book (by
    # default one principal may hold a quarter of it), and the book room for 64 x 1,000 endpoints
    # (the aggregator's own memory is not what this measures).
    agg = aggregator.start(group, "fleet-aggregator", args=["--identity=report", "--worker-threads", "1",
                                                            "--principal-share", "1", "--memory-limit-mib", "1024"])
    names = configs.fleet_cluster_names(s.fleet_clusters)
    addresses_file = tmp / "fleet-addresses.txt"
    addresses_file.write_text("\n".join(backends.addresses) + "\n")
    budget_s = len(variants) * (s.fleet_seconds + 300) + 120  # the reporter stops by itself after this
    reporter = group.start("fleet-reporter", [
        sys.executable, "-m", "harness.overhead_reporter", "--url", agg.url, "--clusters", ",".join(names),
        "--addresses-file", addresses_file, "--seconds", budget_s], env={"PYTHONPATH": str(paths.REPO / "e2e")})
    for p in (backends.proc, agg.proc, reporter):
        measure.pin(p.pid, LOAD_CORE)
    wait_for(lambda: views_list_all(agg.url, names[-1], s.fleet_endpoints), 60, "the aggregator's views", reporter)
    out = {}
    for v, wasm in variants.items():
        cfg = configs.render(configs.fleet(wasm, backends.addresses, s.fleet_clusters, agg.port,
                                           s.fleet_idle_timeout_s))
        started = time.monotonic()
        e = envoy.start(group, f"fleet-{v}", cfg, concurrency=2, ready_timeout_s=300,
                        command_prefix=measure.pin_prefix(ENVOY_CORE))
        ready_s = time.monotonic() - started
        rss_ready = measure.rss_bytes(e.proc.pid)
        result_path = tmp / f"fleet-{v}.json"
        load = fortio_run(group, f"fleet-load-{v}", e.url(), s.fleet_qps, s.fleet_connections, s.fleet_seconds,
                          result_path)
        series = []
        t0 = time.monotonic()
        while load.alive():
            stats = e.stats("wasmcustom.")
            series.append([round(time.monotonic() - t0), stats.get(TRACKED),
                           round(measure.rss_bytes(e.proc.pid) / measure.MIB, 1)])
            try:
                load.popen.wait(min(10.0, s.fleet_seconds / 4))
            except subprocess.TimeoutExpired:
                pass
        result = finish(load, s.fleet_seconds, result_path)
        stats = e.stats()
        requests_total, errors = counts(result)
        out[v] = {"ready_s": round(ready_s, 2), "rss_ready_mib": rss_ready / measure.MIB,
                  "rss_mib": measure.rss_bytes(e.proc.pid) / measure.MIB, "endpoints_tracked": stats.get(TRACKED),
                  "endpoints_tracked_max": max((x[1] for x in series if x[1] is not None), default=None),
                  "upstream_cx_active": upstream_connections(stats), "requests": requests_total, "errors": errors,
                  "series": series}
        e.proc.stop()
        log(f"fleet memory {v}: {out[v]['rss_mib']:.1f} MiB, tracked {out[v]['endpoints_tracked']}, "
            f"{requests_total} requests ({errors} errors)")
    reporter.stop()
    return out


# ---- 3. CPU per request ----------------------------------------------------------------------------


def section_cpu(group: ProcGroup, variants: dict, s: Settings, tmp: Path) -> tuple[dict, dict]:
    """Per (protocol, concurrency): each variant's samples, one per round. Returns the samples
    (JSON) and the Fortio results per configuration and variant (for merged percentiles)."""
    http = emu.start(group, [emu.BackendSettings(workers=64, base_ms=0.2, payload_bytes=s.payload)] * 3,
                     name="cpu-http-emulator")
    grpc = emu.start(group, [emu.BackendSettings(workers=64, base_ms=0.2, protocol="grpc")] * 3,
                     name="cpu-grpc-emulator")
    for b in (http, grpc):
        measure.pin(b.proc.pid, LOAD_CORE)
    envoys = {}
    for c in s.concurrencies:
        for v, wasm in variants.items():
            cfg = configs.render(configs.with_grpc(configs.client(wasm, http.addresses), grpc.addresses))
            envoys[c, v] = envoy.start(group, f"cpu-c{c}-{v}", cfg, concurrency=c,
                                       command_prefix=measure.pin_prefix(ENVOY_CORE))
    setups = [(proto, c) for c in s.concurrencies for proto in ("http", "grpc")]

    def target(proto: str, e: envoy.Envoy) -> str:
        return e.url() if proto == "http" else f"127.0.0.1:{e.port(configs.GRPC_LISTENER)}"

    def run(proto: str, c: int, v: str, name: str, seconds: float) -> tuple[dict, float, float]:
        """One Fortio run against variant `v`: its result, Envoy's CPU seconds over it from the
        threads' schedstat (ns), and from utime + stime (10 ms ticks; a cross-check)."""
        e = envoys[c, v]
        path = tmp / f"{name}.json"
        grpc_load = proto == "grpc"
        ns0, ticks0 = measure.thread_cpu_ns(e.proc.pid), cpu_seconds(e.proc.pid)
        load = fortio_run(group, name, target(proto, e), s.qps, s.grpc_connections if grpc_load else s.connections,
                          seconds, path, payload=0 if grpc_load else s.payload,
                          grpc_streams=s.grpc_streams if grpc_load else 0)
        result = finish(load, seconds, path)
        ns1, ticks1 = measure.thread_cpu_ns(e.proc.pid), cpu_seconds(e.proc.pid)
        return result, (ns1 - ns0) / 1e9, ticks1 - ticks0

    for proto, c in setups:  # warm-up: V8 tiers up, connections open
        for v in variants:
            run(proto, c, v, f"cpu-warm-{proto}-c{c}-{v}", s.warmup_s)
    samples = {f"{proto}_c{c}": {v: [] for v in variants} for proto, c in setups}
    results = {f"{proto}_c{c}": {v: [] for v in variants} for proto, c in setups}
    for r in range(s.rounds):
        for proto, c in setups:
            key = f"{proto}_c{c}"
            for v in rotated(variants, r):
                result, cpu_s, ticks_s = run(proto, c, v, f"cpu-{key}-{v}-r{r}", s.seconds)
                total, errors = counts(result)
                pct = fortio.client_percentiles(result)
                samples[key][v].append({"requests": total, "errors": errors,
                                        "cpu_us_per_request": cpu_s / max(total, 1) * 1e6,
                                        "ticks_us_per_request": ticks_s / max(total, 1) * 1e6,
                                        "p99_ms": pct.get("p99")})
                results[key][v].append(result)
            log(f"cpu round {r + 1}/{s.rounds} {key}: " + ", ".join(
                f"{v} {samples[key][v][-1]['cpu_us_per_request']:.1f} us" for v in variants))
    for e in envoys.values():
        e.proc.stop()
    return samples, results


# ---- 4. light load (and memory over time) ----------------------------------------------------------


def connections_for(rate: float) -> int:
    return 1 if rate <= 10 else 4 if rate <= 100 else 16


def section_light(group: ProcGroup, variants: dict, s: Settings, tmp: Path) -> tuple[list, list | None]:
    """Steps: idle (fresh), `light_rounds` rounds of every rate in order, idle again (endpoints
    still tracked); every variant's Envoy at once, so each step's figures are paired, and one more,
    tables.RELEASING: tailweight with the chart's sidecar bootstrap override (what Envoy's releasing free
    heap costs in CPU). Then, with --flat-minutes, RSS every 30 s under `flat_rps`."""
    backends = emu.start(group, [emu.BackendSettings(workers=16, base_ms=0.2, payload_bytes=s.payload)] * 3,
                         name="light-emulator")
    agg = aggregator.start(group, "light-aggregator", args=["--identity=report", "--worker-threads", "1"])
    for p in (backends.proc, agg.proc):
        measure.pin(p.pid, LOAD_CORE)
    bootstraps = {v: configs.client(w, backends.addresses, agg.port) for v, w in variants.items()}
    if tables.TAILWEIGHT in bootstraps:
        bootstraps[tables.RELEASING] = configs.with_sidecar_bootstrap_override(bootstraps[tables.TAILWEIGHT])
    envoys = {v: envoy.start(group, f"light-{v}", configs.render(cfg), concurrency=2,
                             command_prefix=measure.pin_prefix(ENVOY_CORE))
              for v, cfg in bootstraps.items()}
    rated = [(f"{r:g} rps", float(r), n) for n in range(s.light_rounds) for r in s.light_rates if r > 0]
    steps = [("idle", 0.0, None), *rated, ("idle after load", 0.0, None)]
    out = []
    for label, rate, round_number in steps:
        loads = {}
        cpu0 = {v: measure.thread_cpu_ns(e.proc.pid) for v, e in envoys.items()}
        t0 = time.monotonic()
        if rate > 0:
            tag = {v: f"light-{v}-{rate:g}-{round_number}" for v in envoys}
            loads = {v: fortio_run(group, tag[v], e.url(), rate, connections_for(rate), s.light_seconds,
                                   tmp / f"{tag[v]}.json", payload=s.payload)
                     for v, e in envoys.items()}
            results = {v: finish(p, s.light_seconds, tmp / f"{tag[v]}.json") for v, p in loads.items()}
        else:
            time.sleep(s.light_seconds)
            results = {}
        window = time.monotonic() - t0
        cpu1 = {v: measure.thread_cpu_ns(e.proc.pid) for v, e in envoys.items()}
        row = {"step": label, "rate": rate, "round": round_number, "seconds": round(window, 2), "variants": {}}
        for v in envoys:
            requests_total, errors = counts(results[v]) if v in results else (0, 0)
            row["variants"][v] = {"cpu_ms_per_s": (cpu1[v] - cpu0[v]) / 1e6 / window,
                                  "requests": requests_total, "errors": errors}
        out.append(row)
        log(f"light load {label}: " + ", ".join(f"{v} {row['variants'][v]['cpu_ms_per_s']:.2f} ms/s" for v in envoys))
    flat = None
    if s.flat_minutes > 0:
        flat = flat_memory(group, envoys, s, tmp)
    for e in envoys.values():
        e.proc.stop()
    return out, flat


def flat_memory(group: ProcGroup, envoys: dict, s: Settings, tmp: Path) -> list:
    """[seconds, {variant: RSS MiB}] every 30 s for flat_minutes under flat_rps per Envoy."""
    seconds = s.flat_minutes * 60
    loads = [fortio_run(group, f"flat-{v}", e.url(), s.flat_rps, 1, seconds, tmp / f"flat-{v}.json")
             for v, e in envoys.items()]
    t0 = time.monotonic()
    samples = []
    for i in range(int(seconds // 30) + 1):
        measure.wait_until(t0 + 30 * i)
        samples.append([30 * i, {v: round(measure.rss_bytes(e.proc.pid) / measure.MIB, 2) for v, e in envoys.items()}])
        log(f"flat memory {30 * i} s: " + ", ".join(f"{v} {m:.1f} MiB" for v, m in samples[-1][1].items()))
    for p, v in zip(loads, envoys, strict=True):
        finish(p, seconds, tmp / f"flat-{v}.json")
    return samples


# ---- the run -------------------------------------------------------------------------------------


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    version = subprocess.run([str(paths.envoy()), "--version"], capture_output=True, text=True, timeout=30).stdout
    commit = subprocess.run(["git", "-C", str(paths.REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True, timeout=30).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release(), "envoy": version.strip().rpartition("version: ")[2] or version.strip(),
            "commit": commit}


def run(out_dir: Path, variants: dict, s: Settings, quick: bool, sections: Callable[[str], bool],
        logs: Path | None = None) -> dict:
    load = measure.LoadSampler()
    started = time.monotonic()
    header = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(), "quick": quick,
              "settings": dataclasses.asdict(s),
              "variants": {v: {"path": str(w) if w else None, "bytes": w.stat().st_size if w else None}
                           for v, w in variants.items()}}
    results: dict = {"header": header}
    with tempfile.TemporaryDirectory(prefix="tw-overhead-") as tmp, ProcGroup(logs or Path(tmp) / "logs") as group:
        tmp = Path(tmp)
        if sections("startup"):
            results["startup"] = startup.section(group, variants, s, log)
        if sections("memory"):
            results["memory"] = {"idle": section_idle_memory(group, variants, s),
                                 "fleet": section_fleet_memory(group, variants, s, tmp)}
        if sections("cpu"):
            results["cpu"], fortio_results = section_cpu(group, variants, s, tmp)
            results["cpu_latency"] = {key: {v: fortio.summarise(rs) for v, rs in by_v.items()}
                                      for key, by_v in fortio_results.items()}
        if sections("light"):
            results["light"], results["flat"] = section_light(group, variants, s, tmp)
        with_floor = {**variants, tables.FLOOR: FLOOR_WASM} if FLOOR_WASM.is_file() else variants
        if sections("sidecar"):
            results["sidecar"] = sidecar.section(group, with_floor, s, tmp, log)
        if sections("instructions") and s.instruction_requests and instructions.available():
            results["instructions"] = instructions.section(group, with_floor, s, tmp, log)
    header["minutes"] = round((time.monotonic() - started) / 60, 1)
    header["load_average"] = load.stop()
    return write(out_dir, keep_earlier_sections(out_dir, results))


# The result keys of each section (the summary is recomputed from them).
SECTION_KEYS = {"startup": ("startup",), "memory": ("memory",), "cpu": ("cpu", "cpu_latency"),
                "light": ("light", "flat"), "sidecar": ("sidecar",), "instructions": ("instructions",)}


def keep_earlier_sections(out_dir: Path, results: dict) -> dict:
    """A run of some sections (--only) keeps the other sections' results of the run before it in
    `out_dir` (bench/results keeps the current result of each section; earlier ones are in git),
    and says in its notes which came from which run."""
    previous_path = out_dir / "overhead.json"
    measured = [name for name, keys in SECTION_KEYS.items() if any(k in results for k in keys)]
    if not previous_path.is_file() or len(measured) == len(SECTION_KEYS):
        return results
    previous = json.loads(previous_path.read_text())
    kept = []
    for name, keys in SECTION_KEYS.items():
        if name not in measured and any(k in previous for k in keys):
            results.update({k: previous[k] for k in keys if k in previous})
            kept.append(name)
    if kept:
        h = previous["header"]
        results["notes"] = [
            f"Sections measured in this run: {', '.join(measured)}. Kept from the run of {h['date']} (commit "
            f"{h['machine']['commit']}, its variants: {', '.join(h['variants'])}): {', '.join(kept)}.", "",
            *(line for line in previous.get("notes", []) if not line.startswith("Sections measured in this run:"))]
    return results


def write(out_dir: Path, results: dict) -> dict:
    results["summary"] = tables.summarise(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "overhead.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "overhead.md").write_text(tables.markdown(results))
    return results


SECTIONS = ("startup", "memory", "cpu", "light", "sidecar", "instructions")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help=f"default: {RESULTS} ({QUICK_RESULTS} with --quick)")
    ap.add_argument("--quick", action="store_true", help="a short smoke run (a couple of minutes)")
    ap.add_argument("--logs", type=Path, help="keep every process's log and config here (default: a temporary "
                                             "directory, removed at the end)")
    ap.add_argument("--rounds", type=int, help="CPU-per-request rounds")
    ap.add_argument("--seconds", type=float, help="load per variant, round and configuration")
    ap.add_argument("--starts", type=int, help="starts per variant and concurrency")
    ap.add_argument("--fleet-seconds", type=float, help="load in the 64 x 1,000 memory test, per variant")
    ap.add_argument("--flat-minutes", type=float, help="RSS every 30 s for this long under light load")
    ap.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=WASM",
                    help="an extra variant: a name and a proxy-wasm module")
    ap.add_argument("--rerender", action="store_true", help="rewrite the tables from --out's overhead.json")
    a = ap.parse_args(argv)
    a.out = a.out or (QUICK_RESULTS if a.quick else RESULTS)
    if a.rerender:
        print(tables.markdown(write(a.out, json.loads((a.out / "overhead.json").read_text()))))
        return
    s = QUICK if a.quick else FULL
    overrides = {"rounds": a.rounds, "seconds": a.seconds, "starts": a.starts, "fleet_seconds": a.fleet_seconds,
                 "flat_minutes": a.flat_minutes}
    s = dataclasses.replace(s, **{k: v for k, v in overrides.items() if v is not None})
    variants = dict(VARIANTS)
    for spec in a.variant:
        name, _, wasm = spec.partition("=")
        if not name or name in variants or not Path(wasm).is_file():
            ap.error(f"--variant {spec!r}: expected NAME=path/to/existing.wasm with a new NAME")
        variants[name] = Path(wasm).resolve()
    missing = [str(w) for w in variants.values() if w is not None and not w.is_file()]
    if missing:
        ap.error(f"missing modules: {', '.join(missing)} (make build empty-wasm)")
    print(tables.markdown(run(a.out, variants, s, a.quick, lambda name: not a.only or name in a.only, a.logs)))


if __name__ == "__main__":
    main()
