"""The emulator's gRPC backends and pod lifecycle as a real process: Fortio's gRPC ping load (several
streams per HTTP/2 connection), fail / shed / stop as a gRPC client sees them, an absent backend that
joins cold, the streaming method driven by grpcio, and Envoy's client-side WRR reading the ORCA
reports a gRPC backend sends in its trailers.

grpcio calls the methods generically (bytes in, bytes out); the few protobuf fields involved are
encoded and decoded by hand below (proto/tailweight/emulator/v1/streamer.proto)."""
import socket
import time

import grpc
import pytest
import requests
import yaml

from harness import fortio
from harness.emulator import BackendSettings, start
from tailweight_e2e import envoy
from tailweight_e2e.envoy_configs import CLUSTER, render_client_envoy
from tailweight_e2e.grpc_calls import channel, decode, ping, ticks
from tailweight_e2e.procs import wait_for

pytestmark = pytest.mark.timeout(180)

def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def run_fortio_grpc(group, tmp_path, destination, qps, connections, streams, seconds, name):
    out = tmp_path / f"{name}.json"
    argv = fortio.load_argv(destination, qps, connections, seconds, out)
    argv[2:2] = ["-grpc", "-ping", "-s", str(streams)]  # after `fortio load`
    p = group.start(name, argv)
    assert p.popen.wait(seconds + 30) == 0, p.log()[-2000:]
    return fortio.read(out)


def test_fortio_grpc_ping_many_streams_per_connection(group, tmp_path):
    emu = start(group, [BackendSettings(workers=4, base_ms=2, protocol="grpc")])
    result = run_fortio_grpc(group, tmp_path, emu.addresses[0], qps=80, connections=2, streams=4, seconds=2,
                             name="ping")
    total = result["DurationHistogram"]["Count"]
    assert total >= 100 and result["RetCodes"] == {"SERVING": total}
    m = emu.metrics()
    # Fortio's recorded calls plus one uncounted warm-up Ping per connection.
    assert m["emulator_requests_total"][0] == total + 2
    assert m["emulator_connections_total"][0] == 2, "4 streams share each of the 2 HTTP/2 connections"
    assert m["emulator_errors_total"][0] == 0 and m["emulator_inflight"][0] == 0


def test_fail_and_shed_answer_at_once_as_grpc_statuses_and_http_codes(group):
    emu = start(group, [BackendSettings(workers=1, base_ms=1, protocol="grpc"), BackendSettings(workers=1, base_ms=1)])
    ch = channel(emu.addresses[0])
    http_url = f"http://{emu.addresses[1]}/"
    for action, code, status, mode in [("fail", grpc.StatusCode.UNAVAILABLE, 503, 1),
                                       ("shed", grpc.StatusCode.RESOURCE_EXHAUSTED, 429, 4)]:
        emu.event([0, 1], action)
        with pytest.raises(grpc.RpcError) as raised:
            ping(ch)
        error = raised.value
        assert error.code() == code
        # Trailers-only: no initial metadata, everything (x-served-by too) in the trailing metadata.
        assert error.initial_metadata() == ()
        assert dict(error.trailing_metadata())["x-served-by"] == emu.addresses[0]
        r = requests.get(http_url, timeout=5)
        assert r.status_code == status and "eps=0.00" not in r.headers["endpoint-load-metrics"]
        m = emu.metrics()
        assert m["emulator_mode"][0] == m["emulator_mode"][1] == mode
    m = emu.metrics()
    for i in (0, 1):
        assert m["emulator_requests_total"][i] == m["emulator_errors_total"][i] == 2
        assert m["emulator_shed_total"][i] == 1
    emu.event([0, 1], "recover")
    assert ping(ch)[0] is not None and requests.get(http_url, timeout=5).status_code == 200


def test_stop_sends_goaway_refuses_connections_and_recover_serves_again(group):
    emu = start(group, [BackendSettings(workers=1, base_ms=1, protocol="grpc")])
    ch = channel(emu.addresses[0])
    stream = ticks(ch, count=100, gap_ms=100)
    assert decode(next(stream))[2] == emu.addresses[0].encode()
    emu.event([0], "stop")
    with pytest.raises(grpc.RpcError) as raised:
        list(stream)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "GOAWAY" in raised.value.details(), raised.value.details()
    assert refused(emu.ports[0])
    with pytest.raises(grpc.RpcError) as raised:
        ping(ch)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert emu.metrics()["emulator_mode"][0] == 2

    emu.event([0], "recover")
    assert not refused(emu.ports[0]) and emu.metrics()["emulator_mode"][0] == 0
    # A new channel: the old one may still be in its reconnect backoff.
    assert ping(channel(emu.addresses[0]))[1].code() == grpc.StatusCode.OK


def test_absent_backend_joins_cold(group):
    """base 10 ms; the joined backend is 5x slower at first, falling to 1x over 60 s, so during the
    test its multiplier stays above 4 (it would take 15 s to fall to 4)."""
    emu = start(group, [BackendSettings(workers=1, base_ms=10, protocol="grpc", absent=True, cold_factor=5, cold_s=60),
                        BackendSettings(workers=1, base_ms=10, protocol="grpc")])
    assert refused(emu.ports[0])
    assert emu.metrics()["emulator_mode"][0] == 3
    emu.event([0], "recover")
    assert refused(emu.ports[0]) and emu.metrics()["emulator_mode"][0] == 3, "recover keeps it absent"

    emu.event([0], "join")
    m = emu.metrics()
    assert m["emulator_mode"][0] == 0 and 4.0 < m["emulator_cold_multiplier"][0] <= 5.0
    assert m["emulator_cold_multiplier"][1] == 1.0
    before = m["emulator_busy_seconds_total"]
    cold, warm = channel(emu.addresses[0]), channel(emu.addresses[1])
    cold_latencies = []
    for _ in range(5):
        started = time.monotonic()
        ping(cold)
        cold_latencies.append(time.monotonic() - started)
        ping(warm)
    after = emu.metrics()["emulator_busy_seconds_total"]
    cold_busy, warm_busy = after[0] - before[0], after[1] - before[1]
    # Service time is base x multiplier (> 4 here): every cold call took at least 40 ms.
    assert min(cold_latencies) >= 0.040, cold_latencies
    assert cold_busy / warm_busy > 3.0, (cold_busy, warm_busy)
    assert warm_busy >= 5 * 0.010


def test_ticks_stream_driven_by_grpcio(group):
    emu = start(group, [BackendSettings(workers=1, base_ms=5, protocol="grpc", payload_bytes=4)])
    ch = channel(emu.addresses[0])
    call = ticks(ch, count=5, gap_ms=20)
    received = [decode(m) for m in call]
    assert call.code() == grpc.StatusCode.OK
    # seq 0 is proto3's default and so not on the wire.
    assert [t.get(1, 0) for t in received] == [0, 1, 2, 3, 4]
    assert all(t[2] == emu.addresses[0].encode() and t[3] == b"xxxx" for t in received)
    assert emu.metrics()["emulator_requests_total"][0] == 1, "one stream is one request"

    with pytest.raises(grpc.RpcError) as raised:
        list(ticks(ch, count=0, gap_ms=0))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "count: expected 1..=100000, got 0"


def http2_upstream(config_yaml: str) -> str:
    """The client Envoy's backend cluster speaking HTTP/2 (h2c) to its endpoints, as gRPC needs."""
    config = yaml.safe_load(config_yaml)
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] == CLUSTER:
            cluster["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }}
    return yaml.safe_dump(config, sort_keys=False)


def test_envoy_client_side_wrr_follows_orca_in_grpc_trailers(group, tmp_path):
    """Two gRPC backends, one 4x slower. Their ORCA reports travel only in the trailers
    (endpoint-load-metrics-bin); Envoy's cswrr (weights = rps / utilisation) gives the slow one
    clearly less than round robin's half."""
    emu = start(group, [BackendSettings(workers=2, base_ms=10, protocol="grpc"),
                        BackendSettings(workers=2, base_ms=10, speed=4.0, protocol="grpc")])
    config = http2_upstream(render_client_envoy(emu.addresses, "cswrr_orca"))
    proxy = envoy.start(group, "envoy", config, log_level="warn")
    destination = f"127.0.0.1:{proxy.port()}"
    run_fortio_grpc(group, tmp_path, destination, qps=60, connections=4, streams=1, seconds=3, name="warm")
    wait_for(lambda: proxy.stat(f"cluster.{CLUSTER}.upstream_cx_http2_total") >= 2, 10, "HTTP/2 upstream connections")
    before = emu.requests_total()
    result = run_fortio_grpc(group, tmp_path, destination, qps=60, connections=4, streams=1, seconds=4, name="cswrr")
    after = emu.requests_total()
    assert result["RetCodes"] == {"SERVING": result["DurationHistogram"]["Count"]}
    fast, slow = (a - b for a, b in zip(after, before, strict=True))
    assert slow / (fast + slow) < 0.35, (fast, slow)
