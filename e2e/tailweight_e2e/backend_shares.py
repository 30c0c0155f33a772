"""How a client Envoy split a load run over its backends: each backend's share of the requests they
served (from their own counters, read before and after), and the split every shell is tested for
with one slow backend."""
from collections.abc import Callable, Sequence
from typing import Protocol


class Backends(Protocol):
    def requests_total(self) -> list[float]: ...


def shares(before: Sequence[float], after: Sequence[float]) -> tuple[list[float], float]:
    """Each backend's share of the requests served between two readings, and how many they served."""
    served = [a - b for a, b in zip(after, before, strict=True)]
    total = sum(served)
    return [s / total for s in served], total


def assert_slow_backend_gets_a_small_share(backends: Backends, run_load: Callable[[], tuple[int, int]],
                                           slow: int) -> tuple[list[float], int, float]:
    """Run `run_load` (a load run answering (requests, errors)) and assert its split: no error, every
    request served by a backend, backend `slow` less than half the smallest share of the others
    but not starved. Returns the shares, the requests and how many the backends served."""
    before = backends.requests_total()
    total, errors = run_load()
    share, served = shares(before, backends.requests_total())
    assert errors == 0 and served >= total
    fast = [s for i, s in enumerate(share) if i != slow]
    assert share[slow] < 0.5 * min(fast), share
    assert share[slow] > 0, share
    return share, total, served
