"""Scenario files (docs/scenario.md): loaded, checked field by field (unknown keys are errors) and
flattened into per-backend settings."""
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tailweight_e2e.envoy_configs import POLICIES

ACTIONS = ("speed", "fail", "stop", "recover")


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


@dataclass(frozen=True)
class Event:
    at_s: float
    backends: list[int]
    action: str
    value: float | None = None


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

    @property
    def capacity_rps(self) -> float:
        return sum(b.capacity_rps for b in self.backends)


def _check_keys(where: str, data: dict, required: set, optional: set) -> None:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = set(data) - required - optional
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(required | optional)})")
    missing = required - set(data)
    if missing:
        raise ScenarioError(f"{where}: missing key(s) {sorted(missing)}")


def _number(where: str, value, lo: float, hi: float, integer: bool = False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        kind = "an integer" if integer else "a number"
        raise ScenarioError(f"{where}: expected {kind} in {lo}..{hi}, got {value!r}")
    return int(value) if integer else float(value)


def parse(data: dict, path: Path | None = None) -> Scenario:
    _check_keys("scenario", data, {"name", "backends", "clients", "duration_s", "policies"},
                {"seed", "warmup_s", "events", "sim"})
    name = data["name"]
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ "):
        raise ScenarioError(f"name: expected a non-empty word usable in file names, got {name!r}")
    if not isinstance(data["backends"], list) or not data["backends"]:
        raise ScenarioError("backends: expected a non-empty list of groups")
    backends: list[Backend] = []
    for g, group in enumerate(data["backends"]):
        where = f"backends[{g}]"
        _check_keys(where, group, {"count", "workers", "base_ms"}, {"speed", "jitter", "payload_bytes"})
        count = _number(f"{where}.count", group["count"], 1, 1000, integer=True)
        for _ in range(count):
            backends.append(Backend(
                index=len(backends),
                workers=_number(f"{where}.workers", group["workers"], 1, 10000, integer=True),
                base_ms=_number(f"{where}.base_ms", group["base_ms"], 0, 600000),
                speed=_number(f"{where}.speed", group.get("speed", 1.0), 0.001, 1000),
                jitter=_number(f"{where}.jitter", group.get("jitter", 0.0), 0, 3),
                payload_bytes=_number(f"{where}.payload_bytes", group.get("payload_bytes", 0), 0, 16 << 20,
                                      integer=True),
            ))
    c = data["clients"]
    _check_keys("clients", c, {"count", "qps", "connections"}, {"payload_bytes"})
    clients = Clients(
        count=_number("clients.count", c["count"], 1, 64, integer=True),
        qps=_number("clients.qps", c["qps"], 0.1, 1e6),
        connections=_number("clients.connections", c["connections"], 1, 10000, integer=True),
        payload_bytes=_number("clients.payload_bytes", c.get("payload_bytes", 0), 0, 16 << 20, integer=True),
    )
    duration_s = _number("duration_s", data["duration_s"], 1, 86400)
    events = []
    for e, ev in enumerate(data.get("events") or []):
        where = f"events[{e}]"
        _check_keys(where, ev, {"at_s", "backends", "action"}, {"value"})
        at_s = _number(f"{where}.at_s", ev["at_s"], 0, duration_s)
        if not isinstance(ev["backends"], list) or not ev["backends"]:
            raise ScenarioError(f"{where}.backends: expected a non-empty list of backend indices")
        idx = [_number(f"{where}.backends", i, 0, len(backends) - 1, integer=True) for i in ev["backends"]]
        if ev["action"] not in ACTIONS:
            raise ScenarioError(f"{where}.action: expected one of {list(ACTIONS)}, got {ev['action']!r}")
        value = None
        if ev["action"] == "speed":
            if "value" not in ev:
                raise ScenarioError(f"{where}: action speed needs value (the new multiplier)")
            value = _number(f"{where}.value", ev["value"], 0.001, 1000)
        elif "value" in ev:
            raise ScenarioError(f"{where}: action {ev['action']} takes no value")
        events.append(Event(at_s, idx, ev["action"], value))
    policies = data["policies"]
    if not isinstance(policies, list) or not policies:
        raise ScenarioError("policies: expected a non-empty list")
    for p in policies:
        if p not in POLICIES:
            raise ScenarioError(f"policies: unknown policy {p!r} (harness policies: {', '.join(POLICIES)})")
    sim = data.get("sim") or {}
    if not isinstance(sim, dict):
        raise ScenarioError("sim: expected a mapping")
    return Scenario(
        name=name,
        seed=_number("seed", data.get("seed", 1), 0, 2**63 - 1, integer=True),
        warmup_s=_number("warmup_s", data.get("warmup_s", 0), 0, 3600),
        duration_s=duration_s,
        backends=backends, clients=clients, events=sorted(events, key=lambda e: e.at_s),
        policies=list(policies), sim=sim, path=path,
    )


def load(path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    try:
        return parse(data, path)
    except ScenarioError as e:
        raise ScenarioError(f"{path}: {e}") from None
