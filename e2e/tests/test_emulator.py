"""The backend emulator as a real process under short Fortio runs: counters and utilisation, ORCA and
x-served-by headers, 503 mode, stop (connection refused) and recover, and Envoy's client-side WRR
reacting to its ORCA headers."""
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from harness import fortio
from harness.emulator import BackendSettings, start
from tailweight_e2e import envoy, paths
from tailweight_e2e.envoy_configs import render_client_envoy

pytestmark = pytest.mark.timeout(180)


def parse_orca(header: str) -> dict:
    """`TEXT k=v, k=v` -> {k: float}; wire/src/orca.rs has the Rust parser the filter uses."""
    kind, _, body = header.partition(" ")
    assert kind == "TEXT", header
    return {k.strip(): float(v) for k, v in (pair.split("=") for pair in body.split(","))}


def run_fortio(group, tmp_path, url, qps, connections, seconds, name):
    out = tmp_path / f"{name}.json"
    p = fortio.start_load(group, name, url, qps, connections, seconds, out)
    assert p.popen.wait(seconds + 30) == 0, p.log()[-2000:]
    return fortio.read(out)


def test_counts_utilisation_and_headers(group, tmp_path):
    emu = start(group, [BackendSettings(workers=2, base_ms=20, jitter=0.2, payload_bytes=1024)], seed=3)
    r = requests.get(f"http://{emu.addresses[0]}/", timeout=5)
    assert r.status_code == 200 and len(r.content) == 1024
    assert r.headers["x-served-by"] == emu.addresses[0]
    load = parse_orca(r.headers["endpoint-load-metrics"])
    assert set(load) == {"cpu_utilization", "rps_fractional", "eps"}

    result = run_fortio(group, tmp_path, f"http://{emu.addresses[0]}/", qps=50, connections=4, seconds=3, name="direct")
    total, errors = fortio.counts(result)
    assert errors == 0 and total >= 100
    m = emu.metrics()
    # The one request above, Fortio's recorded ones, and its one uncounted warm-up request per connection.
    served = total + 1 + 4
    assert m["emulator_requests_total"][0] == served
    assert m["emulator_errors_total"][0] == 0
    # Busy time = requests x mean service time (20 ms, mean-1 jitter; sleeps overshoot by up to a
    # timer tick, so the margin is wider above than below).
    assert 0.85 * served * 0.020 < m["emulator_busy_seconds_total"][0] < 1.25 * served * 0.020
    assert m["emulator_workers"][0] == 2 and m["emulator_inflight"][0] == 0
    assert m["process_cpu_seconds_total"][-1] >= 0


def test_load_stamps_count_the_requests_left_behind(group):
    """One worker, 400 ms per request, three requests at once: they leave 400 ms apart, and each
    stamp counts the requests still there (2, 1, 0); a backend without load_stamps writes none."""
    emu = start(group, [BackendSettings(workers=1, base_ms=400, load_stamps=True),
                        BackendSettings(workers=1, base_ms=1)])
    url = f"http://{emu.addresses[0]}/"
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: requests.get(url, timeout=10), range(3)))
    assert sorted(r.headers["x-tailweight-load"] for r in answers) == ["1;rif=0", "1;rif=1", "1;rif=2"]
    assert "x-tailweight-load" not in requests.get(f"http://{emu.addresses[1]}/", timeout=5).headers


def test_fail_stop_and_recover(group, tmp_path):
    emu = start(group, [BackendSettings(workers=1, base_ms=1), BackendSettings(workers=1, base_ms=1)])
    url = f"http://{emu.addresses[1]}/"
    emu.event([1], "fail")
    r = requests.get(url, timeout=5)
    assert r.status_code == 503 and r.headers["x-served-by"] == emu.addresses[1]
    result = run_fortio(group, tmp_path, url, qps=40, connections=2, seconds=1, name="failing")
    total, errors = fortio.counts(result)
    assert total > 0 and result["RetCodes"] == {"503": total}
    m = emu.metrics()
    assert m["emulator_errors_total"][1] == m["emulator_requests_total"][1] >= total + 1
    assert m["emulator_mode"][1] == 1
    assert m["emulator_errors_total"][0] == 0, "the other backend is untouched"
    assert "eps=0.00" not in requests.get(url, timeout=5).headers["endpoint-load-metrics"]

    emu.event([1], "stop")
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=5)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", emu.ports[1])) != 0, "listener closed: connection refused"
    assert requests.get(f"http://{emu.addresses[0]}/", timeout=5).status_code == 200
    assert emu.metrics()["emulator_mode"][1] == 2

    emu.event([1], "recover")
    assert requests.get(url, timeout=5).status_code == 200
    assert emu.metrics()["emulator_mode"][1] == 0

    with pytest.raises(RuntimeError, match="indices in 0..2"):
        emu.event([7], "stop")


def test_event_on_several_backends_reaches_each_of_them(group):
    """A scenario event with `backends: [0, 2]` goes out as one query (backends=0%2C2 on the wire)
    and acts on both backends, and on no other."""
    emu = start(group, [BackendSettings(workers=1, base_ms=1)] * 3)
    emu.event([0, 2], "fail")
    assert [emu.metrics()["emulator_mode"][i] for i in range(3)] == [1, 0, 1]
    assert [requests.get(f"http://{a}/", timeout=5).status_code for a in emu.addresses] == [503, 200, 503]
    emu.event([2, 0], "recover")
    assert [emu.metrics()["emulator_mode"][i] for i in range(3)] == [0, 0, 0]
    emu.event([1, 2], "speed", 3.0)
    assert [emu.metrics()["emulator_speed"][i] for i in range(3)] == [1.0, 3.0, 3.0]


def test_speed_event_changes_service_time(group):
    emu = start(group, [BackendSettings(workers=1, base_ms=20)])
    before = emu.metrics()["emulator_busy_seconds_total"][0]
    for _ in range(5):
        requests.get(f"http://{emu.addresses[0]}/", timeout=5)
    fast = emu.metrics()["emulator_busy_seconds_total"][0] - before
    emu.event([0], "speed", 5.0)
    for _ in range(5):
        requests.get(f"http://{emu.addresses[0]}/", timeout=5)
    slow = emu.metrics()["emulator_busy_seconds_total"][0] - before - fast
    # 5 x 20 ms, then 5 x 100 ms (no jitter; each sleep may overshoot by a timer tick).
    assert 0.100 <= fast < 0.130 and 0.500 <= slow < 0.560
    assert 3.5 < slow / fast <= 5.0
    assert emu.metrics()["emulator_speed"][0] == 5.0


def test_bad_command_line_is_one_clear_error(tmp_path):
    import subprocess
    out = subprocess.run(
        [str(paths.binary("tailweight-emulator")), "--admin-port", "1", "--backend", "port=2,workers=1"],
        capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == 'tailweight-emulator: --backend "port=2,workers=1": base_ms is required'


def test_envoy_client_side_wrr_follows_orca_headers(group, tmp_path):
    """Two backends, one 4x slower: Envoy's cswrr (ORCA weights = rps / utilisation) gives it clearly
    less than round robin's half."""
    emu = start(group, [BackendSettings(workers=2, base_ms=10), BackendSettings(workers=2, base_ms=10, speed=4.0)])
    url = envoy.start(group, "envoy", render_client_envoy(emu.addresses, "cswrr_orca"), log_level="warn").url()
    run_fortio(group, tmp_path, url, qps=60, connections=4, seconds=3, name="warm")
    before = emu.requests_total()
    result = run_fortio(group, tmp_path, url, qps=60, connections=4, seconds=4, name="cswrr")
    after = emu.requests_total()
    assert fortio.counts(result)[1] == 0
    fast, slow = (a - b for a, b in zip(after, before, strict=True))
    assert slow / (fast + slow) < 0.35, (fast, slow)
