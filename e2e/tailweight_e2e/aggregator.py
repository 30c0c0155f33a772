"""The real aggregator as a child process: it binds 127.0.0.1 port 0 and reports the address it got
in its --ready-file (see aggregator --help)."""
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .procs import Proc, ProcGroup, read_ready_file, wait_http


@dataclass
class Aggregator:
    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start(group: ProcGroup, name: str = "aggregator", args: Sequence[str] = (), binary: Path | None = None,
          timeout_s: float = 30.0) -> Aggregator:
    """Start `binary` (default: `make native`'s build) with `args`, wait until it listens and
    answers /readyz. `args` name `--identity` (the binary has no default: say whom reports are
    trusted from); without it this raises ValueError before starting anything."""
    if not any(a == "--identity" or a.startswith("--identity=") for a in args):
        raise ValueError("aggregator.start: pass --identity explicitly (e.g. --identity=report for a meshless test)")
    ready_file = group.ready_file(name)
    proc = group.start(name, [binary or paths.binary("tailweight-aggregator"), "--listen", "127.0.0.1:0",
                              "--ready-file", ready_file, *args])
    port = int(read_ready_file(ready_file, proc, timeout_s).strip().rpartition(":")[2])
    aggregator = Aggregator(proc, port)
    wait_http(f"{aggregator.url}/readyz", timeout_s, proc)
    return aggregator
