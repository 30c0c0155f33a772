"""What `make bench-overhead` reads from a process and how it summarises samples: RSS, CPU time at
nanosecond resolution, CPU pinning of a running process, the load average while it runs, the
phases of an Envoy start from its log, and confidence intervals of medians."""
import math
import os
import re
import statistics
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

MIB = 1024 * 1024


def rss_bytes(pid: int) -> int | None:
    """Resident set size (VmRSS of /proc/<pid>/status), or None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def thread_cpu_ns(pid: int) -> int | None:
    """CPU time of the process's live threads, in ns (first field of /proc/<pid>/task/*/schedstat).

    Nanoseconds where utime + stime (harness.cpu) counts 10 ms ticks: an idle Envoy uses a few ms per
    second, so over 30 s the ticks would be as coarse as the difference measured. Threads that
    exited are not counted: use it across windows in which the process keeps its threads (Envoy
    after /ready)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread exited meanwhile
    return total


def cores() -> int:
    return len(os.sched_getaffinity(0))


def pin(pid: int, core: int) -> None:
    """Move every thread of a running process to `core` (threads it starts later inherit it), when
    there are two cores or more: what `taskset -a -p` does, for processes started by helpers that
    take no command prefix."""
    if cores() < 2:
        return
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:
            continue  # the thread exited meanwhile


def pin_prefix(core: int) -> list[str]:
    """taskset to `core` when there are two cores or more (else nothing)."""
    return ["taskset", "-c", str(core)] if cores() > 1 else []


class LoadSampler:
    """The 1-minute load average every `interval_s` while the benchmark runs (a background thread;
    stop() ends it). The machine is shared: the header says how busy it was."""

    def __init__(self, interval_s: float = 10.0):
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        self.samples.append(os.getloadavg()[0])
        s = self.samples
        return {"start": round(s[0], 2), "end": round(s[-1], 2), "min": round(min(s), 2),
                "median": round(statistics.median(s), 2), "max": round(max(s), 2), "samples": len(s)}


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\]")
# Envoy's log lines marking the phases of a start (with --component-log-level wasm:debug).
_PHASES = {
    "init": "initializing epoch 0",
    "base_wasm": "Base Wasm created",
    "thread_wasm": "Thread-Local Wasm created",
    "dispatch": "starting main dispatch loop",
}


def start_phases(log: str) -> dict[str, float | None]:
    """Milliseconds between the marks of an Envoy start, from its own log timestamps (ms resolution):
    `to_wasm_ms` from the first log line to the base Wasm VM's creation; `compile_ms` from there to
    the first thread-local VM (V8 compiles the module and runs its `_initialize` in between: at
    wasm:trace the base VM's `_initialize` shows up within 2 ms before it); `after_compile_ms` from
    there to the main dispatch loop. None where the log has no such line (no_wasm has no VMs)."""
    at: dict[str, datetime] = {}
    for line in log.splitlines():
        for key, text in _PHASES.items():
            if key not in at and text in line:
                m = _LOG_TIME.match(line)
                if m:
                    at[key] = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")

    def ms(a: str, b: str) -> float | None:
        return (at[b] - at[a]).total_seconds() * 1e3 if a in at and b in at else None

    return {"to_wasm_ms": ms("init", "base_wasm"), "compile_ms": ms("base_wasm", "thread_wasm"),
            "after_compile_ms": ms("thread_wasm", "dispatch"), "init_to_dispatch_ms": ms("init", "dispatch")}


def median_interval(values: Sequence[float], confidence: float = 0.90) -> dict:
    """The median of independent samples and a distribution-free confidence interval for it: the
    k-th smallest and k-th largest sample, with the largest k whose coverage
    1 - 2 P(Binomial(n, 1/2) < k) is at least `confidence` (k = 1, min..max, when no k reaches it;
    the coverage reached is returned either way). No assumption about the noise's shape: on a
    shared machine it is skewed (a burst of other work only ever adds time)."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    n = len(xs)
    if n == 0:
        return {"n": 0, "median": None, "low": None, "high": None, "coverage": None}
    best_k, best_coverage = 1, _coverage(n, 1)
    for k in range(2, n // 2 + 1):
        c = _coverage(n, k)
        if c < confidence:
            break
        best_k, best_coverage = k, c
    return {"n": n, "median": statistics.median(xs), "low": xs[best_k - 1], "high": xs[n - best_k],
            "coverage": round(best_coverage, 3)}


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n-k+1)) for n independent samples of a continuous distribution."""
    below = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return 1.0 - 2.0 * below


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> dict:
    """`a` minus `b` sample by sample (samples taken back to back, under the same load from the
    rest of the machine), with the median of the differences and its interval."""
    diffs = [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return {**median_interval(diffs), "all": [round(d, 3) for d in diffs]}


def ratios(a: Sequence[float | None], b: Sequence[float | None]) -> dict:
    """`a` / `b` sample by sample, with the median and its interval."""
    rs = [x / y for x, y in zip(a, b, strict=True) if x is not None and y]
    return {**median_interval(rs), "all": [round(r, 4) for r in rs]}


def wait_until(deadline: float) -> None:
    """Sleep until time.monotonic() reaches `deadline` (at once if it has)."""
    time.sleep(max(0.0, deadline - time.monotonic()))
