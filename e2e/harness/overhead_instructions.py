"""Section 6 of `make bench-overhead`: instructions, counted by callgrind (valgrind) in a real Envoy:
noise-free, so a change of a few percent shows where CPU time on a shared machine cannot, and the
same on any day (this machine's speed moves CPU times by 2-3x from one hour to the next, and
start-up's "ms over the empty filter" with them). Beside the variants, the ABI's price list
(harness.overhead_probes): tiny modules that each do one thing per request.

Each variant's Envoy (--concurrency 2, V8 under valgrind's --smc-check=all) with the sidecar
section's config: instructions from exec to /ready (all threads: V8 compiles on background ones);
then 100 requests to warm up, counters zeroed, `requests` sequential requests (Fortio, one
keep-alive connection), counters dumped; then `idle_s` without requests, dumped again. User-space
instructions only (the kernel's share of a request, its socket calls, is the same for every
variant). tailweight runs with ticks 10 s apart here, so its per-request figure is its request path
alone; tailweight_ticking is the same module at the default sync interval, whose idle figure is
what its ticks cost an idle sidecar. Instructions by object: `envoy` (Envoy and V8's runtime),
`anon` (code in no file: what V8 generated, the module's functions and the call wrappers, and
~27k per request that Envoy runs there even without Wasm), libc.

Skipped when valgrind is not installed and in --quick runs (a start under valgrind takes a minute)."""
import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from harness import emulator as emu
from harness import overhead_configs as configs
from harness import overhead_probes as probes
from tailweight_e2e import aggregator, envoy, envoy_configs, paths
from tailweight_e2e.procs import ProcGroup

LEAST_REQUEST, NO_WASM, TAILWEIGHT, TICKING = "least_request", "no_wasm", "tailweight", "tailweight_ticking"
WARMUP_REQUESTS = 100
# No tick lands among the measured requests (their ~1 ms each become ~100 ms under valgrind).
NO_TICKS = {"sync_interval_ms": 10_000}
_OBJECT = re.compile(r"c?ob=\((\d+)\)(?: (.*))?")


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def objects(dump: Path) -> Counter:
    """Self instructions per object (the `ob=` of callgrind's format: names are given once, then
    referred to by number; a `calls=` line's next cost line is the call's inclusive cost, skipped)."""
    names: dict[str, str] = {}
    by_object: Counter = Counter()
    current, skip = "?", False
    for line in dump.read_text(errors="replace").splitlines():
        m = _OBJECT.match(line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                current = names.get(m.group(1), "?")
            continue
        if line.startswith("calls="):
            skip = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if skip:
                skip = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                by_object[_object_kind(current)] += int(parts[1])
    return by_object


def _object_kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return "envoy" if name == "envoy" else "anon" if name in ("???", "?") else "libc" if name.startswith(
        "libc.") else "other"


def total(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no totals line")


def bootstraps(variants: dict, backends: list[str], aggregator_port: int) -> dict[str, str]:
    out = {LEAST_REQUEST: envoy_configs.render_client_envoy(backends, "least_request")}
    for v, wasm in variants.items():
        if wasm is None or v != TAILWEIGHT:
            out[v] = configs.render(configs.client(wasm, backends, None if wasm is None else aggregator_port))
            continue
        for name, extra in ((TAILWEIGHT, NO_TICKS), (TICKING, {})):
            plugin = envoy_configs.plugin_config_for("tailweight", extra=extra)
            out[name] = envoy_configs.render_client_envoy(backends, "tailweight", wasm_path=wasm,
                                                          plugin_config=plugin, aggregator_port=aggregator_port)
    return out


def measure_one(group: ProcGroup, name: str, cfg: str, requests: int, idle_s: float, tmp: Path) -> dict:
    out = tmp / f"callgrind-{name}"
    out.mkdir(parents=True, exist_ok=True)
    e = envoy.start(group, f"callgrind-{name}", cfg, concurrency=2, ready_timeout_s=600,
                    command_prefix=["valgrind", "--tool=callgrind", "--smc-check=all",
                                    f"--callgrind-out-file={out}/cg"])
    pid = str(e.proc.pid)

    def run(n: int) -> None:
        subprocess.run([str(paths.fortio()), "load", "-qps", "0", "-c", "1", "-n", str(n), "-quiet", e.url()],
                       check=True, capture_output=True, timeout=1800)

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True, timeout=300)

    control("-d", "ready")
    run(WARMUP_REQUESTS)
    control("-z")
    run(requests)
    control("-d", "requests")
    time.sleep(idle_s)
    control("-d", "idle")
    e.proc.stop()
    dumps = {}
    for dump in out.glob("cg.*"):
        head = dump.read_text(errors="replace")[:4000]
        for label in ("ready", "requests", "idle"):
            if f"Trigger: dump {label}" in head:
                dumps[label] = dump
    by_object = objects(dumps["requests"])
    return {"to_ready": total(dumps["ready"]),
            "per_request": total(dumps["requests"]) / requests, "idle_per_s": total(dumps["idle"]) / idle_s,
            "per_request_by_object": {k: v / requests for k, v in by_object.items()}}


def section(group: ProcGroup, variants: dict, s, tmp: Path, log: Callable[[str], None]) -> dict:
    backends = emu.start(group, [emu.BackendSettings(workers=8, base_ms=1)] * 15, name="callgrind-emulator")
    agg = aggregator.start(group, "callgrind-aggregator", args=["--identity=report", "--worker-threads", "1"])
    out = {"requests": s.instruction_requests, "idle_s": s.instruction_idle_s, "variants": {}}
    cfgs = bootstraps(variants, backends.addresses, agg.port)
    if s.instruction_probes:
        for name, wasm in probes.build(tmp / "probes").items():
            cfgs[name] = configs.render(configs.client(wasm, backends.addresses))
    for v, cfg in cfgs.items():
        out["variants"][v] = measure_one(group, v, cfg, s.instruction_requests, s.instruction_idle_s, tmp)
        log(f"instructions {v}: {out['variants'][v]['per_request']:,.0f} per request, "
            f"{out['variants'][v]['idle_per_s']:,.0f} per idle second")
    return out


def markdown(r: dict) -> list[str]:
    rows = r["variants"]
    base = rows.get(LEAST_REQUEST, {}).get("per_request")
    idle_base = rows.get(NO_WASM, {}).get("idle_per_s")
    lines = [
        "## 6. Instructions per request (callgrind)",
        "",
        f"Envoy --concurrency 2 under callgrind, the sidecar section's configs: to /ready, then {r['requests']} "
        f"sequential requests after 100 to warm up, then {r['idle_s']:g} s idle; user-space instructions (see "
        "bench/overhead_instructions.py): one run, deterministic to about 1%. tailweight: ticks 10 s apart (its "
        "request path); tailweight_ticking: the default sync interval (its idle figure: what ticks cost).",
        "",
        "| variant | to /ready, M | over empty_wasm, M | instructions / request | over least_request "
        "| envoy / anon / libc | idle instructions / s | idle over no_wasm |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ready_base = rows.get("empty_wasm", {}).get("to_ready")
    for v, x in rows.items():
        o = x["per_request_by_object"]
        over = f"{x['per_request'] - base:+,.0f}" if base and v != LEAST_REQUEST else "–"
        idle_over = f"{x['idle_per_s'] - idle_base:+,.0f}" if idle_base and v != NO_WASM else "–"
        ready = x.get("to_ready")
        ready_over = f"{(ready - ready_base) / 1e6:+,.0f}" if ready and ready_base and v != "empty_wasm" else "–"
        lines.append(f"| {v} | {(ready or 0) / 1e6:,.0f} | {ready_over} | {x['per_request']:,.0f} | {over} "
                     f"| {o.get('envoy', 0):,.0f} / {o.get('anon', 0):,.0f} / {o.get('libc', 0):,.0f} "
                     f"| {x['idle_per_s']:,.0f} | {idle_over} |")
    prices = probes.price_list({v: x["per_request"] for v, x in rows.items()})
    if prices:
        lines += ["", "The ABI's price list (bench/overhead_probes.py: a module doing one thing per request; "
                  f"{probes.CALLS} calls of a host function per request, less the 1-callback module, "
                  f"/ {probes.CALLS}), "
                  "instructions: " + "; ".join(f"{k} {v:,.0f}" for k, v in prices.items()) + "."]
    return lines + [""]


if __name__ == "__main__":
    # A dump's totals by object, for a look at one file: python -m harness.overhead_instructions FILE
    import sys
    print(json.dumps(objects(Path(sys.argv[1])), indent=1))
