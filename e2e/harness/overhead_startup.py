"""Section 1 of `make bench-overhead`: what a sidecar pays to start. Envoy from spawn to /ready
answering 200 (polled every 5 ms), the variants' starts interleaved, in three settings:

- c1, c2: --concurrency 1 and 2 with both cores free (V8 compiles the module on two threads, so
  the wall time is about half the CPU time the compile takes);
- c2 on one core: --concurrency 2 confined to one core (taskset), as a sidecar starts on a busy
  node or under a CPU limit: the compile cannot run beside anything, so the wall time pays all of
  its CPU time. Comparing the two explains most of the spread between measures of "start to ready"
  taken at different times on a shared machine.

Per start: wall ms, Envoy's CPU ms and RSS at /ready (utime + stime; VmRSS: the memory the
issue's "RSS at ready" target counts), and the phases from Envoy's log at wasm:debug (module
compile: "Base Wasm created" to the first "Thread-Local Wasm created")."""
import time
from collections.abc import Callable
from pathlib import Path

from harness import overhead_configs as configs
from harness import overhead_measure as measure
from harness.cpu import cpu_seconds
from tailweight_e2e import envoy
from tailweight_e2e.procs import ProcGroup

STARTUP_LOG = ["--component-log-level", "wasm:debug"]
# The minimal config's cluster names this endpoint, never contacted.
UNUSED_BACKEND = "127.0.0.1:9"
# The core a one-core start is confined to (the load core of the other sections: nothing runs
# there while start-ups are measured).
ONE_CORE = 0


def rotated(variants: dict, by: int) -> list[str]:
    """The variant names starting at the by-th: each round a different variant goes first."""
    names = list(variants)
    k = by % len(names)
    return names[k:] + names[:k]


def start_once(group: ProcGroup, name: str, wasm: Path | None, concurrency: int, one_core: bool = False) -> dict:
    cfg = configs.render(configs.client(wasm, [UNUSED_BACKEND]))
    prefix = measure.pin_prefix(ONE_CORE) if one_core else []
    started = time.monotonic()
    e = envoy.start(group, name, cfg, concurrency=concurrency, extra_args=STARTUP_LOG, poll_s=0.005,
                    command_prefix=prefix)
    wall_ms = (time.monotonic() - started) * 1e3
    cpu_ms = (cpu_seconds(e.proc.pid) or 0.0) * 1e3
    rss_mib = (measure.rss_bytes(e.proc.pid) or 0) / measure.MIB
    phases = measure.start_phases(e.log())
    e.proc.stop()
    return {"wall_ms": round(wall_ms, 1), "cpu_ms": round(cpu_ms, 1), "rss_mib": round(rss_mib, 2),
            **{k: (round(v, 1) if v is not None else None) for k, v in phases.items()}}


def settings_of(s) -> list[tuple[str, int, bool]]:
    """(key, concurrency, one core) of each setting measured."""
    out = [(f"c{c}", c, False) for c in s.concurrencies]
    if 2 in s.concurrencies:
        out.append(("c2_one_core", 2, True))  # on a one-core machine, the same as c2
    return out


def section(group: ProcGroup, variants: dict, s, log: Callable[[str], None]) -> dict:
    out = {}
    for key, c, one_core in settings_of(s):
        samples: dict[str, list[dict]] = {v: [] for v in variants}
        for i in range(s.starts):
            for v in rotated(variants, i):
                samples[v].append(start_once(group, f"start-{key}-{v}-{i}", variants[v], c, one_core))
            log(f"start-up {key} {i + 1}/{s.starts}: " + ", ".join(
                f"{v} {samples[v][-1]['wall_ms']:.0f} ms (cpu {samples[v][-1]['cpu_ms']:.0f})" for v in variants))
        out[key] = samples
    return out
