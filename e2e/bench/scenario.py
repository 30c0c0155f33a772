"""Scenario files (docs/scenario.md): loaded, checked field by field (unknown keys are errors) and
flattened into per-backend settings."""
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tailweight_e2e.envoy_configs import POLICIES, PROTOCOLS

ACTIONS = ("speed", "fail", "stop", "recover", "join", "leave")
LEAVE_STOP_S = 3.0  # a leaving backend stops listening this long after it left the endpoint set
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


def _flag(data: dict, key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ScenarioError(f"{key}: expected true or false, got {value!r}")
    return value


def check_policies(policies, server_sidecars: bool, stamping_backends: bool = False) -> None:
    """A non-empty list of harness policies that can run with (or without) the destinations'
    sidecars and stamping backends; the scenario's own list or one given on the command line."""
    if not isinstance(policies, list) or not policies:
        raise ScenarioError("policies: expected a non-empty list")
    for p in policies:
        if p not in POLICIES:
            raise ScenarioError(f"policies: unknown policy {p!r} (harness policies: {', '.join(POLICIES)})")
    if "tailweight_stamps" in policies and not (server_sidecars or stamping_backends):
        raise ScenarioError("policies: tailweight_stamps needs server_sidecars: true (the destinations' sidecars "
                            "write the load stamps) or stamping_backends: true (the backends write them)")
    if "operator" in policies and server_sidecars:
        raise ScenarioError("policies: operator cannot run with server_sidecars: true (its weights are keyed by "
                            "the backends' own addresses)")


def parse(data: dict, path: Path | None = None) -> Scenario:
    _check_keys("scenario", data, {"name", "backends", "clients", "duration_s", "policies"},
                {"seed", "warmup_s", "events", "sim", "segments", "server_sidecars", "stamping_backends"})
    name = data["name"]
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ "):
        raise ScenarioError(f"name: expected a non-empty word usable in file names, got {name!r}")
    if not isinstance(data["backends"], list) or not data["backends"]:
        raise ScenarioError("backends: expected a non-empty list of groups")
    backends: list[Backend] = []
    for g, group in enumerate(data["backends"]):
        where = f"backends[{g}]"
        _check_keys(where, group, {"count", "workers", "base_ms"},
                    {"speed", "jitter", "payload_bytes", "protocol", "cold_factor", "cold_s", "absent"})
        count = _number(f"{where}.count", group["count"], 1, 1000, integer=True)
        protocol = group.get("protocol", "http")
        if protocol not in PROTOCOLS:
            raise ScenarioError(f"{where}.protocol: expected one of {list(PROTOCOLS)}, got {protocol!r}")
        if backends and protocol != backends[0].protocol:
            raise ScenarioError(f"{where}.protocol: {protocol} differs from backends[0]'s "
                                f"{backends[0].protocol} (the client Envoys speak one protocol to the backends)")
        absent = group.get("absent", False)
        if not isinstance(absent, bool):
            raise ScenarioError(f"{where}.absent: expected true or false, got {absent!r}")
        for _ in range(count):
            backends.append(Backend(
                index=len(backends),
                workers=_number(f"{where}.workers", group["workers"], 1, 10000, integer=True),
                base_ms=_number(f"{where}.base_ms", group["base_ms"], 0, 600000),
                speed=_number(f"{where}.speed", group.get("speed", 1.0), 0.001, 1000),
                jitter=_number(f"{where}.jitter", group.get("jitter", 0.0), 0, 3),
                payload_bytes=_number(f"{where}.payload_bytes", group.get("payload_bytes", 0), 0, 16 << 20,
                                      integer=True),
                protocol=protocol,
                cold_factor=_number(f"{where}.cold_factor", group.get("cold_factor", 1.0), 1, 1000),
                cold_s=_number(f"{where}.cold_s", group.get("cold_s", 0.0), 0, 3600),
                absent=absent,
            ))
    if all(b.absent for b in backends):
        raise ScenarioError("backends: every group is absent: true; the endpoint set must start with one backend")
    clients = _clients(data["clients"], backends[0].protocol)
    duration_s = _number("duration_s", data["duration_s"], 1, 86400)
    events = _events(data.get("events") or [], backends, duration_s)
    policies = data["policies"]
    server_sidecars, stamping_backends = (_flag(data, k) for k in ("server_sidecars", "stamping_backends"))
    if server_sidecars and stamping_backends:
        raise ScenarioError("stamping_backends: true cannot go with server_sidecars: true (the sidecars write "
                            "the stamps there)")
    if stamping_backends and any(b.protocol != "http" for b in backends):
        raise ScenarioError("stamping_backends: true needs HTTP backends (the emulator stamps HTTP responses only)")
    check_policies(policies, server_sidecars, stamping_backends)
    sim = data.get("sim") or {}
    if not isinstance(sim, dict):
        raise ScenarioError("sim: expected a mapping")
    return Scenario(
        name=name,
        seed=_number("seed", data.get("seed", 1), 0, 2**63 - 1, integer=True),
        warmup_s=_number("warmup_s", data.get("warmup_s", 0), 0, 3600),
        duration_s=duration_s,
        backends=backends, clients=clients, events=events,
        policies=list(policies), sim=sim, path=path,
        segments=_segments(data.get("segments"), duration_s),
        server_sidecars=server_sidecars,
        stamping_backends=stamping_backends,
    )


def _clients(c, protocol: str) -> Clients:
    _check_keys("clients", c, {"count", "qps", "connections"}, {"payload_bytes", "streams", "retries"})
    if "streams" in c and protocol != "grpc":
        raise ScenarioError("clients.streams: only for gRPC backends (Fortio's -s, streams per connection)")
    retries = c.get("retries", True)
    if not (isinstance(retries, bool) or retries == "both"):
        raise ScenarioError(f"clients.retries: expected true, false or both, got {retries!r}")
    return Clients(
        count=_number("clients.count", c["count"], 1, 64, integer=True),
        qps=_number("clients.qps", c["qps"], 0.1, 1e6),
        connections=_number("clients.connections", c["connections"], 1, 10000, integer=True),
        payload_bytes=_number("clients.payload_bytes", c.get("payload_bytes", 0), 0, 16 << 20, integer=True),
        streams=_number("clients.streams", c.get("streams", 1), 1, 1000, integer=True),
        retries=RETRIES[retries],
    )


def _event(where: str, ev, backends: list[Backend], duration_s: float) -> Event:
    _check_keys(where, ev, {"at_s", "backends", "action"}, {"value"})
    at_s = _number(f"{where}.at_s", ev["at_s"], 0, duration_s)
    if not isinstance(ev["backends"], list) or not ev["backends"]:
        raise ScenarioError(f"{where}.backends: expected a non-empty list of backend indices")
    idx = [_number(f"{where}.backends", i, 0, len(backends) - 1, integer=True) for i in ev["backends"]]
    action = ev["action"]
    if action not in ACTIONS:
        raise ScenarioError(f"{where}.action: expected one of {list(ACTIONS)}, got {action!r}")
    value = None
    if action == "speed":
        if "value" not in ev:
            raise ScenarioError(f"{where}: action speed needs value (the new multiplier)")
        value = _number(f"{where}.value", ev["value"], 0.001, 1000)
    elif action == "leave":
        value = _number(f"{where}.value", ev.get("value", LEAVE_STOP_S), 0, 3600)
    elif "value" in ev:
        raise ScenarioError(f"{where}: action {action} takes no value")
    return Event(at_s, idx, action, value)


def _events(raw, backends: list[Backend], duration_s: float) -> list[Event]:
    """The events in time order (file order among equal times), checked against the endpoint set
    they change: a join names a backend outside it (declared absent: true, or one that left and has
    stopped listening), a leave one inside it, and no leave empties it."""
    if not isinstance(raw, list):
        raise ScenarioError("events: expected a list")
    numbered = sorted(((_event(f"events[{e}]", ev, backends, duration_s), e) for e, ev in enumerate(raw)),
                      key=lambda pair: (pair[0].at_s, pair[1]))
    members = {b.index for b in backends if not b.absent}
    stops_at: dict[int, float] = {}  # a backend that left -> when it stops listening
    for ev, e in numbered:
        where = f"events[{e}] ({ev.action} at {ev.at_s:g} s)"
        for b in ev.backends:
            if ev.action == "join":
                if b in members:
                    raise ScenarioError(f"{where}: backend {b} is already in the endpoint set "
                                        "(a join names a backend declared absent: true, or one that left)")
                if stops_at.get(b, -1.0) > ev.at_s:
                    raise ScenarioError(f"{where}: backend {b} left and stops listening at {stops_at[b]:g} s; "
                                        "it can join again only after that")
                members.add(b)
            elif ev.action == "leave":
                if b not in members:
                    raise ScenarioError(f"{where}: backend {b} is not in the endpoint set then")
                members.discard(b)
                stops_at[b] = ev.at_s + ev.value
        if not members:
            raise ScenarioError(f"{where}: leaves the endpoint set empty")
    return [ev for ev, _ in numbered]


def _segments(raw, duration_s: float) -> list[Segment]:
    """Optional named parts of the recorded part: the first from 0, each later one starting later."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("segments: expected a non-empty list of {name, from_s}")
    out: list[Segment] = []
    for k, seg in enumerate(raw):
        where = f"segments[{k}]"
        _check_keys(where, seg, {"name", "from_s"}, set())
        name = seg["name"]
        if not isinstance(name, str) or not name.isidentifier():
            raise ScenarioError(f"{where}.name: expected a word (letters, digits, _), got {name!r}")
        if any(s.name == name for s in out):
            raise ScenarioError(f"{where}.name: {name!r} is used twice")
        from_s = _number(f"{where}.from_s", seg["from_s"], 0, duration_s)
        if not out and from_s != 0:
            raise ScenarioError(f"{where}.from_s: the first segment starts at 0, got {from_s:g}")
        if out and from_s <= out[-1].from_s:
            raise ScenarioError(f"{where}.from_s: expected after {out[-1].from_s:g} (segments[{k - 1}]), "
                                f"got {from_s:g}")
        if from_s >= duration_s:
            raise ScenarioError(f"{where}.from_s: expected before duration_s {duration_s:g}, got {from_s:g}")
        out.append(Segment(name, from_s))
    return out


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
