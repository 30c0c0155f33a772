"""The harness's port scheme (tailweight_e2e/procs.py): reserved ports lie outside the kernel's
ephemeral range, are never handed out twice while held (in this process or another), and a child
that still finds its port taken is started again on a fresh one."""
import socket
import subprocess
import sys

import pytest

from tailweight_e2e import paths
from tailweight_e2e.procs import (
    LOCK_DIR,
    ProcessExited,
    ProcGroup,
    ephemeral_range,
    read_ready_file,
    reserve,
    reserve_port,
    retry_port_clash,
    wait_for,
)


def test_reserved_ports_are_outside_the_ephemeral_range_and_distinct():
    low, high = ephemeral_range()
    held = [reserve_port() for _ in range(200)]
    try:
        ports = [r.port for r in held]
        assert len(set(ports)) == len(ports)
        assert all(not low <= p <= high and p >= 1024 for p in ports), ports
    finally:
        for r in held:
            r.release()


def test_a_held_port_is_refused_until_released_even_to_another_process():
    claim = reserve_port()
    key = f"port-{claim.port}"
    other_process = [sys.executable, "-c",
                     "import sys; from tailweight_e2e.procs import reserve; "
                     f"sys.exit(0 if reserve({key!r}) is None else 1)"]
    try:
        assert reserve(key) is None, "a second claim in the same process"
        other = subprocess.run(other_process, timeout=30, cwd=paths.REPO / "e2e", capture_output=True, text=True)
        assert other.returncode == 0, f"a claim from another process: {other.stderr}"
    finally:
        claim.release()
    again = reserve(key)
    assert again is not None, "free again once released"
    again.release()
    assert (LOCK_DIR / f"{key}.lock").exists()


def test_the_group_holds_its_ports_until_it_closes(tmp_path):
    with ProcGroup(tmp_path) as group:
        port = group.reserve_port()
        assert reserve(f"port-{port}") is None
    claim = reserve(f"port-{port}")
    assert claim is not None
    claim.release()


# A child that binds the port it is given, as the third-party servers do, and reports it.
BIND = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    sys.exit(f"bind: {e.strerror}")
s.listen()
open(sys.argv[2], "w").write(sys.argv[1])
time.sleep(60)
"""


def test_a_port_taken_after_all_is_retried_on_a_fresh_one(tmp_path):
    with ProcGroup(tmp_path) as group, socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))  # a server from outside the harness
        squatter.listen()
        taken = squatter.getsockname()[1]
        tried = []

        def start() -> int:
            port = taken if not tried else group.reserve_port()
            tried.append(port)
            ready = group.ready_file(f"child-{len(tried)}")
            proc = group.start(f"child-{len(tried)}", [sys.executable, "-c", BIND, str(port), str(ready)])
            return int(read_ready_file(ready, proc, 30))

        port = retry_port_clash(start)
        assert tried[0] == taken and port == tried[1] != taken
        assert len(tried) == 2
        assert "Address already in use" in (tmp_path / "child-1.log").read_text()


def test_other_failures_are_not_retried(tmp_path):
    with ProcGroup(tmp_path) as group:
        calls = []

        def start():
            calls.append(1)
            proc = group.start("failing", [sys.executable, "-c", "import sys; sys.exit('no config')"])
            wait_for(lambda: False, 30, "never", proc)

        with pytest.raises(ProcessExited, match="no config"):
            retry_port_clash(start)
        assert len(calls) == 1


def test_a_harness_stopped_with_sigterm_stops_its_children(tmp_path):
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tailweight_e2e.procs import ProcGroup\n"
        "with ProcGroup(Path(sys.argv[1])) as group:\n"
        "    child = group.start('sleeper', ['sleep', '60'])\n"
        "    Path(sys.argv[2]).write_text(str(child.popen.pid))\n"
        "    time.sleep(60)\n")
    pid_file = tmp_path / "child.pid"
    harness = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "logs"), str(pid_file)],
                               cwd=paths.REPO / "e2e")
    try:
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 20, "the child's pid"))
        harness.terminate()
        assert harness.wait(20) == 128 + 15
        def child_gone():
            try:
                with open(f"/proc/{child}/stat") as f:
                    return f.read().split()[2] == "Z"  # a zombie until init reaps it: gone
            except FileNotFoundError:
                return True
        wait_for(child_gone, 10, f"child {child} to stop")
    finally:
        if harness.poll() is None:
            harness.kill()

