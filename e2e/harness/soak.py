"""make soak / make soak-short: tailweight (filter + aggregator through the report tap) in a mesh that
moves, for a long time at a constant modest rate, with memory and tracking watched.

The run is a PolicyRun of policy `tailweight` on a scenario built from a SoakPlan: client Envoys
configured like Istio sidecars (some with --concurrency 2), gRPC or HTTP/1.1 backends from one EDS
file, rolling updates (every backend replaced one by one, maxSurge 1: a new pod joins cold, then an
old one leaves and stops listening a few seconds later; new pods get new addresses, as pods get new
IPs), one backend failing for a while, and the aggregator SIGKILLed and restarted (on a new port:
the report tap forwards there, as a Service address outlives its pod). Every `sample_s` the soak
samples each Envoy's and the aggregator's RSS (/proc), each Envoy's filter and cluster stats, the
endpoints each Envoy's last report lists (report tap) against the live set, the aggregator's book
(/v1/weights) and the machine's load; soak_targets judges the samples, soak_report writes
results.json, results.md and the plots (docs/scenario.md, "Soak")."""
import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from tailweight_e2e import aggregator as aggregator_mod
from tailweight_e2e import paths
from tailweight_e2e.envoy_configs import CLUSTER
from tailweight_e2e.procs import Proc, ProcGroup

from . import runner, soak_report, soak_targets
from .scenario import Scenario, parse

# Filter and cluster stats kept per Envoy per sample (the filter's: every wasmcustom.tailweight.*).
WASM_PREFIX = "wasmcustom.tailweight."
ENVOY_KEYS = ("cluster.backends.upstream_rq_total", "cluster.backends.upstream_rq_retry",
              "cluster.backends.upstream_rq_retry_success", "cluster.backends.upstream_cx_connect_fail",
              "cluster.backends.upstream_cx_active", "cluster.backends.upstream_rq_active",
              "cluster.backends.membership_total", "http.ingress.downstream_rq_total",
              "http.ingress.downstream_rq_5xx", "http.ingress.downstream_cx_active")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class AggregatorKill:
    at_s: float  # SIGKILL at this second of the recorded part
    down_s: float  # restarted this long after


@dataclass(frozen=True)
class SoakPlan:
    name: str
    duration_s: float  # recorded part
    warmup_s: float
    sample_s: float  # RSS, stats, tracking and book sampled this often
    segment_s: float  # one Fortio run per client per segment (errors per segment)
    # Backends: `backends` serve at once; each rollout replaces all of them by new ones (new addresses).
    backends: int
    workers: int
    base_ms: float
    jitter: float
    cold_factor: float  # a new pod's service times start this much slower ...
    cold_s: float  # ... and warm up over this long
    protocol: str  # grpc | http
    # Clients: one Envoy each, worker threads from `concurrency` (entry i % len), one Fortio each.
    clients: int
    concurrency: tuple[int, ...]
    qps: float  # total, constant
    connections: int  # per client
    # Rolling updates: at each time, one backend replaced every `rollout_step_s`: the new pod joins,
    # the old one leaves `ready_s` later and stops listening `stop_after_s` after that.
    rollouts_at_s: tuple[float, ...]
    rollout_step_s: float
    ready_s: float
    stop_after_s: float
    fail_at_s: float  # one backend serving then answers with errors ...
    fail_for_s: float  # ... for this long (then `recover`)
    aggregator_kills: tuple[AggregatorKill, ...]
    endpoint_ttl_ms: int | None = None  # the filter's endpoint_ttl_ms; None: its default
    flat_from_s: float = soak_targets.FLAT_FROM_S  # memory judged from here (or this long after a restart)
    seed: int = 7

    @property
    def endpoint_ttl_s(self) -> float:
        return (self.endpoint_ttl_ms or soak_targets.FILTER_DEFAULT_TTL_MS) / 1000.0


# ~30 minutes: 7 rolling updates of 4 backends (32 addresses in all), a backend failing for 90 s
# between the first two, the aggregator killed during the third rollout and again between rollouts.
FULL = SoakPlan(
    name="soak", duration_s=1800, warmup_s=30, sample_s=15, segment_s=60,
    backends=4, workers=4, base_ms=20, jitter=0.3, cold_factor=3, cold_s=30, protocol="grpc",
    clients=4, concurrency=(2, 2, 1, 1), qps=200, connections=4,
    rollouts_at_s=(120, 360, 600, 840, 1080, 1320, 1560), rollout_step_s=15, ready_s=5, stop_after_s=3,
    fail_at_s=220, fail_for_s=90,
    aggregator_kills=(AggregatorKill(630, 30), AggregatorKill(960, 30)),
)
# ~2 minutes, the same events compressed, and a 10 s endpoint ttl so left endpoints are forgotten
# (by the filters and the book) well within the run. Too short to judge memory flatness.
SHORT = SoakPlan(
    name="soak-short", duration_s=120, warmup_s=5, sample_s=5, segment_s=30,
    backends=3, workers=4, base_ms=20, jitter=0.3, cold_factor=3, cold_s=10, protocol="grpc",
    clients=4, concurrency=(2, 2, 1, 1), qps=120, connections=4,
    rollouts_at_s=(10, 60), rollout_step_s=6, ready_s=2, stop_after_s=1.5,
    fail_at_s=33, fail_for_s=15,
    aggregator_kills=(AggregatorKill(40, 8), AggregatorKill(66, 8)),
    endpoint_ttl_ms=10_000,
)
PLANS = {"full": FULL, "short": SHORT}


def rollout_events(plan: SoakPlan) -> list[dict]:
    """The scenario's events: every rollout's joins and leaves (backend k of the serving set
    replaced by the next fresh backend), then the failing backend's `fail` and `recover`: a backend
    that serves during the whole failure (ValueError if none does)."""
    members = list(range(plan.backends))
    fresh = plan.backends
    events = []
    serving: dict[int, tuple[float, float]] = dict.fromkeys(members, (0.0, plan.duration_s))  # joined, left
    for start in plan.rollouts_at_s:
        for k in range(plan.backends):
            at = start + k * plan.rollout_step_s
            old, new = members[k], fresh
            events.append({"at_s": at, "backends": [new], "action": "join"})
            events.append({"at_s": at + plan.ready_s, "backends": [old], "action": "leave",
                           "value": plan.stop_after_s})
            serving[old] = (serving[old][0], at + plan.ready_s)
            serving[new] = (at, plan.duration_s)
            members[k] = new
            fresh += 1
    end = plan.fail_at_s + plan.fail_for_s
    failing = [b for b, (joined, left) in sorted(serving.items()) if joined <= plan.fail_at_s and left > end]
    if not failing:
        raise ValueError(f"no backend serves from {plan.fail_at_s:g} s to {end:g} s (fail_at_s, fail_for_s)")
    events.append({"at_s": plan.fail_at_s, "backends": [failing[0]], "action": "fail"})
    events.append({"at_s": end, "backends": [failing[0]], "action": "recover"})
    return events


def scenario_of(plan: SoakPlan) -> Scenario:
    """The plan as a harness scenario (checked by scenario.parse like any scenario file)."""
    group = {"workers": plan.workers, "base_ms": plan.base_ms, "jitter": plan.jitter, "protocol": plan.protocol}
    spares = plan.backends * len(plan.rollouts_at_s)
    backends = [{"count": plan.backends, **group}]
    if spares:
        backends.append({"count": spares, **group, "cold_factor": plan.cold_factor, "cold_s": plan.cold_s,
                         "absent": True})
    return parse({
        "name": plan.name, "seed": plan.seed, "warmup_s": plan.warmup_s, "duration_s": plan.duration_s,
        "backends": backends,
        "clients": {"count": plan.clients, "qps": plan.qps, "connections": plan.connections},
        "events": rollout_events(plan), "policies": ["tailweight"],
    })


def rss_mb(pid: int) -> float | None:
    """Resident set size (VmRSS of /proc/<pid>/status), MB; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICKS


def book_contents(url: str) -> dict | None:
    """The aggregator's book: the endpoints of cluster `backends` it publishes weights for, and its
    counts (reporters, clusters, endpoints, observations); None when it does not answer."""
    try:
        body = requests.get(f"{url}/v1/weights", timeout=2).json()
        endpoints = [e["address"] for c in body.get("clusters", []) if c.get("name") == CLUSTER
                     for e in c.get("endpoints", [])]
        return {"endpoints": sorted(endpoints), "counts": body.get("counts", {})}
    except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass
class KillRecord:
    plan: AggregatorKill
    killed_s: float | None = None
    restarted_s: float | None = None
    name: str | None = None  # the restarted aggregator's process name


@dataclass
class SoakState:
    samples: list[dict] = field(default_factory=list)
    processes: dict[str, Proc] = field(default_factory=dict)  # RSS watched, by name
    started_s: dict[str, float] = field(default_factory=dict)  # processes started during the recorded part
    stops: list[dict] = field(default_factory=list)  # backends stopped: requests there at that moment
    next_sample_s: float = 0.0
    t0: float | None = None  # monotonic start of the recorded part
    recording: runner.Recording | None = None  # the recorded part's (for the last sample)
    last_busy: tuple[float, float, float] | None = None  # (t, machine busy s, soak CPU s)


class SoakRun(runner.PolicyRun):
    """A PolicyRun (policy tailweight) that also samples RSS, stats, tracking and the book, kills
    and restarts the aggregator on the plan's schedule, and notes what was in flight at each
    backend when it stopped."""

    def __init__(self, plan: SoakPlan, out_dir: Path, log_dir: Path, progress: bool = True):
        opts = runner.Options(out_dir=out_dir, log_dir=log_dir, segment_s=plan.segment_s, progress=progress,
                              plugin_extra={"endpoint_ttl_ms": plan.endpoint_ttl_ms} if plan.endpoint_ttl_ms else {},
                              envoy_concurrency=plan.concurrency, run_name=plan.name, label="soak")
        super().__init__(scenario_of(plan), "tailweight", opts)
        self.plan = plan
        self.group: ProcGroup | None = None
        self.kills = [KillRecord(k) for k in plan.aggregator_kills]
        self.soak = SoakState()
        self.recording_now = False

    def start_control_plane(self, group: ProcGroup) -> None:
        self.group = group  # for the aggregator's restarts
        super().start_control_plane(group)

    def run_load(self, group, phase, segments, record):
        self.recording_now = record
        return super().run_load(group, phase, segments, record)

    def sample(self, recording: runner.Recording, now: float) -> None:
        super().sample(recording, now)
        if not self.recording_now:
            return
        if self.soak.t0 is None:
            self.soak.t0 = time.monotonic() - now
            self.soak.recording = recording
            self.soak.processes = {"emulator": self.emu.proc, "aggregator-1": self.aggregator.proc,
                                   **{f"envoy-{c.index}": c.envoy.proc for c in self.clients}}
        if now >= self.soak.next_sample_s:
            self.soak_sample(recording, now)
            self.soak.next_sample_s += self.plan.sample_s

    def soak_sample(self, recording: runner.Recording, now: float) -> None:
        """One sample: RSS of every process, each Envoy's stats and tracked endpoints, the live set,
        the aggregator's book, the machine's load."""
        s = self.soak
        tracked = self.tap.tracked(CLUSTER)
        envoys = []
        for c in self.clients:
            stats = c.envoy.stats("")
            entry = {"stats": {k.removeprefix(WASM_PREFIX): v for k, v in stats.items()
                               if k.startswith(WASM_PREFIX) or k in ENVOY_KEYS}}
            mine = tracked.get(f"client-{c.index}")
            if mine is not None:
                entry["tracked"] = mine["endpoints"]
                entry["report_age_s"] = mine["report_age_s"]
            envoys.append(entry)
        soak_cpu = sum(self.cpu.used().values()) + sum(os.times()[:2])
        busy = machine_busy_s()
        load = {"loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0])}
        if s.last_busy is not None:
            dt = now - s.last_busy[0]
            load["machine_cores"] = round((busy - s.last_busy[1]) / dt, 3)
            load["soak_cores"] = round((soak_cpu - s.last_busy[2]) / dt, 3)
        s.last_busy = (now, busy, soak_cpu)
        alive = self.aggregator.proc.alive()
        s.samples.append({
            "t": round(now, 2),
            "rss_mb": {name: round(v, 2) for name, p in s.processes.items() if p.alive()
                       and (v := rss_mb(p.pid)) is not None},
            "live": self.endpoints.member_addresses(),
            "envoys": envoys,
            "book": book_contents(self.aggregator.url) if alive else None,
            "aggregator_alive": alive,
            **load,
        })

    def fire_due_events(self, recording: runner.Recording, t0: float, now: float) -> None:
        """As PolicyRun's, noting first the requests in flight and queued at each backend about to
        stop (those a stop may cut)."""
        due = [p for p in recording.pending if p.at_s <= now and p.event.action == "stop"]
        if due:
            m = self.emu.metrics()
            for p in due:
                for b in p.event.backends:
                    self.soak.stops.append({
                        "backend": b, "address": self.emu.addresses[b], "at_s": round(now, 2), "cause": p.cause,
                        "in_flight": int(m.get("emulator_inflight", {}).get(b, 0)
                                         + m.get("emulator_queue_length", {}).get(b, 0))})
        super().fire_due_events(recording, t0, now)

    def watch_aggregator(self, recording: runner.Recording, now: float) -> None:
        """SIGKILL the aggregator at each kill's time; start a new one (port 0, an empty book) `down_s`
        later and point the report tap at it."""
        for n, k in enumerate(self.kills, start=2):
            if k.killed_s is None and now >= k.plan.at_s:
                self.aggregator.proc.kill()
                k.killed_s = round(now, 2)
                self.progress.update(f"[soak] {now:.0f} s: aggregator killed", force=True)
            elif k.killed_s is not None and k.restarted_s is None and now >= k.plan.at_s + k.plan.down_s:
                k.name = f"aggregator-{n}"
                self.aggregator = aggregator_mod.start(self.group, name=k.name, args=["--identity=report"])
                self.tap.forward_to(self.aggregator.port)
                self.cpu.track(k.name, self.aggregator.proc.pid, from_zero=True)
                self.soak.processes[k.name] = self.aggregator.proc
                k.restarted_s = round(now, 2)
                self.soak.started_s[k.name] = k.restarted_s
                self.progress.update(f"[soak] {now:.0f} s: aggregator restarted ({k.name})", force=True)

    def collect_stats(self) -> None:
        """A last sample with everything still running, the failing backend's error answers, then
        PolicyRun's end-of-run stats."""
        if self.soak.recording is not None:
            self.soak_sample(self.soak.recording, time.monotonic() - self.soak.t0)
        m = self.emu.metrics()
        self.result["backend_errors"] = {self.emu.addresses[b]: int(v)
                                         for b, v in m.get("emulator_errors_total", {}).items() if v}
        super().collect_stats()


def run(plan: SoakPlan, out_dir: Path, log_dir: Path, progress: bool = True) -> dict:
    """Run the soak; write results.json, results.md and the plots to `out_dir` (the whole PolicyRun
    result, 0.5 s samples included, to `log_dir`/run.json); return the results document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    soak = SoakRun(plan, out_dir, log_dir, progress)
    result = soak.run()
    (soak.log_dir / "run.json").write_text(json.dumps(result, default=str))
    doc = document(plan, result, soak, elapsed_s=time.monotonic() - started)
    soak_report.write(out_dir, doc)
    return doc


def document(plan: SoakPlan, result: dict, soak: SoakRun, elapsed_s: float) -> dict:
    """results.json: the plan, what happened (events, kills, stops), the samples, the requests and
    errors (per segment too), the final per-Envoy stats and the judged targets."""
    s = soak.soak
    protocol_errors = sum(result.get("backend_errors", {}).values()) if plan.protocol == "http" else 0
    allowed = soak_targets.allowed_failures(s.stops, protocol_errors)
    doc = {
        "plan": asdict(plan),
        "elapsed_s": round(elapsed_s, 1),
        "backends": result["backends"],
        "events": result["events"],
        "events_not_fired": result["events_not_fired"],
        "aggregator_kills": [{"at_s": k.killed_s, "restarted_s": k.restarted_s, "name": k.name} for k in soak.kills],
        "process_started_s": s.started_s,
        "stops": s.stops,
        "backend_errors": result.get("backend_errors", {}),
        "requests": result["requests"], "errors": result["errors"], "codes": result["codes"],
        "allowed_failures": allowed,
        "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "p99.9_ms": result["p99.9_ms"],
        "segments": [{k: seg[k] for k in ("name", "from_s", "to_s", "requests", "errors", "codes", "p99_ms")}
                     for seg in result.get("segments", [])],
        "cpu_s": result["cpu_s"],
        "envoy_stats": result["envoy_stats"],
        "live_endpoints": result["live_endpoints"],
        "left_at_s": result["left_at_s"],  # every endpoint that left the set, and when
        "samples": s.samples,
    }
    doc["targets"] = [asdict(t) for t in soak_targets.judge(doc)]
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="harness.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", choices=sorted(PLANS), default="full",
                    help="full: ~30 min (make soak); short: ~2 min (make soak-short, the e2e test's plan)")
    ap.add_argument("--out", help="results directory (default bench/results/<plan name>)")
    ap.add_argument("--logs", help="logs, configs, Fortio JSON, run.json (default bench/runs/<plan name>)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    ap.add_argument("--rerender", action="store_true",
                    help="no run: judge the targets again and rewrite results.md and the plots from <out>/results.json")
    args = ap.parse_args(argv)
    plan = PLANS[args.plan]
    out_dir = Path(args.out) if args.out else paths.REPO / "bench" / "results" / plan.name
    if args.rerender:
        doc = json.loads((out_dir / "results.json").read_text())
        doc["targets"] = [asdict(t) for t in soak_targets.judge(doc)]
        soak_report.write(out_dir, doc)
        return finish(out_dir, doc)
    for path in (paths.WASM, paths.RELEASE / "tailweight-aggregator", paths.RELEASE / "tailweight-emulator"):
        if not path.exists():
            print(f"soak: {path} is missing (make build)", file=sys.stderr)
            return 2
    log_dir = Path(args.logs) if args.logs else paths.REPO / "bench" / "runs" / plan.name
    return finish(out_dir, run(plan, out_dir, log_dir, progress=not args.quiet))


def finish(out_dir: Path, doc: dict) -> int:
    """Show results.md; exit status 1 when a judged target is not met."""
    print((out_dir / "results.md").read_text())
    missed = [t["name"] for t in doc["targets"] if t["met"] is False]
    if missed:
        print(f"soak: targets not met: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
