"""The seed operator (Istio-adaptive-least-request), emulated honestly: every period it reads per-pod
CPU from Prometheus, applies its published rule to the weights of the endpoints in the set and
rewrites them; Envoy runs weighted LEAST_REQUEST on those weights (here the file-based EDS resource
of membership.EndpointSet, which backends also join and leave).

The rule is the simulator's (sim/src/policy/operator_rule.rs, its numbers in sim/operator-rule.json),
asked through `tailweight-sim operator`: one implementation for both.
"""
import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from tailweight_e2e import paths
from tailweight_e2e.procs import wait_for
from tailweight_e2e.prometheus import Prometheus

from .membership import EndpointSet

RULE_FILE = paths.REPO / "sim" / "operator-rule.json"


@dataclass(frozen=True)
class OperatorRule:
    """The rule's numbers; sim/operator-rule.json's description says what each does."""
    period_s: float
    dead_band: float
    step: float
    min_weight: float
    max_weight: float
    median_weight: float
    new_endpoint_weight: float


def load_rule(path: Path = RULE_FILE) -> OperatorRule:
    doc = json.loads(Path(path).read_text())
    try:
        return OperatorRule(**{f.name: float(doc[f.name]) for f in fields(OperatorRule)})
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: {type(e).__name__}: {e}") from e


RULE = load_rule()
PERIOD_S = RULE.period_s
# The analogue of sum(rate(container_cpu_usage_seconds_total[1m])) by (pod): busy worker seconds.
CPU_QUERY = "sum(rate(emulator_busy_seconds_total[1m])) by (address)"


def ask(question: dict, rule: OperatorRule = RULE) -> dict:
    """The rule's answer (sim/src/policy/operator_rule.rs, `RuleRequest`): `weights`, Envoy's
    `lb_weights` and `new_endpoint_lb_weight`, by endpoint address."""
    out = subprocess.run([str(paths.binary("tailweight-sim")), "operator"], input=json.dumps(
        {**question, "rule": asdict(rule)}), capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ValueError(out.stderr.strip())
    return json.loads(out.stdout)


def step(weights: dict[str, float], cpu: dict[str, float], rule: OperatorRule = RULE) -> dict[str, float]:
    """One round of the operator's rule: mean = mean of the non-zero CPUs; an endpoint with
    |cpu - mean| / mean >= dead_band moves w <- clamp(w x (1 - step x (cpu - mean) / mean),
    min_weight, max_weight); then all scale to median_weight. Endpoints without a weight start at
    new_endpoint_weight; endpoints without a CPU sample keep their weight."""
    return ask({"weights": weights, "cpu": cpu}, rule)["weights"]


def converged_weights(capacity: dict[str, float]) -> dict[str, float]:
    """The rule's fixed point of equal CPU per endpoint: weight proportional to capacity
    (workers / mean service time), scaled to the rule's median. (The min..max clamp would bind for
    capacity ratios above max_weight / min_weight once it adjusts; at the fixed point it does not.)"""
    return ask({"capacity": capacity})["weights"]


def integer_weights(weights: dict[str, float]) -> dict[str, int]:
    """What Envoy gets as load_balancing_weight."""
    return ask({"weights": weights})["lb_weights"]


def join_weight(rule: OperatorRule = RULE) -> int:
    """The EDS weight of an endpoint that joins between two rounds: the rule's new endpoint weight."""
    return ask({"weights": {}}, rule)["new_endpoint_lb_weight"]


def cpu_by_address(prom: Prometheus) -> dict[str, float]:
    """Busy worker seconds per second, by backend address."""
    return {s["metric"]["address"]: float(s["value"][1]) for s in prom.query(CPU_QUERY)
            if "address" in s.get("metric", {})}


def wait_for_cpu(prom: Prometheus, addresses: Sequence[str], timeout_s: float = 30.0) -> None:
    """Until rate() answers for every address (Prometheus needs two scrapes after its start-up)."""
    wait_for(lambda: set(cpu_by_address(prom)) >= set(addresses), timeout_s,
             "Prometheus CPU series for every backend", prom.proc, interval_s=0.5)


class Controller:
    """Every `period_s`: CPU from Prometheus -> step() over the endpoints in the set -> their weights
    in the EDS file. Runs in a daemon thread; records every round so the results can show what it did.
    An endpoint that joins starts at the rule's new_endpoint_weight (the set's join weight, see
    join_weight) until the next round."""

    def __init__(self, endpoints: EndpointSet, weights: dict[str, float], cpu_source: Callable[[], dict[str, float]],
                 period_s: float = PERIOD_S, log: Callable[[str], None] | None = None):
        self.endpoints = endpoints
        self.weights = dict(weights)
        self.cpu_source = cpu_source
        self.period_s = period_s
        self.rounds: list[dict] = []
        self.errors: list[str] = []
        self.log = log or (lambda _: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        endpoints.set_weights(integer_weights(self.weights))

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="operator", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                members = set(self.endpoints.member_addresses())
                cpu = {a: c for a, c in self.cpu_source().items() if a in members}
                answer = ask({"weights": {a: w for a, w in self.weights.items() if a in members}, "cpu": cpu})
                self.weights = answer["weights"]
                self.endpoints.set_weights(answer["lb_weights"])
                self.rounds.append({"t_s": round(time.monotonic() - self._t0, 1), "cpu": cpu,
                                    "weights": answer["lb_weights"]})
                self.log(f"operator round {len(self.rounds)}: weights {sorted(answer['lb_weights'].values())}")
            except Exception as e:  # a failed round keeps the old weights, as the operator would
                self.errors.append(f"{type(e).__name__}: {e}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
