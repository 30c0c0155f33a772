"""Per-second work of a sidecar, counted: how often each of an Envoy's threads ran (schedstat's run
count, i.e. wake-ups), how often it slept by choice (voluntary context switches) and its CPU, by
thread kind, for least_request and each native variant side by side (section 5's client setting:
--concurrency 2, the seed's 15 emulated endpoints, the aggregator on, Fortio over 16 connections),
idle and at a few low rates. Counts move little on a shared machine where times move a lot, so a
change to what the module does per second shows in them first.

    PYTHONPATH=e2e python -m harness.overhead_wakeups --variant before=/tmp/a.so --variant after=b.so

Prints one markdown table (per second: runs / voluntary switches / CPU ms, per thread kind)."""
import argparse
import os
import subprocess
import time
from pathlib import Path

from harness import emulator as emu
from harness import fortio
from harness import overhead_configs as configs
from harness import overhead_instructions as instructions
from harness import overhead_measure as measure
from harness.overhead_sidecar import LEAST_REQUEST, SEED_SPEEDS
from tailweight_e2e import aggregator, envoy, envoy_configs, paths
from tailweight_e2e.procs import ProcGroup

KINDS = ("workers", "main", "module", "other")
# The native shell's own thread (native/src/ticker.rs), counted apart from Envoy's.
MODULE_THREAD = "tailweight-tick"


def thread_counts(pid: int) -> dict[str, list[int]]:
    """[CPU ns, runs, voluntary switches] per thread kind of the process's live threads."""
    out = {k: [0, 0, 0] for k in KINDS}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = Path(f"/proc/{pid}/task/{tid}")
        try:
            comm = (base / "comm").read_text().strip()
            ns, _, runs = (int(x) for x in (base / "schedstat").read_text().split()[:3])
            status = (base / "status").read_text()
        except (OSError, ValueError):
            continue
        voluntary = next((int(line.split()[1]) for line in status.splitlines()
                          if line.startswith("voluntary_ctxt_switches:")), 0)
        kind = ("workers" if comm.startswith("wrk:") else "main" if tid == str(pid)
                else "module" if comm == MODULE_THREAD else "other")
        for i, value in enumerate((ns, runs, voluntary)):
            out[kind][i] += value
    return out


def idle_instructions(group: ProcGroup, name: str, cfg: str, idle_s: float) -> dict[str, float]:
    """User-space instructions per idle second by object (callgrind, section 6's method): an Envoy
    that served `instructions.WARMUP_REQUESTS` requests (its workers then tick in full and report),
    counted over `idle_s` without requests."""
    out = group.log_dir / f"callgrind-idle-{name}"
    out.mkdir(parents=True, exist_ok=True)
    e = envoy.start(group, f"callgrind-idle-{name}", cfg, concurrency=2, ready_timeout_s=600,
                    command_prefix=["valgrind", "--tool=callgrind", "--smc-check=all",
                                    f"--callgrind-out-file={out}/cg"])
    subprocess.run([str(paths.fortio()), "load", "-qps", "0", "-c", "1", "-n", str(instructions.WARMUP_REQUESTS),
                    "-quiet", e.url()], check=True, capture_output=True, timeout=1800)
    control = ["callgrind_control", "-z", str(e.proc.pid)]
    subprocess.run(control, check=True, capture_output=True, timeout=300)
    time.sleep(idle_s)
    subprocess.run(["callgrind_control", "-d", "idle", str(e.proc.pid)], check=True, capture_output=True, timeout=300)
    e.proc.stop()
    dump = next(d for d in out.glob("cg.*") if "Trigger: dump idle" in d.read_text(errors="replace")[:4000])
    by_object = {k: v / idle_s for k, v in instructions.objects(dump).items()}
    return {"total": instructions.total(dump) / idle_s, **by_object}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", default=[], help="NAME=path/to/libtailweight_native.so")
    ap.add_argument("--rates", default="0,10,50,150", help="requests per second; 0 is idle")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--callgrind-idle-s", type=float, default=0,
                    help="instead: instructions per idle second under callgrind, over this many seconds")
    args = ap.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant)
    rates = [float(r) for r in args.rates.split(",")]
    rows = []
    with ProcGroup("overhead-wakeups") as group:
        backends = emu.start(group, [emu.BackendSettings(workers=64, base_ms=10, speed=x, jitter=0.2,
                                                         payload_bytes=1024) for x in SEED_SPEEDS])
        agg = aggregator.start(group, "wakeups-aggregator", args=["--identity=report", "--worker-threads", "1"])
        for p in (backends.proc, agg.proc):
            measure.pin(p.pid, 0)
        cfgs = {LEAST_REQUEST: envoy_configs.render_client_envoy(backends.addresses, "least_request")}
        for name, so in variants.items():
            cfgs[name] = configs.render(configs.client(Path(so), backends.addresses, agg.port))
        if args.callgrind_idle_s:
            print("| variant | instructions per idle second | by object |")
            print("| --- | ---: | --- |")
            for v, c in cfgs.items():
                counts = idle_instructions(group, v, c, args.callgrind_idle_s)
                objs = ", ".join(f"{k} {n:,.0f}" for k, n in sorted(counts.items()) if k != "total")
                print(f"| {v} | {counts['total']:,.0f} | {objs} |", flush=True)
            return
        for r in range(args.rounds):
            envoys = {v: envoy.start(group, f"wakeups-{v}-r{r}", c, concurrency=2,
                                     command_prefix=measure.pin_prefix(1)) for v, c in cfgs.items()}
            for rate in rates:
                before = {v: thread_counts(e.proc.pid) for v, e in envoys.items()}
                t0 = time.monotonic()
                if rate > 0:
                    procs = [group.start(f"wakeups-{rate:g}-{v}-r{r}", [*measure.pin_prefix(0), *fortio.load_argv(
                        e.url(), rate, 16, args.seconds, group.log_dir / f"wakeups-{rate:g}-{v}-r{r}.json")])
                        for v, e in envoys.items()]
                    for p in procs:
                        p.popen.wait(args.seconds + 60)
                else:
                    time.sleep(args.seconds)
                window = time.monotonic() - t0
                for v, e in envoys.items():
                    after = thread_counts(e.proc.pid)
                    rows.append((r, rate, v, {k: [(a - b) / window for a, b in zip(after[k], before[v][k], strict=True)]
                                              for k in KINDS}))
            for e in envoys.values():
                e.proc.stop()
    print("| round | rate | variant | " + " | ".join(f"{k}: runs / sleeps / CPU ms, per s" for k in KINDS) + " |")
    print("| ---: | ---: | --- |" + " ---: |" * len(KINDS))
    for r, rate, v, per_s in rows:
        cells = " | ".join(f"{c[1]:.1f} / {c[2]:.1f} / {c[0] / 1e6:.2f}" for c in (per_s[k] for k in KINDS))
        print(f"| {r + 1} | {rate:g} | {v} | {cells} |")


if __name__ == "__main__":
    main()
