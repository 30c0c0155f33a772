"""The client Envoys' endpoint set: one file-based EDS resource that every client Envoy watches, as
every sidecar of a mesh gets a service's endpoints from istiod. Backends join and leave it during a
run; the operator policy keeps its weights in it too."""
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from tailweight_e2e.envoy_configs import write_eds


class EndpointSet:
    """Which backends are in the set and their weights. Every change rewrites the file under a new
    version (atomically: Envoy reloads it when it is moved into place). Thread-safe: the operator's
    controller sets weights from its own thread while the run loop applies joins and leaves."""

    def __init__(self, path: Path, addresses: Sequence[str], members: Iterable[int],
                 weights: dict[str, int] | None = None, join_weight: int = 1):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.addresses = list(addresses)
        self.join_weight = join_weight
        self._lock = threading.Lock()
        self._members = sorted(set(members))
        self._weights = {a: int((weights or {}).get(a, 1)) for a in self._member_addresses()}
        self.version = 0
        with self._lock:
            self._write()

    def member_addresses(self) -> list[str]:
        """The addresses in the set, in backend order."""
        with self._lock:
            return self._member_addresses()

    def _member_addresses(self) -> list[str]:
        return [self.addresses[i] for i in self._members]

    def members(self) -> list[int]:
        with self._lock:
            return list(self._members)

    def join(self, backends: Iterable[int]) -> None:
        """The backends enter the set at `join_weight` (Envoy's weight 1 = unweighted, or the
        operator's weight for a new endpoint)."""
        with self._lock:
            for b in backends:
                if b not in self._members:
                    self._members = sorted({*self._members, b})
                    self._weights[self.addresses[b]] = self.join_weight
            self._write()

    def leave(self, backends: Iterable[int]) -> None:
        with self._lock:
            gone = set(backends)
            remaining = [b for b in self._members if b not in gone]
            if not remaining:
                raise ValueError(f"leaving {sorted(gone)} would empty the endpoint set")
            self._members = remaining
            for b in gone:
                self._weights.pop(self.addresses[b], None)
            self._write()

    def set_weights(self, weights: dict[str, int]) -> None:
        """New weights for the members they name; a member they do not name keeps its weight, an
        address outside the set is ignored (it left meanwhile)."""
        with self._lock:
            for a in self._member_addresses():
                if a in weights:
                    self._weights[a] = int(weights[a])
            self._write()

    def _write(self) -> None:
        self.version += 1
        write_eds(self.path, {a: self._weights[a] for a in self._member_addresses()}, version=str(self.version))
