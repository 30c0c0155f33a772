"""Scenario files (docs/scenario.md): checked against the schema the simulator shares (one parser,
sim/src/scenario, through `tailweight-sim check`), then against what the harness can run, and
flattened into per-backend settings."""
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tailweight_e2e import paths
from tailweight_e2e.envoy_configs import POLICIES

SIM = "tailweight-sim"
MAX_CLIENTS = 64  # client Envoys, each with its own Fortio, on one machine
RETRIES = {True: (True,), False: (False,), "both": (True, False)}


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True)
class Backend:
    index: int
    workers: int
    base_ms: float
    speed: float
    jitter: float
    payload_bytes: int
    protocol: str = "http"
    cold_factor: float = 1.0
    cold_s: float = 0.0
    absent: bool = False  # not in the endpoint set (and not listening) until a `join` event

    @property
    def capacity_rps(self) -> float:
        """Requests per second at 100% utilisation: workers / mean service time."""
        return self.workers * 1000.0 / (self.base_ms * self.speed)


@dataclass(frozen=True)
class Clients:
    count: int
    qps: float
    connections: int
    payload_bytes: int = 0
    streams: int = 1  # gRPC streams per connection (Fortio -s)
    retries: tuple[bool, ...] = (True,)  # each policy runs once per entry: with / without Istio's retries


@dataclass(frozen=True)
class Event:
    at_s: float
    backends: list[int]
    action: str
    value: float | None = None


@dataclass(frozen=True)
class Segment:
    """A named part of the recorded part, from `from_s` to the next segment's start (or the end),
    measured by a Fortio run of its own."""
    name: str
    from_s: float


@dataclass
class Scenario:
    name: str
    seed: int
    warmup_s: float
    duration_s: float
    backends: list[Backend]
    clients: Clients
    events: list[Event]
    policies: list[str]
    sim: dict = field(default_factory=dict)
    path: Path | None = None
    segments: list[Segment] = field(default_factory=list)
    # Each backend behind its own sidecar (an Envoy in front of it, as in a mesh): the clients'
    # endpoints are the sidecars. Under `tailweight_stamps` the sidecars write load stamps.
    server_sidecars: bool = False
    # Under `tailweight_stamps` the backends write the load stamps themselves (the emulator's own
    # count of requests in service and queued, what a stamping sidecar in front of it would write):
    # the stand-in for a sidecar per backend where that many Envoys do not fit on the machine.
    stamping_backends: bool = False

    @property
    def capacity_rps(self) -> float:
        """Of the backends in the endpoint set at the start, warm."""
        return sum(b.capacity_rps for b in self.backends if not b.absent)

    @property
    def protocol(self) -> str:
        return self.backends[0].protocol


def check(source: Path | dict, policies: Sequence[str] | None = None) -> dict:
    """The scenario schema (docs/scenario.md), shared with the simulator: the file at `source` (or
    the mapping) checked by `tailweight-sim check` (sim/src/scenario), `policies` instead of the
    file's; the checked file as a mapping, defaults filled in and events in time order. A mistake is
    a ScenarioError of one line naming the field (and the file)."""
    argv = [str(paths.binary(SIM)), "check", "-" if isinstance(source, dict) else str(source)]
    if policies is not None:
        argv += ["--policies", ",".join(policies)]
    text = json.dumps(source) if isinstance(source, dict) else None
    out = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        message = out.stderr.strip().removeprefix(f"{SIM}: ").splitlines()[0]
        if text is not None:  # a place in JSON the caller never saw
            message = re.sub(r" at line \d+ column \d+$", "", message)
        raise ScenarioError(message)
    return json.loads(out.stdout)


def _harness_limits(doc: dict) -> None:
    """What the harness cannot run although the schema allows it (the simulator can)."""
    if doc["policies"] is None:
        raise ScenarioError("policies: the harness runs the policies a scenario lists (or --policies)")
    for p in doc["policies"]:
        if p not in POLICIES:
            raise ScenarioError(f"policies: {p} is the simulator's only (harness policies: {', '.join(POLICIES)})")
    if doc["clients"]["count"] > MAX_CLIENTS:
        raise ScenarioError(f"clients.count: the harness runs at most {MAX_CLIENTS} client Envoys, "
                            f"got {doc['clients']['count']} (sim.clients is the simulator's)")


def parse(data: dict, policies: Sequence[str] | None = None) -> Scenario:
    """A scenario the harness can run, from a mapping as a scenario file holds it."""
    return _scenario(check(data, policies), None)


def load(path, policies: Sequence[str] | None = None) -> Scenario:
    """The scenario file at `path` the harness can run, with `policies` instead of its own when given."""
    return _scenario(check(Path(path), policies), Path(path))


def _scenario(doc: dict, path: Path | None) -> Scenario:
    """The checked file flattened into per-backend settings, after the harness's own limits."""
    _harness_limits(doc)
    backends: list[Backend] = []
    for g in doc["backends"]:
        for _ in range(g["count"]):
            backends.append(Backend(
                index=len(backends), workers=g["workers"], base_ms=g["base_ms"], speed=g["speed"],
                jitter=g["jitter"], payload_bytes=g["payload_bytes"], protocol=g["protocol"],
                cold_factor=g["cold_factor"], cold_s=g["cold_s"], absent=g["absent"]))
    c = doc["clients"]
    clients = Clients(count=c["count"], qps=c["qps"], connections=c["connections"], payload_bytes=c["payload_bytes"],
                      streams=c["streams"] or 1, retries=RETRIES[c["retries"]])
    return Scenario(
        name=doc["name"], seed=doc["seed"], warmup_s=doc["warmup_s"], duration_s=doc["duration_s"],
        backends=backends, clients=clients,
        events=[Event(e["at_s"], e["backends"], e["action"], e["value"]) for e in doc["events"]],
        policies=list(doc["policies"]), sim=doc["sim"], path=path,
        segments=[Segment(seg["name"], seg["from_s"]) for seg in doc["segments"] or []],
        server_sidecars=doc["server_sidecars"], stamping_backends=doc["stamping_backends"],
    )
