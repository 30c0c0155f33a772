"""Child processes for tests and benchmarks, and the ports they listen on.

Processes: each in its own process group, logged to a file, stopped by PID (group) when the owning
ProcGroup closes, even on failure, and at interpreter exit.

Ports: nothing here picks a free port and hands the number on (another process may take it before
the child binds, and two such picks may return the same number). Instead:

- Servers that can bind port 0 themselves do so and report the port they got: the emulator and the
  aggregator write a --ready-file (see read_ready_file), Envoy writes its admin address to
  --admin-address-path and lists its listeners' bound addresses on the admin API (see envoy.py), and
  Python servers in tests bind port 0 directly (serve_forever below for the ones run as scripts).
- Third-party servers that cannot report a port-0 bind (Prometheus, etcd, kube-apiserver, istiod,
  pilot-agent's Envoy) get a reserved port (reserve_port): one outside the kernel's ephemeral range
  (/proc/sys/net/ipv4/ip_local_port_range), so no port-0 bind and no outgoing connection of any
  process is ever given it, and locked with flock on <tmp>/tailweight-ports/port-<N>.lock, so no
  other reservation, in this process or any other run on the machine, gets it while the lock is
  held. The lock belongs to the ProcGroup that asked (released when it closes, after its processes
  stopped) and dies with the process holding it, so a crashed run leaves nothing stale. A server
  from outside the harness may still hold such a port: reserve_port skips ports it cannot bind, and
  retry_port_clash starts a child again on fresh ports when it still exits with "address already
  in use".
"""
import atexit
import errno
import fcntl
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TypeVar

import requests

T = TypeVar("T")
_LIVE: "set[Proc]" = set()

LOCK_DIR = Path(tempfile.gettempdir()) / "tailweight-ports"
# Reserved ports start here: below lie well-known and commonly configured service ports.
RESERVED_PORTS_FLOOR = 10000
SLOW_POLL_S = 0.2
PORT_CLASH = re.compile(r"address already in use", re.IGNORECASE)


class ProcessExited(RuntimeError):
    """A child exited while the harness waited for it to become ready."""

    def __init__(self, proc: "Proc", what: str):
        self.proc = proc
        self.log_tail = proc.log()[-3000:]
        super().__init__(f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}:\n"
                         + self.log_tail)

    @property
    def port_clash(self) -> bool:
        """Whether it exited because a port it was told to bind was taken."""
        return bool(PORT_CLASH.search(self.proc.log()))


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
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def __repr__(self) -> str:
        return f"Proc({self.name}, pid={self.pid})"


class Reservation:
    """An exclusive claim on a name (a port, an address block) among all harness runs on this
    machine: an flock on <LOCK_DIR>/<key>.lock, held until release() or the holder's exit."""

    def __init__(self, key: str, lock: IO):
        self.key = key
        self._lock = lock

    def release(self) -> None:
        self._lock.close()  # closing the descriptor drops the flock

    @property
    def port(self) -> int:
        """The port of a reservation made by reserve_port."""
        return int(self.key.removeprefix("port-"))


def reserve(key: str) -> Reservation | None:
    """Claim `key`; None when another reservation holds it. flock, not fcntl.lockf: flock locks
    belong to the open file, so two claims in the same process exclude each other too."""
    LOCK_DIR.mkdir(exist_ok=True)
    try:
        lock = open(LOCK_DIR / f"{key}.lock", "a")
    except PermissionError:  # another user's lock file: theirs
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return Reservation(key, lock)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for port-0 binds and outgoing connections (inclusive)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port now (SO_REUSEADDR, as the servers set it, so a
    connection in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def reserve_port(attempts: int = 500) -> Reservation:
    """A port outside the ephemeral range that no other reservation holds and nothing listens on
    (see the module docstring). Release it (or let its ProcGroup do so) once its server is gone."""
    low, high = ephemeral_range()
    spans = [(a, b) for a, b in ((RESERVED_PORTS_FLOOR, low - 1), (high + 1, 65535)) if a <= b]
    if not spans:
        raise RuntimeError(f"no ports outside the ephemeral range {low}-{high} above {RESERVED_PORTS_FLOOR}")
    rng = random.SystemRandom()
    weights = [b - a + 1 for a, b in spans]
    for _ in range(attempts):
        a, b = rng.choices(spans, weights)[0]
        port = rng.randint(a, b)
        claim = reserve(f"port-{port}")
        if claim is None:
            continue
        if _bindable(port):
            return claim
        claim.release()
    raise RuntimeError(f"no free port to reserve after {attempts} tries")


def retry_port_clash(start: Callable[[], T], attempts: int = 3) -> T:
    """`start()` (which reserves its ports afresh each call and waits for its child to be ready),
    again while the child exits because a reserved port was taken after all."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except ProcessExited as e:
            if attempt == attempts or not e.port_clash:
                raise
    raise AssertionError("unreachable")


class ProcGroup:
    """Owns the processes of one test or benchmark run, and the ports reserved for them; closing it
    stops the processes (reverse order), then releases the reservations."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []
        self.reservations: list[Reservation] = []

    def start(self, name: str, argv: Sequence[str], env=None, cwd=None) -> Proc:
        proc = Proc(name, argv, self.log_dir / f"{name}.log", env=env, cwd=cwd)
        self.procs.append(proc)
        return proc

    def ready_file(self, name: str) -> Path:
        """<log_dir>/<name>.ready for a child to report its ports in, with no stale copy left by an
        earlier process of the same name."""
        path = self.log_dir / f"{name}.ready"
        path.unlink(missing_ok=True)
        return path

    def keep(self, reservation: Reservation) -> Reservation:
        """Hold `reservation` until the group closes."""
        self.reservations.append(reservation)
        return reservation

    def reserve_port(self) -> int:
        """A reserved port (reserve_port) held until the group closes."""
        return self.keep(reserve_port()).port

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
        for reservation in self.reservations:
            reservation.release()
        self.reservations.clear()

    def __enter__(self) -> "ProcGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _stop_leftovers() -> None:
    for proc in list(_LIVE):
        proc.stop(grace_s=2.0)


def _exit_on_sigterm(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


# A harness stopped with SIGTERM (kill, timeout) unwinds like one that failed: open groups close
# and _stop_leftovers runs, so its children do not outlive it. Only where nothing else handles it.
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str, proc: Proc | None = None,
             interval_s: float = 0.05, max_interval_s: float | None = None) -> T:
    """Poll until `predicate()` returns something truthy and return it. Exceptions from the
    predicate count as "not yet" (conditions fail in many ways until ready); the last one is named
    on timeout. Fails at once with ProcessExited (and the log tail) if `proc` exits.

    The first pause between polls is `interval_s`; each next one is half as long again, up to
    `max_interval_s` (default: SLOW_POLL_S, or `interval_s` if larger): quick for what is ready at
    once, gentle on two shared cores during long waits on heavy checks (kubectl, config dumps)."""
    deadline = time.monotonic() + timeout_s
    delay = interval_s
    longest = max(interval_s, SLOW_POLL_S) if max_interval_s is None else max_interval_s
    last = None
    while True:
        if proc is not None and not proc.alive():
            raise ProcessExited(proc, what)
        try:
            value = predicate()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 - see the docstring
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 1.5, longest)
    tail = ("\n" + proc.log()[-3000:]) if proc is not None else ""
    raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}; last: {last!r}{tail}")


def wait_exited(procs: Sequence[Proc], until: float) -> bool:
    """Block until every process in `procs` has exited (True) or the monotonic clock reaches `until`
    (False), without reaping them: an exited child stays a zombie whose /proc/<pid>/stat (its CPU
    time) is still readable until something polls it. Waits on a pidfd per process (Linux 5.3+)."""
    for proc in procs:
        try:
            fd = os.pidfd_open(proc.pid)
        except ProcessLookupError:
            continue  # already reaped
        try:
            remaining = until - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return False
        finally:
            os.close(fd)
    return True


def wait_http(url: str, timeout_s: float = 30.0, proc: Proc | None = None) -> None:
    wait_for(lambda: requests.get(url, timeout=1).status_code < 500, timeout_s, f"GET {url}", proc)


def read_ready_file(path: Path, proc: Proc, timeout_s: float = 30.0) -> str:
    """The text `proc` writes to `path` once it listens (written atomically: a file that exists is
    complete)."""
    path = Path(path)
    return wait_for(lambda: path.is_file() and path.read_text(), timeout_s, f"{proc.name} to write {path}", proc)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary name in the same directory and a rename, so a
    reader (read_ready_file, Envoy watching a directory) never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def serve_forever(server, ready_file: str | None) -> None:
    """For Python servers run as scripts: report the port `server` bound (it was given port 0) in
    `ready_file` as JSON {"port": P}, then serve until killed."""
    if ready_file:
        write_atomically(Path(ready_file), json.dumps({"port": server.server_address[1]}) + "\n")
    server.serve_forever()


def ready_port(ready_file: Path, proc: Proc, timeout_s: float = 30.0) -> int:
    """The port a script using serve_forever reported."""
    return int(json.loads(read_ready_file(ready_file, proc, timeout_s))["port"])
