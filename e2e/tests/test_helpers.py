"""The shared e2e helpers (e2e/tailweight_e2e): the stub HTTP server and the Envoy stats reader."""
import http.client

import requests

from tailweight_e2e import envoy_stats
from tailweight_e2e.stub_server import Reply, Request, StubServer

STATS = """cluster.backends.upstream_rq_total: 12
cluster.backends.upstream_cx_active: 2
cluster.backends.upstream_rq_time: P0(nan,1) P25(nan,2.05) P50(nan,3.05)
wasmcustom.tailweight.picks: 9
wasmcustom.tailweight.endpoints_tracked: -1
server.version_text: "1.40.0"
"""


def test_stats_keep_counters_and_gauges_by_prefix_and_histograms_as_text():
    assert envoy_stats.parse(STATS, "wasmcustom.") == {"wasmcustom.tailweight.picks": 9,
                                                       "wasmcustom.tailweight.endpoints_tracked": -1}
    assert envoy_stats.parse(STATS, "cluster.backends.") == {"cluster.backends.upstream_rq_total": 12,
                                                             "cluster.backends.upstream_cx_active": 2}
    every = envoy_stats.parse_all(STATS)
    assert every["cluster.backends.upstream_rq_time"].startswith("P0(nan,1)") and len(every) == 6


def test_stub_server_hands_each_request_to_its_function_and_sends_the_reply():
    seen = []

    def handle(request: Request) -> Reply:
        seen.append(request)
        return Reply(201, b"made", [("x-twice", "1"), ("x-twice", "2")])

    with StubServer(handle) as server:
        r = requests.post(f"{server.url}/v1/report?x=1", data=b"body", headers={"X-Shard": "a"}, timeout=5)
    assert (r.status_code, r.content, r.headers["x-twice"]) == (201, b"made", "1, 2")
    assert (seen[0].method, seen[0].path, seen[0].body, seen[0].headers["x-shard"]) == ("POST", "/v1/report?x=1",
                                                                                          b"body", "a")


def test_stub_server_keeps_the_connection_only_when_asked():
    for keep_alive, version in ((True, 11), (False, 10)):
        with StubServer(lambda _: Reply(body=b"ok"), keep_alive=keep_alive) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/")
            r = conn.getresponse()
            assert (r.version, r.read()) == (version, b"ok")
            conn.close()
