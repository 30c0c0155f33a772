"""Section 5 of `make bench-overhead`: Envoy CPU where the harness's client sidecars live. One client
Envoy per variant at --concurrency 2, 15 emulated endpoints with the seed's service times (10 ms x
fib ratios, so requests stay in flight), the aggregator on, Fortio at 10, 50, 150 and 1,000 rps
(16 connections, GET, 1 KiB answers). Variants:

- least_request: no filter, Envoy's least_request LB (the harness's baseline policy);
- no_wasm: no filter, the tailweight cluster config (override_host LB, least_request fallback, the
  override header stripped by an upstream filter): what the LB setup alone costs;
- empty_wasm (and every other module variant): that filter with the aggregator configured;
- tailweight_local: the tailweight module without the aggregator;
- tailweight_native: the native shell (libtailweight_native.so, a variant like the modules) with
  the aggregator, on the least_request cluster (it steers through the stream's upstream override
  host, no header).

Each round starts fresh Envoys (an Envoy's offset lasts its life: see `section`). Rates up to 150
rps load every variant at once (the rounds pair them in time, and the Envoys share a core as the
harness's do); 1,000 rps loads them one after the other in each round (all at once would
saturate the Envoys' core), the order rotating. CPU from the threads' schedstat
(ns), per thread kind (workers, main thread, the rest), so per-second work off the request path
shows where it runs. Over least_request: the median of the per-round differences [interval]."""
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from harness import emulator as emu
from harness import fortio
from harness import overhead_configs as configs
from harness import overhead_measure as measure
from harness.overhead_measure import median_interval
from tailweight_e2e import aggregator, envoy, envoy_configs
from tailweight_e2e.procs import ProcGroup

LEAST_REQUEST, NO_WASM, EMPTY, TAILWEIGHT, LOCAL = (
    "least_request", "no_wasm", "empty_wasm", "tailweight", "tailweight_local")
# The seed's backends (e2e/scenarios/seed-fib.yaml): service times 10 ms x these, 20% jitter.
SEED_SPEEDS = (1.0,) * 3 + (1.618,) * 2 + (2.618,) * 9 + (6.854,)
# Rates at or below this load every variant at once; faster ones one variant at a time.
TOGETHER_MAX_RPS = 150


def connections_for(rate: float, connections: int) -> int:
    """`connections` (the harness's 16 per client), and enough for `rate` at the slowest backends'
    ~70 ms: a connection carries one request at a time."""
    return max(connections, int(rate * 0.07))


def thread_kinds_ns(pid: int) -> dict[str, int]:
    """CPU ns of the process's live threads by kind: `workers` (Envoy's wrk:worker_N), `main` (the
    main thread, named after the binary), `other` (watchdogs, stats, V8's platform threads)."""
    out = {"workers": 0, "main": 0, "other": 0}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        kind = "workers" if comm.startswith("wrk:") else "main" if tid == str(pid) else "other"
        out[kind] += ns
    return out


def bootstraps(variants: dict, backends: list[str], aggregator_port: int) -> dict[str, str]:
    """Envoy configs by variant name, in the order the tables show them."""
    out = {LEAST_REQUEST: envoy_configs.render_client_envoy(backends, "least_request")}
    for v, wasm in variants.items():
        out[v] = configs.render(configs.client(wasm, backends, None if wasm is None else aggregator_port))
        if v == TAILWEIGHT:
            out[LOCAL] = configs.render(configs.client(wasm, backends))
    return out


def section(group: ProcGroup, variants: dict, s, tmp: Path, log: Callable[[str], None]) -> list[dict]:
    """Steps (one per round and rate): {rate, round, seconds per variant, variants: {name: {cpu_ns
    by thread kind, requests, errors, seconds}}}."""
    backends = emu.start(group, [emu.BackendSettings(workers=64, base_ms=10, speed=x, jitter=0.2, payload_bytes=1024)
                                 for x in SEED_SPEEDS], name="sidecar-emulator")
    agg = aggregator.start(group, "sidecar-aggregator", args=["--identity=report", "--worker-threads", "1"])
    for p in (backends.proc, agg.proc):
        measure.pin(p.pid, 0)
    cfgs = bootstraps(variants, backends.addresses, agg.port)
    names = list(cfgs)
    envoys: dict = {}

    def load(vs: list[str], rate: float, seconds: float, tag: str) -> dict:
        before = {v: thread_kinds_ns(envoys[v].proc.pid) for v in vs}
        t0 = time.monotonic()
        connections = connections_for(rate, s.sidecar_connections)
        procs = {v: group.start(f"{tag}-{v}", [*measure.pin_prefix(0), *fortio.load_argv(
            envoys[v].url(), rate, connections, seconds, tmp / f"{tag}-{v}.json")]) for v in vs}
        for p in procs.values():
            p.popen.wait(seconds + 120)
        window = time.monotonic() - t0
        out = {}
        for v in vs:
            after = thread_kinds_ns(envoys[v].proc.pid)
            total, errors = fortio.counts(fortio.read(tmp / f"{tag}-{v}.json"))
            out[v] = {"cpu_ns": {k: after[k] - before[v][k] for k in after}, "requests": total, "errors": errors,
                      "seconds": window}
        return out

    steps = []
    for r in range(s.sidecar_rounds):
        # Fresh Envoys every round, started in a rotating order: an Envoy keeps whatever offset its
        # process got (memory layout, which core's caches) for its whole life, which pairing rounds
        # of the same processes would not average out (two Envoys of one module differed by up to
        # ~45 us per request at 150 rps).
        for v in rotated(names, r):
            envoys[v] = envoy.start(group, f"sidecar-{v}-r{r}", cfgs[v], concurrency=2,
                                    command_prefix=measure.pin_prefix(1))
        load(names, 50, s.warmup_s, f"sidecar-warm-r{r}")  # connections open, views arrive
        for rate in s.sidecar_rates:
            if rate <= TOGETHER_MAX_RPS:
                cells = load(names, rate, s.sidecar_seconds, f"sidecar-{rate:g}-r{r}")
            else:
                cells = {}
                for v in rotated(names, r):
                    cells.update(load([v], rate, s.seconds, f"sidecar-{rate:g}-r{r}"))
            steps.append({"rate": rate, "round": r, "variants": cells})
            log(f"sidecar {rate:g} rps round {r + 1}/{s.sidecar_rounds}: " + ", ".join(
                f"{v} {per_request_us(c):.0f} us" for v, c in cells.items()))
        for e in envoys.values():
            e.proc.stop()
    return steps


def rotated(names: list[str], by: int) -> list[str]:
    k = by % len(names)
    return names[k:] + names[:k]


def cpu_ms_per_s(cell: dict) -> float:
    return sum(cell["cpu_ns"].values()) / 1e6 / cell["seconds"]


def per_request_us(cell: dict) -> float:
    return sum(cell["cpu_ns"].values()) / 1e3 / max(cell["requests"], 1)


def summarise(steps: list[dict]) -> list[dict]:
    """One row per rate: per variant the median CPU per request and per second, by thread kind too,
    and over least_request / no_wasm / the empty filter the median of the per-round differences."""
    rows = []
    for rate in dict.fromkeys(st["rate"] for st in steps):
        rounds = [st for st in steps if st["rate"] == rate]
        names = list(rounds[0]["variants"])
        row = {"rate": rate, "rounds": len(rounds), "variants": {}}
        for v in names:
            cells = [st["variants"][v] for st in rounds]
            cell = {"requests": sum(c["requests"] for c in cells), "errors": sum(c["errors"] for c in cells),
                    "rps": statistics.median(c["requests"] / c["seconds"] for c in cells),
                    "us_per_request": statistics.median(per_request_us(c) for c in cells),
                    "ms_per_s": statistics.median(cpu_ms_per_s(c) for c in cells),
                    "ms_per_s_by_kind": {k: statistics.median(c["cpu_ns"][k] / 1e6 / c["seconds"] for c in cells)
                                         for k in cells[0]["cpu_ns"]}}
            for base in (LEAST_REQUEST, NO_WASM, EMPTY):
                if base in names and base != v:
                    others = [st["variants"][base] for st in rounds]
                    cell[f"vs_{base}_us"] = median_interval(
                        [per_request_us(a) - per_request_us(b) for a, b in zip(cells, others, strict=True)])
                    cell[f"vs_{base}_ms_per_s"] = median_interval(
                        [cpu_ms_per_s(a) - cpu_ms_per_s(b) for a, b in zip(cells, others, strict=True)])
            row["variants"][v] = cell
        rows.append(row)
    return rows


def _ci(d: dict | None, digits: int) -> str:
    if not d or d.get("median") is None:
        return "–"
    return f"{d['median']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def markdown(rows: list[dict], s: dict) -> list[str]:
    lines = [
        "## 5. Where the harness's sidecars live",
        "",
        "One client Envoy per variant, --concurrency 2, 15 emulated endpoints with the seed's service times "
        f"(10 ms x 1 to 6.9, so requests stay in flight), the aggregator on (report interval 1 s), Fortio GETs over "
        f"{s['sidecar_connections']} connections (70 at 1,000 rps: one request at a time each). "
        f"{s['sidecar_rounds']} rounds, each with fresh Envoys (started in a rotating order); in each, rates up to "
        f"{TOGETHER_MAX_RPS} rps load every variant at once for {s['sidecar_seconds']:g} s (paired in time), "
        f"faster ones each variant in turn for {s['seconds']:g} s. least_request: no filter and Envoy's "
        "least_request LB; no_wasm: no filter, tailweight's cluster config (override_host + the upstream filter "
        "stripping its header); the wasm variants on that config. Over least_request: the median of the per-round "
        "differences [interval]; the decomposition: (b) no_wasm over least_request, (a) empty_wasm over no_wasm, "
        "(c) each module over empty_wasm. CPU by thread: workers / main thread / other threads, ms/s.",
        "",
        "| rate | variant | rps | CPU us/request | over least_request, us/request | over least_request, ms/s "
        "| over no_wasm, us | over empty_wasm, us | workers / main / other, ms/s | errors |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        for v, c in row["variants"].items():
            k = c["ms_per_s_by_kind"]
            lines.append(
                f"| {row['rate']:g} | {v} | {c['rps']:.1f} | {c['us_per_request']:.0f} "
                f"| {_ci(c.get('vs_least_request_us'), 1)} | {_ci(c.get('vs_least_request_ms_per_s'), 2)} "
                f"| {_ci(c.get('vs_no_wasm_us'), 1)} | {_ci(c.get('vs_empty_wasm_us'), 1)} "
                f"| {k['workers']:.1f} / {k['main']:.2f} / {k['other']:.2f} | {c['errors']} |")
    cov = next((c["vs_least_request_us"]["coverage"] for row in rows for c in row["variants"].values()
                if c.get("vs_least_request_us")), None)
    if cov is not None:
        lines += ["", f"Intervals cover the median with {cov * 100:.0f}% confidence."]
    return lines + [""]


def target_rows(rows: list[dict], subjects: list[str]) -> list[tuple[str, str, float, float | None, float | None,
                                                                       str]]:
    """(target key, variant, value, low, high, detail) for the section's targets: over least_request
    per request at 50 rps and faster (the worst rate), and per second at the slowest rate."""
    out = []
    by_rate = {row["rate"]: row for row in rows}
    for v in subjects:
        fast = [(rate, row["variants"][v]["vs_least_request_us"]) for rate, row in by_rate.items()
                if rate >= 50 and v in row["variants"] and row["variants"][v].get("vs_least_request_us")]
        if fast:
            rate, worst = max(fast, key=lambda x: x[1]["median"])
            out.append(("sidecar_cpu", v, worst["median"], worst["low"], worst["high"],
                        "the worst of " + ", ".join(f"{r:g} rps {d['median']:+.0f}" for r, d in fast)))
        slow = min(by_rate, default=None)
        cell = by_rate[slow]["variants"].get(v, {}) if slow is not None and slow < 50 else {}
        if cell.get("vs_least_request_ms_per_s"):
            d = cell["vs_least_request_ms_per_s"]
            out.append(("sidecar_slow", v, d["median"], d["low"], d["high"], f"at {slow:g} rps"))
    return out
