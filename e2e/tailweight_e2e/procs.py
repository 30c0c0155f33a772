"""Child processes for tests and benchmarks: each in its own process group, logged to a file,
stopped by PID (group) when the owning ProcGroup closes, even on failure, and at interpreter exit."""
import atexit
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import requests

_LIVE: "set[Proc]" = set()


class Proc:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env=None, cwd=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self._log = open(log_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
            start_new_session=True,  # own process group: we can stop it and its children together
        )
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM the group, SIGKILL after `grace_s`. Returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()
        _LIVE.discard(self)
        return self.popen.returncode

    def kill(self) -> None:
        """Abrupt stop (SIGKILL), e.g. to emulate a crash."""
        self.signal(signal.SIGKILL)
        self.popen.wait(5)
        self._log.close()
        _LIVE.discard(self)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def __repr__(self) -> str:
        return f"Proc({self.name}, pid={self.pid})"


class ProcGroup:
    """Owns the processes of one test or benchmark run; closing it stops them all (reverse order)."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []

    def start(self, name: str, argv: Sequence[str], env=None, cwd=None) -> Proc:
        proc = Proc(name, argv, self.log_dir / f"{name}.log", env=env, cwd=cwd)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def __enter__(self) -> "ProcGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _stop_leftovers() -> None:
    for proc in list(_LIVE):
        proc.stop(grace_s=2.0)


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, proc: Proc | None = None,
             interval_s: float = 0.05) -> None:
    """Poll until `predicate()` is true; fail with `what` (and the process log tail) on timeout or exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}:\n"
                               + proc.log()[-3000:])
        try:
            if predicate():
                return
        except (requests.RequestException, OSError):
            pass
        time.sleep(interval_s)
    tail = ("\n" + proc.log()[-3000:]) if proc is not None else ""
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}{tail}")


def wait_http(url: str, timeout_s: float = 30.0, proc: Proc | None = None) -> None:
    wait_for(lambda: requests.get(url, timeout=1).status_code < 500, timeout_s, f"GET {url}", proc)
