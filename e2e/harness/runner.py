"""Runs one policy of a scenario on real processes: the emulator (all backends), one Envoy per client
(--concurrency 1, configured like an Istio sidecar, endpoints from one file-based EDS resource) each
driven by its own Fortio, plus Prometheus and the operator controller, or the aggregator, as the
policy needs. Warm-up, then the recorded part with events (backends joining and leaving the endpoint
set among them); collects latency, errors, per-endpoint request series and CPU per process."""
import bisect
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tailweight_e2e import aggregator as aggregator_mod
from tailweight_e2e import envoy as envoy_mod
from tailweight_e2e import envoy_stats, paths
from tailweight_e2e.envoy_configs import (
    CLUSTER,
    LOCAL_APP_CLUSTER,
    REPORTING_POLICIES,
    plugin_config_for,
    render_client_envoy,
    render_server_envoy,
)
from tailweight_e2e.procs import Proc, ProcGroup, wait_exited
from tailweight_e2e.prometheus import Prometheus

from . import analysis, emulator, fortio, operator
from .cpu import cpu_seconds
from .membership import EndpointSet
from .report_tap import ReportTap
from .scenario import Event, Scenario, Segment

SAMPLE_S = analysis.SETTLE.sample_s
# The aggregator's flags under `tailweight_stamps` (the simulator's best configuration, sim/README.md,
# "Closing the gap"): ORCA votes no older than 1 s, the view's in-flight as qps x latency.
STAMPS_AGGREGATOR_ARGS = ("--orca-max-age-ms", "1000", "--view-inflight", "mean")


@dataclass
class Options:
    out_dir: Path
    log_dir: Path | None = None  # None: <out_dir>/logs; one sub-directory per policy
    warmup_s: float | None = None  # None: the scenario's
    duration_s: float | None = None
    operator_period_s: float = operator.PERIOD_S
    report_interval_ms: int = 1000
    kill_aggregator_at_s: float | None = None  # in the recorded part
    segment_s: float | None = None  # split the recorded part into Fortio runs of this length (percentiles each)
    plugin_extra: dict = field(default_factory=dict)
    progress: bool = True
    label: str = ""  # shown in the progress line, e.g. "2/6"
    retries: bool = True  # Istio's default route retry policy in the client Envoys
    run_name: str | None = None  # names the result entry and the log sub-directory (default: the policy)
    envoy_concurrency: tuple[int, ...] = (1,)  # worker threads of client i: entry i % len (Istio's default is 2)


class Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
        elif force or now - self._last >= 10:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
            self._last = now

    def done(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(("\r\033[K" if self.tty else "") + text + "\n")
            sys.stderr.flush()


def _rounded(value, digits: int, scale: float = 1.0) -> float | None:
    return None if value is None else round(float(value) / scale, digits)


def aggregator_view(url: str) -> dict[str, list] | None:
    """The aggregator's current view of cluster `backends`: {address: [weight, latency_ms, inflight,
    qps, capacity, target, service_ms, concurrency, backlog, method, ejected, error_ratio]} (None when
    it does not answer; the harness only watches, the filter decides). The tail is what the weight
    came from, to replay a run's decisions in a unit test."""
    try:
        body = requests.get(f"{url}/v1/weights", params={"cluster": "backends"}, timeout=1).json()
        out = {}
        for cluster in body.get("clusters", []):
            if cluster.get("name") == "backends":
                for e in cluster.get("endpoints", []):
                    out[e["address"]] = [round(float(e.get("weight", 0)), 3),
                                         round(float(e.get("latency_us", 0)) / 1e3, 2),
                                         round(float(e.get("inflight", 0)), 1),
                                         round(float(e.get("qps", 0)), 1),
                                         _rounded(e.get("capacity"), 1),
                                         round(float(e.get("target", 0)), 3),
                                         _rounded(e.get("service_time_us"), 1, 1e3),
                                         _rounded(e.get("concurrency"), 2),
                                         round(float(e.get("backlog", 0)), 1),
                                         str(e.get("method", "")),
                                         bool(e.get("ejected", False)),
                                         round(float(e.get("error_ratio", 0)), 3)]
        return out
    except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError):
        return None


class CpuTracker:
    """CPU seconds per process over the recorded part (last value read while the process existed)."""

    def __init__(self):
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.pids: dict[str, int] = {}

    def track(self, name: str, pid: int, from_zero: bool = False) -> None:
        self.pids[name] = pid
        value = 0.0 if from_zero else (cpu_seconds(pid) or 0.0)
        self.first[name] = value
        self.last[name] = value

    def sample(self) -> None:
        for name, pid in self.pids.items():
            value = cpu_seconds(pid)
            if value is not None:
                self.last[name] = value

    def used(self) -> dict[str, float]:
        return {name: round(self.last[name] - self.first[name], 3) for name in self.pids}


def backend_settings(scenario: Scenario, policy: str) -> list[emulator.BackendSettings]:
    stamping = scenario.stamping_backends and policy == "tailweight_stamps"
    return [emulator.BackendSettings(b.workers, b.base_ms, b.speed, b.jitter, b.payload_bytes, b.protocol,
                                     b.cold_factor, b.cold_s, b.absent, load_stamps=stamping)
            for b in scenario.backends]


# Events whose backends' share is worth following (joins and leaves change the set itself, and the
# stop that follows a leave hits a backend that no longer gets requests).
REACTION_ACTIONS = ("speed", "fail", "stop", "recover")
REACTION_FIRST_S = 1.0


def derive(result: dict) -> dict:
    """Shares, event reaction times and the shares right after each event from the recorded samples
    (also used to re-render old results)."""
    samples = result["samples"]
    # No shares (an empty dict) from fewer than two samples.
    result["share"] = dict(zip(result["backends"], analysis.overall_shares(samples), strict=False))
    times, shares = analysis.windowed_shares(samples, analysis.SETTLE.share_window_s)
    # The 1 s window's first reading wholly after an event ends 1 s after it, so it cannot report a
    # settle time below 1 s; windows of one sample period (0.5 s) can.
    half_times, half_shares = analysis.windowed_shares(samples, analysis.SETTLE.sample_s)
    reacting = [ev for ev in result["events"] if ev["action"] in REACTION_ACTIONS and not ev.get("cause")]
    result["settle"] = [
        {"backend": b, "action": ev["action"], "at_s": ev["fired_s"],
         **analysis.settle_time(times, [s[b] for s in shares], ev["fired_s"]),
         "settle_half_window_s": analysis.settle_time(half_times, [s[b] for s in half_shares],
                                                      ev["fired_s"])["settle_s"]}
        for ev in reacting for b in ev["backends"]]
    end_s = samples[-1][0] if samples else 0.0
    result["reaction"] = []
    for ev in reacting:
        for b in ev["backends"]:
            t = ev["fired_s"]
            # Until the next event on this backend, or the end.
            until = min([e["fired_s"] for e in result["events"] if e["fired_s"] > t and b in e["backends"]]
                        + [end_s])
            result["reaction"].append({
                "backend": b, "action": ev["action"], "at_s": t,
                "share_before": analysis.share_between(samples, b, t - analysis.SETTLE.before_window_s, t),
                "share_first_s": analysis.share_between(samples, b, t, t + REACTION_FIRST_S),
                "share_after": analysis.share_between(samples, b, t + REACTION_FIRST_S, until),
                "after_until_s": round(until, 3)})
    return result


def recorded_segments(duration_s: float, segment_s: float | None = None,
                      named: list[Segment] | None = None) -> list[tuple[str, float]]:
    """The recorded part as Fortio runs, (name, seconds) each: of `segment_s` (a remainder under 1 s
    is dropped), else the scenario's named segments (those starting before `duration_s`, which may be
    shorter than the scenario's), else one run named "run"."""
    if segment_s and segment_s < duration_s:
        n = int(duration_s // segment_s)
        rest = duration_s - n * segment_s
        lengths = [segment_s] * n + ([rest] if rest >= 1 else [])
        return [(f"run{k + 1}", x) for k, x in enumerate(lengths)]
    starts = [s for s in named or [] if s.from_s < duration_s]
    if len(starts) < 2:
        return [("run", duration_s)]
    ends = [s.from_s for s in starts[1:]] + [duration_s]
    return [(s.name, end - s.from_s) for s, end in zip(starts, ends, strict=True)]


@dataclass(order=True)
class Pending:
    """An event due at `at_s` of the recorded part: the scenario's, or the stop that follows a leave
    (`cause` says which leave)."""
    at_s: float
    order: int  # keeps equal times in the order they were scheduled
    event: Event = field(compare=False)
    cause: str | None = field(default=None, compare=False)


@dataclass
class Recording:
    """What the sampling loop sees during the recorded part."""
    pending: list[Pending]  # events not fired yet, in time order
    samples: list[analysis.Sample] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    aggregator_view: list[tuple] = field(default_factory=list)
    aggregator_killed_at_s: float | None = None
    left_at_s: dict[int, float] = field(default_factory=dict)  # backend -> when it left the endpoint set
    scheduled: int = 0  # events the run added (a leave's stop); they sort after equal-time scenario events


# The backends cluster's counters kept per Envoy (retries: Istio's policy at work).
ENVOY_CLUSTER_STATS = ("upstream_rq_total", "upstream_rq_5xx", "upstream_cx_connect_fail",
                       "upstream_rq_pending_overflow", "upstream_rq_timeout", "upstream_rq_retry",
                       "upstream_rq_retry_success", "upstream_rq_retry_overflow",
                       "upstream_cx_destroy_remote_with_active_rq")


def envoy_entry(e: envoy_mod.Envoy, cluster: str, stats_path: Path) -> dict:
    """An Envoy's /stats kept as text at `stats_path`; its ENVOY_CLUSTER_STATS of `cluster` and the
    filter's counters (wasmcustom.*) if it runs the filter."""
    text = envoy_stats.fetch(e.admin)
    stats_path.write_text(text)
    s = envoy_stats.parse(text, f"cluster.{cluster}.")
    entry = {k: s.get(f"cluster.{cluster}.{k}", 0) for k in ENVOY_CLUSTER_STATS}
    wasm = envoy_stats.parse(text, "wasmcustom.")
    if wasm:
        entry["wasmcustom"] = wasm
    return entry


@dataclass
class ClientEnvoy:
    """Client number `index`: its Envoy, in front of which its Fortio runs."""
    index: int
    envoy: envoy_mod.Envoy


class PolicyRun:
    """One policy of a scenario on real processes. run() takes the steps in order: start the
    backends and the endpoint set, start the policy's control plane, start the client Envoys, run
    the load (warm-up, then the recorded part with sampling and events), collect the stats,
    summarise."""

    def __init__(self, scenario: Scenario, policy: str, opts: Options):
        self.scenario = scenario
        self.policy = policy
        self.opts = opts
        self.name = opts.run_name or policy
        self.warmup_s = scenario.warmup_s if opts.warmup_s is None else opts.warmup_s
        self.duration_s = scenario.duration_s if opts.duration_s is None else opts.duration_s
        self.log_dir = Path(opts.log_dir or Path(opts.out_dir) / "logs") / self.name
        self.progress = Progress(opts.progress)
        self.cpu = CpuTracker()
        self.result: dict = {"policy": policy, "run": self.name, "retries": opts.retries,
                             "protocol": scenario.protocol, "warmup_s": self.warmup_s,
                             "duration_s": self.duration_s, "log_dir": str(self.log_dir)}
        self.emu: emulator.Emulator | None = None
        self.endpoints: EndpointSet | None = None
        self.controller: operator.Controller | None = None
        self.aggregator: aggregator_mod.Aggregator | None = None
        self.tap: ReportTap | None = None
        self.clients: list[ClientEnvoy] = []
        self.servers: list[envoy_mod.Envoy] = []

    def run(self) -> dict:
        """Every step, the processes stopped at the end (also on failure); the result entry."""
        segments = recorded_segments(self.duration_s, self.opts.segment_s, self.scenario.segments)
        try:
            with ProcGroup(self.log_dir) as group:
                self.start_backends(group)
                self.start_control_plane(group)
                self.start_client_envoys(group)
                if self.controller is not None:
                    self.controller.start()
                if self.warmup_s > 0:
                    self.run_load(group, "warmup", [("warmup", self.warmup_s)], record=False)
                for name, pid in list(self.cpu.pids.items()):
                    self.cpu.track(name, pid)  # CPU counts from the start of the recorded part
                by_segment = self.run_load(group, "run", segments, record=True)
                self.collect_stats()
        finally:
            if self.controller is not None:
                self.controller.stop()
            if self.tap is not None:
                self.tap.stop()
        return self.summarise(by_segment, segments)

    def start_backends(self, group: ProcGroup) -> None:
        """Every backend of the scenario in one emulator process (those declared absent bound but not
        listening), each behind its own sidecar with `server_sidecars`, and the endpoint set the
        client Envoys read: every backend not absent (its sidecar's address if it has one)."""
        self.emu = emulator.start(group, backend_settings(self.scenario, self.policy), seed=self.scenario.seed)
        self.cpu.track("emulator", self.emu.proc.pid)
        addresses = self.emu.addresses
        if self.scenario.server_sidecars:
            addresses = self.start_server_sidecars(group)
        self.result["backends"] = addresses
        self.endpoints = EndpointSet(self.log_dir / "eds" / "backends.yaml", addresses,
                                     [b.index for b in self.scenario.backends if not b.absent],
                                     join_weight=operator.join_weight() if self.policy == "operator" else 1)

    def start_server_sidecars(self, group: ProcGroup) -> list[str]:
        """One Envoy in front of each backend (as many workers as the first client's), writing load
        stamps under `tailweight_stamps` and a plain proxy otherwise; returns their addresses, in
        backend order."""
        stamping = self.policy == "tailweight_stamps"
        addresses = []
        for i, app in enumerate(self.emu.addresses):
            config = render_server_envoy(app, wasm_path=paths.WASM if stamping else None,
                                         node_id=f"server-{i}", protocol=self.scenario.protocol)
            e = envoy_mod.start(group, f"server-envoy-{i}", config, concurrency=self.opts.envoy_concurrency[0],
                                log_level="warn")
            self.servers.append(e)
            self.cpu.track(f"server-envoy-{i}", e.proc.pid)
            addresses.append(e.address())
        self.result["server_envoy_admin"] = [e.admin for e in self.servers]
        return addresses

    def start_control_plane(self, group: ProcGroup) -> None:
        """What decides weights besides the client Envoys: for `operator`, Prometheus scraping the
        emulator and the operator's controller writing the weights of the endpoint set (started with
        the load); for `tailweight`, the aggregator the filters report to, through a ReportTap that
        keeps each Envoy's last report. Other policies have none."""
        if self.policy == "operator":
            prom = Prometheus(group, [f"127.0.0.1:{self.emu.admin_port}"], self.log_dir / "prometheus", job="emulator")
            operator.wait_for_cpu(prom, self.emu.addresses)
            self.cpu.track("prometheus", prom.proc.pid)
            members = self.endpoints.member_addresses()
            capacity = {a: b.capacity_rps for a, b in zip(self.emu.addresses, self.scenario.backends, strict=True)
                        if a in members}
            initial = operator.converged_weights(capacity)
            self.controller = operator.Controller(self.endpoints, initial, lambda: operator.cpu_by_address(prom),
                                                  self.opts.operator_period_s,
                                                  log=lambda m: self.progress.update(m, force=True))
            self.result["operator"] = {"initial_weights": operator.integer_weights(initial),
                                       "period_s": self.opts.operator_period_s,
                                       "join_weight": operator.join_weight(),
                                       "start": "converged: weight proportional to capacity, scaled by "
                                                f"{operator.RULE.median_weight:g}/median"}
        elif self.policy in REPORTING_POLICIES:
            # Stamps move traffic, and capacity from stale ORCA votes would then drift (sim/README.md).
            # Meshless: each Envoy's report names its reporter, and nothing else could vouch for it.
            args = ["--identity=report", *(STAMPS_AGGREGATOR_ARGS if self.policy == "tailweight_stamps" else [])]
            self.aggregator = aggregator_mod.start(group, args=args)
            self.cpu.track("aggregator", self.aggregator.proc.pid)
            self.tap = ReportTap(self.aggregator.port).start()

    def start_client_envoys(self, group: ProcGroup) -> None:
        """One Envoy per client (--concurrency from opts.envoy_concurrency, 1 by default) running the
        policy, endpoints from the EDS file."""
        steering = self.policy.startswith("tailweight")
        for i in range(self.scenario.clients.count):
            config = render_client_envoy(
                [], self.policy,
                wasm_path=paths.WASM if steering else None, native_path=paths.NATIVE,
                plugin_config=plugin_config_for(self.policy, self.opts.report_interval_ms, self.opts.plugin_extra)
                if steering else None,
                aggregator_port=self.tap.port if self.tap else None, eds_path=self.endpoints.path,
                node_id=f"client-{i}", retries=self.opts.retries, protocol=self.scenario.protocol)
            concurrency = self.opts.envoy_concurrency[i % len(self.opts.envoy_concurrency)]
            e = envoy_mod.start(group, f"envoy-{i}", config, concurrency=concurrency, log_level="warn")
            self.clients.append(ClientEnvoy(i, e))
            self.cpu.track(f"envoy-{i}", e.proc.pid)
        self.result["envoy_admin"] = [c.envoy.admin for c in self.clients]

    def start_fortios(self, group: ProcGroup, phase: str, seconds: float, record: bool) -> list[tuple[Proc, Path]]:
        """One Fortio per client for `seconds` (gRPC pings over `streams` streams per connection when
        the backends speak gRPC); returns (process, JSON result path) pairs."""
        clients = self.scenario.clients
        grpc = self.scenario.protocol == "grpc"
        loads = []
        for c in self.clients:
            json_path = self.log_dir / f"fortio-{phase}-{c.index}.json"
            p = fortio.start_load(group, f"fortio-{phase}-{c.index}", c.envoy.address() if grpc else c.envoy.url(),
                                  clients.qps / clients.count, clients.connections, seconds, json_path,
                                  clients.payload_bytes, grpc_streams=clients.streams if grpc else None)
            loads.append((p, json_path))
            if record:
                self.cpu.track(f"fortio-{phase}-{c.index}", p.pid, from_zero=True)
        return loads

    def run_load(self, group: ProcGroup, phase: str, segments: list[tuple[str, float]],
                 record: bool) -> list[list[dict]]:
        """Fortio runs back to back (one per segment, each client), sampling every SAMPLE_S all
        along; when recording, also fires the scenario's events, watches (and maybe kills) the
        aggregator, and stores what it saw in the result. Returns each segment's client results."""
        seconds = sum(length for _, length in segments)
        names = [phase] if len(segments) == 1 else [f"{phase}-{name}" for name, _ in segments]
        segment_loads = [self.start_fortios(group, names[0], segments[0][1], record)]
        events = self.scenario.events if record else []
        recording = Recording(pending=[Pending(ev.at_s, k, ev) for k, ev in enumerate(events)], scheduled=len(events))
        t0 = time.monotonic()
        deadline = t0 + seconds + 30 * len(segments)
        while True:
            now = time.monotonic() - t0
            self.sample(recording, now)
            self.fire_due_events(recording, t0, now)
            if record:
                self.watch_aggregator(recording, now)
            if all(not p.alive() for p, _ in segment_loads[-1]):
                if len(segment_loads) == len(segments):
                    break
                k = len(segment_loads)
                segment_loads.append(self.start_fortios(group, names[k], segments[k][1], record))
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(f"fortio ({phase}) did not finish within {seconds + 30 * len(segments):.0f} s")
            self.show_progress(phase, recording.samples, now, seconds)
            # Until the next sample, or sooner when this segment's Fortios end: the next segment
            # then starts within milliseconds (one extra sample at the boundary), not up to SAMPLE_S.
            next_sample = t0 + (int((time.monotonic() - t0) / SAMPLE_S) + 1) * SAMPLE_S
            wait_exited([p for p, _ in segment_loads[-1]], next_sample)
        outs = [[read_fortio(p, json_path) for p, json_path in loads] for loads in segment_loads]
        if record:
            self.result["samples"] = [(round(t, 3), c) for t, c in recording.samples]
            self.result["events"] = recording.events
            self.result["events_not_fired"] = [{"at_s": p.at_s, "backends": p.event.backends,
                                                "action": p.event.action, "cause": p.cause}
                                               for p in recording.pending]
            self.result["ended_s"] = round(time.monotonic() - t0, 3)
            self.result["left_at_s"] = {self.result["backends"][b]: t for b, t in recording.left_at_s.items()}
            self.result["aggregator_killed_at_s"] = recording.aggregator_killed_at_s
            if self.aggregator is not None:
                self.result["aggregator_view"] = recording.aggregator_view
        return outs

    def sample(self, recording: Recording, now: float) -> None:
        """Requests served per backend so far, and every process's CPU time."""
        try:
            recording.samples.append((now, self.emu.requests_total()))
        except requests.RequestException as e:
            raise RuntimeError(f"emulator metrics failed: {e}\n{self.emu.proc.log()[-2000:]}") from e
        self.cpu.sample()  # before reaping, so a finished Fortio's CPU is still readable

    def fire_due_events(self, recording: Recording, t0: float, now: float) -> None:
        """Apply every event whose time has come. Most go to the emulator; `join` starts the
        backends listening (cold) and then adds them to the endpoint set; `leave` removes them from
        the set and schedules their `stop` `value` seconds later (a deleted pod that drains first)."""
        while recording.pending and recording.pending[0].at_s <= now:
            due = recording.pending.pop(0)
            ev = due.event
            if ev.action == "leave":
                self.endpoints.leave(ev.backends)
                stop = Event(ev.at_s + ev.value, ev.backends, "stop")
                recording.scheduled += 1
                bisect.insort(recording.pending, Pending(stop.at_s, recording.scheduled, stop,
                                                         cause=f"leave at {ev.at_s:g} s"))
            elif ev.action == "join":
                self.emu.event(ev.backends, "join")  # answers once the ports listen
                self.endpoints.join(ev.backends)
            else:
                self.emu.event(ev.backends, ev.action, ev.value)
            fired_s = round(time.monotonic() - t0, 3)
            if ev.action == "leave":
                recording.left_at_s.update(dict.fromkeys(ev.backends, fired_s))
            elif ev.action == "join":
                for b in ev.backends:
                    recording.left_at_s.pop(b, None)
            recording.events.append({"at_s": ev.at_s, "fired_s": fired_s, "backends": ev.backends,
                                     "action": ev.action, "value": ev.value,
                                     **({"cause": due.cause} if due.cause else {})})

    def watch_aggregator(self, recording: Recording, now: float) -> None:
        """Record the aggregator's view while it lives; kill it at opts.kill_aggregator_at_s."""
        agg = self.aggregator
        if agg is None:
            return
        if agg.proc.alive():
            view = aggregator_view(agg.url)
            if view is not None:
                recording.aggregator_view.append((round(now, 3), view))
        kill_at = self.opts.kill_aggregator_at_s
        if kill_at is not None and recording.aggregator_killed_at_s is None and now >= kill_at:
            agg.proc.kill()
            recording.aggregator_killed_at_s = round(now, 3)

    def show_progress(self, phase: str, samples: list[analysis.Sample], now: float, seconds: float) -> None:
        """The progress line: phase, seconds done, requests/s the backends served lately."""
        if len(samples) >= 2:
            (t_prev, c_prev), (_, c_now) = samples[-2], samples[-1]
            rps = (sum(c_now) - sum(c_prev)) / max(now - t_prev, 1e-3)
        else:
            rps = 0.0
        self.progress.update(f"[{self.opts.label} {self.name}] {phase} {min(now, seconds):5.1f}/{seconds:g} s  "
                             f"backends {rps:6.0f} rps")

    def collect_stats(self) -> None:
        """Stop the operator's controller (keeping its rounds) and read every Envoy's /stats,
        kept as text next to the logs (where `make demo` points newcomers) and summarised; for the
        tailweight policies, the filter's counters and which endpoints each Envoy tracks against
        the endpoint set at the end."""
        if self.controller is not None:
            self.controller.stop()
            self.result["operator"]["rounds"] = self.controller.rounds
            self.result["operator"]["errors"] = self.controller.errors
        live = self.endpoints.member_addresses()
        self.result["live_endpoints"] = live
        tracked = self.tap.tracked(CLUSTER) if self.tap is not None else {}
        envoy_stats = []
        for c in self.clients:
            e = c.envoy
            entry = envoy_entry(e, CLUSTER, self.log_dir / f"envoy-{c.index}.stats.txt")
            if self.aggregator is not None:  # the filter's reports to the aggregator
                a = e.stats("cluster.tailweight_aggregator.")
                entry["aggregator_calls"] = {k: a.get(f"cluster.tailweight_aggregator.{k}", 0) for k in
                                             ("upstream_rq_total", "upstream_rq_2xx", "upstream_cx_connect_fail")}
            mine = tracked.get(f"client-{c.index}")
            if mine is not None:
                entry["tracked"] = {**mine,
                                    "not_live": [a for a in mine["endpoints"] if a not in live],
                                    "live_not_tracked": [a for a in live if a not in mine["endpoints"]]}
            envoy_stats.append(entry)
        self.result["envoy_stats"] = envoy_stats
        if self.servers:
            self.result["server_envoy_stats"] = [
                envoy_entry(e, LOCAL_APP_CLUSTER, self.log_dir / f"server-envoy-{i}.stats.txt")
                for i, e in enumerate(self.servers)]

    def summarise(self, by_segment: list[list[dict]], segments: list[tuple[str, float]]) -> dict:
        """Latency and errors over all clients (and per segment), per-client figures, CPU per
        process and per request, then shares and settle times (derive)."""
        result = self.result
        clients = [c for seg in by_segment for c in seg]
        summary = fortio.summarise(clients)
        result.update(summary)
        if len(by_segment) > 1:
            starts = [sum(length for _, length in segments[:k]) for k in range(len(segments) + 1)]
            result["segments"] = [{"name": name, "from_s": starts[k], "to_s": starts[k + 1], **fortio.summarise(seg)}
                                  for k, ((name, _), seg) in enumerate(zip(segments, by_segment, strict=True))]
        result["clients"] = [{"qps": float(c.get("ActualQPS", 0.0)), "requests": fortio.counts(c)[0],
                              "errors": fortio.counts(c)[1], **fortio.client_percentiles(c)} for c in clients]
        used = self.cpu.used()
        result["cpu_s"] = used
        n = max(summary["requests"], 1)
        envoy_s = sum(v for k, v in used.items() if k.startswith("envoy-"))
        fortio_s = sum(v for k, v in used.items() if k.startswith("fortio-"))
        result["cpu_us_per_request"] = {
            "envoys": round(envoy_s / n * 1e6, 1), "fortio": round(fortio_s / n * 1e6, 1),
            "emulator": round(used.get("emulator", 0.0) / n * 1e6, 1),
            **({"server_envoys": round(sum(v for k, v in used.items() if k.startswith("server-envoy-")) / n * 1e6, 1)}
               if self.servers else {}),
            **({"aggregator": round(used["aggregator"] / n * 1e6, 1)} if "aggregator" in used else {}),
            **({"prometheus": round(used["prometheus"] / n * 1e6, 1)} if "prometheus" in used else {}),
        }
        result["cpu_cores"] = round(sum(used.values()) / self.duration_s, 3)
        derive(result)
        self.progress.done(f"[{self.opts.label} {self.name}] done: p50 {summary['p50_ms']:.1f} ms, "
                           f"p99 {summary['p99_ms']:.1f} ms, p99.9 {summary['p99.9_ms']:.1f} ms, "
                           f"errors {summary['errors']}/{summary['requests']}")
        return result


def read_fortio(p: Proc, json_path: Path) -> dict:
    """A finished Fortio's JSON result; a failed run is an error naming it, with its log."""
    if p.popen.wait(30) != 0 or not json_path.exists():
        raise RuntimeError(f"{p.name} failed ({p.popen.returncode}):\n{p.log()[-2000:]}")
    return fortio.read(json_path)


def run_policy(scenario: Scenario, policy: str, opts: Options) -> dict:
    """Run one policy of `scenario` (see PolicyRun) and return its entry of results.json."""
    return PolicyRun(scenario, policy, opts).run()
