"""Health checks of suspended endpoints (`health_check_path`) with a real Envoy and stub backends on
127.0.0.1: the filter's checks, sent from its root context with the override header, reach the
endpoint it names (not the fallback policy's pick), and with them on a suspended endpoint gets no
user request until a check passes. With a view saying many callers report the cluster, a filter
sends only its share of the checks, and another caller's users' good answers readmit the endpoint.

Counts are asserted, never times: each backend records the path of every request it gets."""
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.procs import wait_for
from tailweight_e2e.stub_server import Reply, Request, StubServer

STAT = "wasmcustom.tailweight."
CHECK_PATH = "/healthz"
AUTHORITY = "shop.example:8080"


class Backend:
    """A stub backend that records (path, authority) of every request and answers 503 while `failing`."""

    def __init__(self):
        self.failing = False
        self.seen, self.lock = [], threading.Lock()
        self.server = StubServer(self._serve, keep_alive=True, name="backend").start()
        self.address = self.server.address

    def _serve(self, request: Request) -> Reply:
        with self.lock:
            self.seen.append((request.path, request.headers.get("host")))
        return Reply(status=503 if self.failing else 200)

    def count(self, path):
        with self.lock:
            return sum(1 for p, _ in self.seen if p == path)

    def authorities(self, path):
        with self.lock:
            return {a for p, a in self.seen if p == path}

    def close(self):
        self.server.close()


# Checks every probe wait (50, 100, 200 ms) at the ticks of a busy worker; exploration only while
# endpoints are new.
# Failures leave the score alone (error_penalty and failure_latency_ms 0): the failing favourite
# stays the favourite until two failures in a row suspend it. With the defaults one failure makes
# it the last choice for seconds, its failure ratio fades meanwhile, and a loaded machine's timing
# decided whether two failures ever came close enough to suspend it (once in CI: none in 1,000).
CONFIG = {"explore_ratio": 0.0, "health_check_path": CHECK_PATH, "probe_interval_ms": 50, "sync_interval_ms": 50,
          "error_penalty": 0, "failure_latency_ms": 0}


@pytest.fixture
def checked(group):
    """Three stub backends behind a client Envoy whose filter health-checks (CONFIG); a session."""
    backends = [Backend() for _ in range(3)]
    # The fallback (least_request) would spread checks over all three if the override were ignored.
    config = envoy_configs.render_client_envoy([b.address for b in backends], "tailweight_local",
                                               wasm_path=paths.WASM, plugin_config=CONFIG)
    proxy = envoy.start(group, "envoy-checked", config)
    yield backends, proxy, requests.Session()
    for b in backends:
        b.close()


def users(proxy, session, n):
    """`n` user requests in sequence (GET /, Host AUTHORITY); their status codes."""
    return [session.get(proxy.url(), headers={"host": AUTHORITY}, timeout=10).status_code for _ in range(n)]


def users_in_parallel(proxy, n, parallel=4):
    """`n` user requests, `parallel` sessions at a time (each its own connection); their status codes.
    A share measured after a recovery uses these: with one request at a time nothing is ever in
    flight, so the two-choice pick compares latency estimates alone and a recovered backend whose
    estimate is a hair above the others' gets none; with requests in flight it competes as users'
    traffic lets it (the share's rise over the ramp itself is sidecar/tests/health.rs's)."""
    def one_session(count):
        with requests.Session() as session:
            return users(proxy, session, count)
    with ThreadPoolExecutor(parallel) as pool:
        return [code for codes in pool.map(one_session, [n // parallel] * parallel) for code in codes]


def stat(proxy, name):
    return proxy.stat(STAT + name)


def suspend(proxy, session, backend, limit=1000):
    """Fail `backend` and send user requests until the filter suspends it (at most `limit`), one at a
    time and, every tenth round, four at once (one at a time, a backend whose latency estimate is a
    hair above the others' may never be picked: see `users_in_parallel`)."""
    backend.failing = True
    for i in range(limit // 2):
        if i % 10:
            users(proxy, session, 1)
        else:
            users_in_parallel(proxy, 4)
        if stat(proxy, "suspensions") >= 1:
            return
    raise AssertionError(f"no suspension in about {limit} requests")


# The check names its endpoint in the override header, and Envoy's override_host policy honours it
# on a call dispatched from the root context: every check reaches the suspended backend.
def test_health_checks_reach_the_endpoint_the_override_header_names(checked):
    backends, proxy, session = checked
    assert users(proxy, session, 150) == [200] * 150
    down = backends[1]
    suspend(proxy, session, down)
    wait_for(lambda: down.count(CHECK_PATH) >= 10, 30, "10 health checks at the suspended backend")
    others = [b.count(CHECK_PATH) for b in backends if b is not down]
    assert others == [0, 0], f"checks reached other backends: {others} (the suspended one: {down.count(CHECK_PATH)})"
    assert down.authorities(CHECK_PATH) == {AUTHORITY}, "checks carry the users' authority"
    assert stat(proxy, "health_checks_sent") >= 10
    assert stat(proxy, "health_checks_failed") >= 9  # the last may still be under way


# A backend that fails for a while and recovers: once suspended it gets checks, not users' requests;
# when it answers again a check readmits it and its share of users' requests returns.
def test_a_suspended_backend_gets_no_user_requests_and_comes_back_after_it_recovers(checked):
    backends, proxy, session = checked
    assert users(proxy, session, 300) == [200] * 300
    # The picker's favourite fails (the stubs' latencies differ: their shares are uneven).
    down = max(backends, key=lambda b: b.count("/"))
    assert down.count("/") >= 100
    suspend(proxy, session, down)
    at_suspension = down.count("/")
    left_to_envoy = stat(proxy, "explorations") + stat(proxy, "fallbacks")
    # 600 users' requests while it stays down (several probe waits of 50-200 ms at any pace):
    # without health checks each wait costs one of them (a user's probe, steered there); with them
    # no steered request reaches it, only those left to Envoy's fallback policy (exploration)
    # may: few, as nothing new turns up.
    codes = users(proxy, session, 600)
    leaked = down.count("/") - at_suspension
    left_to_envoy = stat(proxy, "explorations") + stat(proxy, "fallbacks") - left_to_envoy
    assert leaked <= left_to_envoy, f"{leaked} users' requests reached the suspended backend, " \
        f"{left_to_envoy} were left to Envoy"
    assert leaked <= 6 and codes.count(503) == leaked, (leaked, codes.count(503))
    wait_for(lambda: down.count(CHECK_PATH) >= 3, 30, "health checks of the suspended backend")
    # It recovers: a check passes, and it is picked again.
    down.failing = False
    wait_for(lambda: stat(proxy, "recoveries") >= 1, 30, "a passed check ends the suspension")
    before = down.count("/")
    assert users_in_parallel(proxy, 600) == [200] * 600
    share = (down.count("/") - before) / 600
    assert share > 0.15, f"its share after recovering: {share}"


class FleetAggregator:
    """Stands in for the aggregator: answers each report with a view of the clusters it names, every
    endpoint listed at weight 1, the cluster reported by `reporters` callers, and `served_age_ms` for
    the addresses in `served` (none by default: no caller's users were answered well)."""

    def __init__(self, reporters):
        self.reporters, self.served = reporters, {}
        self.server = StubServer(self._report, name="fleet-aggregator").start()
        self.port = self.server.port

    def _report(self, request: Request) -> Reply:
        report = json.loads(request.body)
        clusters = [{"name": c["name"], "reporters": self.reporters, "endpoints": [
            {"address": e["address"], "weight": 1.0, "inflight": 0, "peer_inflight": 0, "latency_us": 1000,
             **({"served_age_ms": self.served[e["address"]]} if e["address"] in self.served else {})}
            for e in c["endpoints"]]} for c in report["clusters"]]
        return Reply(body=json.dumps({"version": 1, "ttl_ms": 3000, "clusters": clusters}).encode())

    def close(self):
        self.server.close()


# A thousand callers report the cluster: each sends about 20 x 0.05 s / 1,000 = 0.1% of its due
# checks (a 50 ms probe interval that no longer backs off) and leaves the rest to the others; when
# the view says another caller's users were answered well by the suspended backend, it is readmitted
# at its next due check, without one.
def test_with_a_thousand_callers_a_filter_leaves_checks_to_them_and_readmits_on_their_evidence(group):
    backends = [Backend() for _ in range(3)]
    fleet = FleetAggregator(reporters=1000)
    try:
        config = {**CONFIG, "aggregator": {"cluster": envoy_configs.AGGREGATOR_CLUSTER, "report_interval_ms": 100}}
        proxy = envoy.start(group, "envoy-fleet", envoy_configs.render_client_envoy(
            [b.address for b in backends], "tailweight", wasm_path=paths.WASM, plugin_config=config,
            aggregator_port=fleet.port))
        session = requests.Session()
        assert users(proxy, session, 300) == [200] * 300
        wait_for(lambda: stat(proxy, "views_applied") >= 1, 30, "a view applied")
        down = max(backends, key=lambda b: b.count("/"))
        suspend(proxy, session, down)
        # ~20 due checks a second; alone (the fixture above) each would go out. Users' requests go on
        # meanwhile (an idle filter stops reporting, its view runs out and it checks alone again).
        for _ in range(5000):
            users(proxy, session, 1)
            if stat(proxy, "health_checks_left_to_others") >= 40:
                break
        sent = stat(proxy, "health_checks_sent")
        assert sent <= 3 and down.count(CHECK_PATH) == sent, (sent, down.count(CHECK_PATH))
        assert stat(proxy, "health_checks_left_to_others") >= 40
        assert stat(proxy, "readmissions_on_evidence") == 0, "nobody was answered well"
        # Another caller's check passed and its users are answered well: the view says so. (An
        # exploration, left to Envoy's least_request, can reach the backend first: its good answer
        # ends the suspension too, as a recovery. The readmission on evidence alone, without that
        # race, is sidecar/tests/checks.rs's.)
        down.failing = False
        fleet.served[down.address] = 0
        explorations = stat(proxy, "explorations")
        for _ in range(5000):
            users(proxy, session, 1)
            if stat(proxy, "recoveries") >= 1:
                break
        by_evidence = stat(proxy, "readmissions_on_evidence")
        assert by_evidence == 1 or stat(proxy, "explorations") > explorations, \
            "readmitted on the others' evidence, or by an exploration's good answer"
        assert stat(proxy, "recoveries") == 1
        before = down.count("/")
        assert users_in_parallel(proxy, 600) == [200] * 600
        share = (down.count("/") - before) / 600
        assert share > 0.15, f"its share after the readmission: {share}"
        assert stat(proxy, "health_checks_sent") <= 4
    finally:
        fleet.close()
        for b in backends:
            b.close()
