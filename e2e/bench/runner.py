"""Runs one policy of a scenario on real processes: the emulator (all backends), one Envoy per client
(--concurrency 1) each driven by its own Fortio, plus Prometheus and the operator controller, or the
aggregator, as the policy needs. Warm-up, then the recorded part with events; collects latency,
errors, per-endpoint request series and CPU per process."""
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tailweight_e2e import aggregator as aggregator_mod
from tailweight_e2e import envoy as envoy_mod
from tailweight_e2e import paths
from tailweight_e2e.envoy_configs import plugin_config_for, render_client_envoy
from tailweight_e2e.procs import ProcGroup
from tailweight_e2e.prometheus import Prometheus

from . import analysis, emulator, fortio, operator
from .cpu import cpu_seconds
from .scenario import Scenario

SAMPLE_S = 0.5


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


def aggregator_view(port: int) -> dict[str, list] | None:
    """The aggregator's current view of cluster `backends`: {address: [weight, latency_ms, inflight]}
    (None when it does not answer; the harness only watches, the filter decides)."""
    try:
        body = requests.get(f"http://127.0.0.1:{port}/v1/weights", params={"cluster": "backends"}, timeout=1).json()
        out = {}
        for cluster in body.get("clusters", []):
            if cluster.get("name") == "backends":
                for e in cluster.get("endpoints", []):
                    out[e["address"]] = [round(float(e.get("weight", 0)), 3),
                                         round(float(e.get("latency_us", 0)) / 1e3, 2),
                                         round(float(e.get("inflight", 0)), 1)]
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


def backend_settings(scenario: Scenario) -> list[emulator.BackendSettings]:
    return [emulator.BackendSettings(b.workers, b.base_ms, b.speed, b.jitter, b.payload_bytes)
            for b in scenario.backends]


def derive(result: dict) -> dict:
    """Shares and event reaction times from the recorded samples (also used to re-render old results)."""
    # No shares (an empty dict) from fewer than two samples.
    result["share"] = dict(zip(result["backends"], analysis.overall_shares(result["samples"]), strict=False))
    times, shares = analysis.windowed_shares(result["samples"], 1.0)
    result["settle"] = [
        {"backend": b, "action": ev["action"], "at_s": ev["fired_s"],
         **analysis.settle_time(times, [s[b] for s in shares], ev["fired_s"], final_window_s=10.0)}
        for ev in result["events"] for b in ev["backends"]]
    return result


def run_policy(scenario: Scenario, policy: str, opts: Options) -> dict:
    warmup_s = scenario.warmup_s if opts.warmup_s is None else opts.warmup_s
    duration_s = scenario.duration_s if opts.duration_s is None else opts.duration_s
    log_dir = Path(opts.log_dir or Path(opts.out_dir) / "logs") / policy
    progress = Progress(opts.progress)
    n_clients = scenario.clients.count
    per_client_qps = scenario.clients.qps / n_clients
    result: dict = {"policy": policy, "warmup_s": warmup_s, "duration_s": duration_s, "log_dir": str(log_dir)}

    with ProcGroup(log_dir) as group:
        emu = emulator.start(group, backend_settings(scenario), seed=scenario.seed)
        result["backends"] = emu.addresses
        cpu = CpuTracker()
        cpu.track("emulator", emu.proc.pid)
        controller = None
        aggregator = None
        aggregator_port = None
        eds_path = None
        if policy == "operator":
            prom = Prometheus(group, [f"127.0.0.1:{emu.admin_port}"], log_dir / "prometheus", job="emulator")
            operator.wait_for_cpu(prom, emu.addresses)
            cpu.track("prometheus", prom.proc.pid)
            capacity = {a: b.capacity_rps for a, b in zip(emu.addresses, scenario.backends, strict=True)}
            initial = operator.converged_weights(capacity)
            eds_path = log_dir / "eds" / "backends.yaml"
            eds_path.parent.mkdir(parents=True, exist_ok=True)
            controller = operator.Controller(eds_path, initial, lambda: operator.cpu_by_address(prom),
                                             opts.operator_period_s, log=lambda m: progress.update(m, force=True))
            result["operator"] = {"initial_weights": operator.integer_weights(initial),
                                  "period_s": opts.operator_period_s,
                                  "start": "converged: weight proportional to capacity, scaled by 350/median"}
        if policy == "tailweight":
            started = aggregator_mod.start(group)
            aggregator, aggregator_port = started.proc, started.port
            cpu.track("aggregator", aggregator.pid)

        envoys = []
        for i in range(n_clients):
            config = render_client_envoy(
                emu.addresses, policy,
                wasm_path=paths.WASM if policy.startswith("tailweight") else None,
                plugin_config=plugin_config_for(policy, opts.report_interval_ms, opts.plugin_extra)
                if policy.startswith("tailweight") else None,
                aggregator_port=aggregator_port, eds_path=eds_path, node_id=f"client-{i}")
            e = envoy_mod.start(group, f"envoy-{i}", config, log_level="warn")
            envoys.append((e, e.port()))
            cpu.track(f"envoy-{i}", e.proc.pid)
        result["envoy_admin"] = [e.admin for e, _ in envoys]
        if controller is not None:
            controller.start()

        def start_fortios(phase: str, seconds: float, record: bool) -> list:
            loads = []
            for i, (_, listen) in enumerate(envoys):
                json_path = log_dir / f"fortio-{phase}-{i}.json"
                p = fortio.start_load(group, f"fortio-{phase}-{i}", f"http://127.0.0.1:{listen}/", per_client_qps,
                                      scenario.clients.connections, seconds, json_path, scenario.clients.payload_bytes)
                loads.append((p, json_path))
                if record:
                    cpu.track(f"fortio-{phase}-{i}", p.pid, from_zero=True)
            return loads

        def run_load(phase: str, segments: list[float], record: bool) -> list[list[dict]]:
            """Fortio runs back to back (one per segment, each client), sampling all along; returns
            each segment's client results."""
            seconds = sum(segments)
            names = [phase] if len(segments) == 1 else [f"{phase}{k + 1}" for k in range(len(segments))]
            segment_loads = [start_fortios(names[0], segments[0], record)]
            t0 = time.monotonic()
            samples: list[analysis.Sample] = []
            events_done: list[dict] = []
            pending = list(scenario.events) if record else []
            killed_aggregator = None
            weights_seen: list[tuple] = []
            deadline = t0 + seconds + 30 * len(segments)
            while True:
                now = time.monotonic() - t0
                try:
                    samples.append((now, emu.requests_total()))
                except requests.RequestException as e:
                    raise RuntimeError(f"emulator metrics failed: {e}\n{emu.proc.log()[-2000:]}") from e
                cpu.sample()  # before reaping, so a finished Fortio's CPU is still readable
                while pending and pending[0].at_s <= now:
                    ev = pending.pop(0)
                    emu.event(ev.backends, ev.action, ev.value)
                    events_done.append({"at_s": ev.at_s, "fired_s": round(time.monotonic() - t0, 3),
                                        "backends": ev.backends, "action": ev.action, "value": ev.value})
                if record and aggregator is not None and aggregator.alive():
                    view = aggregator_view(aggregator_port)
                    if view is not None:
                        weights_seen.append((round(now, 3), view))
                if record and aggregator is not None and opts.kill_aggregator_at_s is not None \
                        and killed_aggregator is None and now >= opts.kill_aggregator_at_s:
                    aggregator.kill()
                    killed_aggregator = round(now, 3)
                if all(not p.alive() for p, _ in segment_loads[-1]):
                    if len(segment_loads) == len(segments):
                        break
                    k = len(segment_loads)
                    segment_loads.append(start_fortios(names[k], segments[k], record))
                    continue
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fortio ({phase}) did not finish within {seconds + 30 * len(segments):.0f} s")
                if len(samples) >= 2:
                    t_prev, c_prev = samples[-2]
                    rps = (sum(samples[-1][1]) - sum(c_prev)) / max(now - t_prev, 1e-3)
                else:
                    rps = 0.0
                progress.update(f"[{opts.label} {policy}] {phase} {min(now, seconds):5.1f}/{seconds:g} s  "
                                f"backends {rps:6.0f} rps")
                time.sleep(max(0.0, SAMPLE_S - ((time.monotonic() - t0) % SAMPLE_S)))
            outs = []
            for loads in segment_loads:
                outs.append([])
                for p, json_path in loads:
                    if p.popen.returncode != 0 or not json_path.exists():
                        raise RuntimeError(f"{p.name} failed ({p.popen.returncode}):\n{p.log()[-2000:]}")
                    outs[-1].append(fortio.read(json_path))
            if record:
                result["samples"] = [(round(t, 3), c) for t, c in samples]
                result["events"] = events_done
                result["aggregator_killed_at_s"] = killed_aggregator
                if aggregator is not None:
                    result["aggregator_view"] = weights_seen
            return outs

        if warmup_s > 0:
            run_load("warmup", [warmup_s], record=False)
        for name, pid in list(cpu.pids.items()):
            cpu.track(name, pid)  # CPU counts from the start of the recorded part
        segments = [duration_s]
        if opts.segment_s and opts.segment_s < duration_s:
            n = int(duration_s // opts.segment_s)
            rest = duration_s - n * opts.segment_s
            segments = [opts.segment_s] * n + ([rest] if rest >= 1 else [])
        by_segment = run_load("run", segments, record=True)
        clients = [c for seg in by_segment for c in seg]
        if controller is not None:
            controller.stop()
            result["operator"]["rounds"] = controller.rounds
            result["operator"]["errors"] = controller.errors
        # Per-Envoy /stats, kept next to the logs (where `make demo` points newcomers).
        envoy_stats = []
        for i, (e, _) in enumerate(envoys):
            text = requests.get(f"{e.admin}/stats", timeout=5).text
            (log_dir / f"envoy-{i}.stats.txt").write_text(text)
            s = e.stats("cluster.backends.")
            envoy_stats.append({k: s.get(f"cluster.backends.{k}", 0) for k in
                                ("upstream_rq_total", "upstream_rq_5xx", "upstream_cx_connect_fail",
                                 "upstream_rq_pending_overflow", "upstream_rq_timeout")})
            wasm = {k: v for k, v in e.stats("wasmcustom.").items()}
            if wasm:
                envoy_stats[-1]["wasmcustom"] = wasm
            if aggregator_port is not None:  # the filter's reports to the aggregator
                a = e.stats("cluster.tailweight_aggregator.")
                envoy_stats[-1]["aggregator_calls"] = {
                    k: a.get(f"cluster.tailweight_aggregator.{k}", 0)
                    for k in ("upstream_rq_total", "upstream_rq_2xx", "upstream_cx_connect_fail")}
        result["envoy_stats"] = envoy_stats

    summary = fortio.summarise(clients)
    result.update(summary)
    if len(by_segment) > 1:
        result["segments"] = [{"from_s": sum(segments[:k]), "to_s": sum(segments[:k + 1]), **fortio.summarise(seg)}
                              for k, seg in enumerate(by_segment)]
    result["clients"] = [{"qps": float(c.get("ActualQPS", 0.0)), "requests": fortio.counts(c)[0],
                          "errors": fortio.counts(c)[1], **fortio.client_percentiles(c)} for c in clients]
    used = cpu.used()
    result["cpu_s"] = used
    n = max(summary["requests"], 1)
    envoy_s = sum(v for k, v in used.items() if k.startswith("envoy-"))
    fortio_s = sum(v for k, v in used.items() if k.startswith("fortio-"))
    result["cpu_us_per_request"] = {
        "envoys": round(envoy_s / n * 1e6, 1), "fortio": round(fortio_s / n * 1e6, 1),
        "emulator": round(used.get("emulator", 0.0) / n * 1e6, 1),
        **({"aggregator": round(used["aggregator"] / n * 1e6, 1)} if "aggregator" in used else {}),
        **({"prometheus": round(used["prometheus"] / n * 1e6, 1)} if "prometheus" in used else {}),
    }
    result["cpu_cores"] = round(sum(used.values()) / duration_s, 3)
    derive(result)
    progress.done(f"[{opts.label} {policy}] done: p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms, "
                  f"p99.9 {summary['p99.9_ms']:.1f} ms, errors {summary['errors']}/{summary['requests']}")
    return result
