"""Server-side load stamps with real Envoys: a server-role filter (the destination's own sidecar,
inbound) stamps each response with the endpoint's requests in flight; a client filter with
`load_stamp_max_age_ms` reads the stamps and removes them.

Counts are asserted with margins real runs meet; nothing here times anything."""
import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import yaml

from harness import emulator as emu
from harness import fortio
from tailweight_e2e import envoy, envoy_configs, paths
from tailweight_e2e.stub_server import Reply, StubServer

STAMP = "x-tailweight-load"
STAT = "wasmcustom.tailweight."
# A client filter that reads the stamps of its one cluster.
READING = {"load_stamp_max_age_ms": 100, "load_stamp_clusters": [envoy_configs.CLUSTER]}


def server_envoy(group, app, plugin_config=None, concurrency=1, shell="wasm"):
    """The destination's sidecar, with the Wasm shell or the native one (the same server role)."""
    name = f"server-{len(group.procs)}"
    module = {"native_path": paths.NATIVE} if shell == "native" else {"wasm_path": paths.WASM}
    return envoy.start(group, name, envoy_configs.render_server_envoy(app, plugin_config=plugin_config, **module),
                       concurrency=concurrency)


def rif(response):
    value = response.headers[STAMP]
    assert value.startswith("1;rif="), value
    return int(value.removeprefix("1;rif="))


@pytest.mark.parametrize("concurrency, shell", [(1, "wasm"), (2, "wasm"), (2, "native")])
def test_stamps_count_the_requests_in_flight_at_the_endpoint(group, concurrency, shell):
    # 600 ms requests, served all at once (16 workers): 8 sent together are in flight together.
    app = emu.start(group, [emu.BackendSettings(workers=16, base_ms=600.0)])
    server = server_envoy(group, app.addresses[0], {"role": "server", "sync_interval_ms": 20},
                          concurrency=concurrency, shell=shell)
    session = requests.Session()
    alone = [rif(session.get(server.url(), timeout=10)) for _ in range(3)]
    assert alone == [0, 0, 0], "a request alone leaves nothing in flight behind it"

    start = threading.Barrier(8)

    def one(_):
        start.wait(10)
        # A connection of its own each, so that with two workers both get some.
        return rif(requests.get(server.url(), timeout=10))

    with ThreadPoolExecutor(8) as pool:
        together = sorted(pool.map(one, range(8)))
    # Each response counts the others still in flight when it leaves: at most the other 7; the first
    # to leave sees (about) all 7, also when the other worker's requests are on its count.
    assert all(0 <= n <= 7 for n in together), together
    assert together[-1] >= 6, together
    if concurrency == 1:
        assert together[0] == 0, "the last to leave is alone (one worker's count is exact)"
        assert len(set(together)) >= 6, together
    assert server.stat(STAT + "stamps_written") == 3 + 8
    assert server.stat(STAT + "stamps_replaced") == 0
    assert server.stat(STAT + "picks", default=-1) == -1, "a server-role filter defines no steering counters"
    assert "is the WasmPlugin's `match` mode right?" not in server.log(), "an inbound listener suits the role"


def test_a_server_role_on_an_outbound_listener_is_warned_about_and_kept(group):
    app = emu.start(group, [emu.BackendSettings(workers=4, base_ms=1.0)])
    config = yaml.safe_load(envoy_configs.render_server_envoy(app.addresses[0], paths.WASM))
    config["static_resources"]["listeners"][0]["traffic_direction"] = "OUTBOUND"
    server = envoy.start(group, "server-outbound", yaml.safe_dump(config))
    session = requests.Session()
    for _ in range(10):
        assert rif(session.get(server.url(), timeout=10)) == 0
    warnings = [line for line in server.log().splitlines() if "is the WasmPlugin's `match` mode right?" in line]
    assert len(warnings) == 1 and 'role "server" runs on an outbound listener' in warnings[0], warnings


class ForgingApp:
    """An application that writes the stamp header itself into every response, once per value."""

    def __init__(self, values=("1;rif=999", "1;rif=998")):
        reply = Reply(body=b"ok", headers=[(STAMP, v) for v in values])
        self.server = StubServer(lambda _: reply, name="forging-app").start()
        self.address = self.server.address

    def close(self):
        self.server.close()


def test_a_stamp_forged_by_the_application_is_replaced(group):
    app = ForgingApp()
    try:
        server = server_envoy(group, app.address)
        session = requests.Session()
        for _ in range(20):
            r = session.get(server.url(), timeout=10)
            assert r.status_code == 200
            # requests joins repeated headers with ", ": one value means the forged ones are gone.
            assert r.headers[STAMP] == "1;rif=0", r.headers
        assert server.stat(STAT + "stamps_replaced") == 20
        assert server.stat(STAT + "stamps_written") == 20
    finally:
        app.close()


def test_a_client_counts_and_drops_a_stamp_it_cannot_read(group):
    app = ForgingApp(values=("1;rif=lots",))
    try:
        client = envoy.start(group, "client", envoy_configs.render_client_envoy(
            [app.address], "tailweight_local", wasm_path=paths.WASM, plugin_config=READING))
        session = requests.Session()
        for _ in range(20):
            r = session.get(client.url(), timeout=10)
            assert r.status_code == 200 and STAMP not in r.headers, r.headers
        assert client.stat(STAT + "stamps_invalid") == 20
        assert client.stat(STAT + "stamps_read") == 0
    finally:
        app.close()


def test_a_bad_role_is_a_configuration_error_and_traffic_passes(group):
    app = emu.start(group, [emu.BackendSettings(workers=4, base_ms=1.0)])
    server = server_envoy(group, app.addresses[0], {"role": "severs"})
    session = requests.Session()
    responses = [session.get(server.url(), timeout=10) for _ in range(20)]
    assert [r.status_code for r in responses] == [200] * 20
    assert all(STAMP not in r.headers for r in responses)
    message = 'invalid plugin configuration: field `role`: expected "client" or "server", got "severs"'
    assert message in server.log()
    assert server.stat(STAT + "config_errors") >= 1


def test_a_client_reads_stamps_removes_them_and_avoids_the_busy_endpoint(group, tmp_path):
    # Two endpoints behind their own server-role sidecars; endpoint 1 is 5x slower, so its
    # requests pile up there and its stamps say so.
    apps = emu.start(group, [emu.BackendSettings(workers=4, base_ms=4.0, speed=s) for s in (1.0, 5.0)])
    servers = [server_envoy(group, a) for a in apps.addresses]
    endpoints = [s.address() for s in servers]
    reading = envoy.start(group, "client-reading", envoy_configs.render_client_envoy(
        endpoints, "tailweight_local", wasm_path=paths.WASM, plugin_config=READING))
    r = requests.get(reading.url(), timeout=10)
    assert r.status_code == 200 and STAMP not in r.headers, r.headers

    before = apps.requests_total()
    out = tmp_path / "load.json"
    proc = group.start("fortio", fortio.load_argv(reading.url(), 150, 8, 6, out))
    proc.popen.wait(70)
    total, errors = fortio.counts(fortio.read(out))
    served = [a - b for a, b in zip(apps.requests_total(), before, strict=True)]
    assert errors == 0 and sum(served) >= total
    assert served[1] < 0.5 * served[0], served
    read = reading.stat(STAT + "stamps_read")
    assert read >= 0.9 * (total + 1), (read, total)
    assert reading.stat(STAT + "stamps_invalid") == 0
    assert sum(s.stat(STAT + "stamps_written") for s in servers) >= read

    # Without the key the client reads nothing: the stamp reaches the caller untouched.
    plain = envoy.start(group, "client-plain", envoy_configs.render_client_envoy(
        endpoints, "tailweight_local", wasm_path=paths.WASM, plugin_config={}))
    session = requests.Session()
    for _ in range(10):
        r = session.get(plain.url(), timeout=10)
        assert r.status_code == 200 and r.headers[STAMP].startswith("1;rif="), r.headers
    assert plain.stat(STAT + "stamps_read") == 0


def test_a_client_and_a_server_role_sharing_one_vm_keep_their_own_state(group):
    # Filters with the same vm_config share one VM per worker: each plugin is a root context of its
    # own in the module, with its own configuration. Here an outbound client-role listener and an
    # inbound server-role listener in one Envoy, both in front of the same application.
    apps = emu.start(group, [emu.BackendSettings(workers=2, base_ms=1.0)])
    app = apps.addresses[0]
    bootstrap = yaml.safe_load(envoy_configs.render_client_envoy(
        [app], "tailweight_local", wasm_path=paths.WASM, plugin_config={}))
    server = yaml.safe_load(envoy_configs.render_server_envoy(app, paths.WASM))
    inbound = server["static_resources"]["listeners"][0]
    inbound["name"] = inbound["stat_prefix"] = "inbound"
    bootstrap["static_resources"]["listeners"].append(inbound)
    bootstrap["static_resources"]["clusters"] += server["static_resources"]["clusters"]
    proxy = envoy.start(group, "two-roles", yaml.safe_dump(bootstrap, sort_keys=False))

    session = requests.Session()
    for _ in range(20):
        r = session.get(proxy.url(), timeout=10)
        assert r.status_code == 200 and STAMP not in r.headers, r.headers
        r = session.get(proxy.url("inbound"), timeout=10)
        assert r.status_code == 200 and rif(r) >= 0
    counted = {name: proxy.stat(STAT + name) for name in ("picks", "explorations", "fallbacks", "stamps_written")}
    assert counted["picks"] + counted["explorations"] + counted["fallbacks"] == 20, counted
    assert counted["stamps_written"] == 20, counted
    assert proxy.stat(STAT + "config_errors") == 0


class LyingBackends:
    """Backends alike (each answers after `service_s`, one thread per request), counting what they
    serve; the first writes `1;rif=0` into every response (an empty queue, whatever it holds, as a
    destination without the server role, or a compromised one, could), the others no stamp."""

    def __init__(self, count: int = 3, service_s: float = 0.06):
        self.served = [0] * count
        self.lock = threading.Lock()
        self.servers = [StubServer(self._handler(i, service_s), keep_alive=True, name=f"backend-{i}").start()
                        for i in range(count)]

    def _handler(self, i, service_s):
        reply = Reply(body=b"ok", headers=[(STAMP, "1;rif=0")] if i == 0 else [])

        def handle(_):
            time.sleep(service_s)
            with self.lock:
                self.served[i] += 1
            return reply
        return handle

    def shares_since(self, before):
        served = [a - b for a, b in zip(self.served, before, strict=True)]
        return [n / max(1, sum(served)) for n in served], served

    def close(self):
        for s in self.servers:
            s.close()


def test_a_lying_destination_moves_nothing_untrusted_and_is_bounded_trusted(group, tmp_path):
    """Two steered clusters alike, each of three backends alike whose first one lies (`1;rif=0` on
    every response, the others stamp nothing): `backends` is in `load_stamp_clusters`, `plain` is
    not. Untrusted, the stamps are removed unread: the liar's share is the two-choice pick's among
    equals, a third. Trusted, they are read, but a stamp's queue is never below this proxy's own
    requests in flight there: the liar wins a pick only while it holds fewer of them than the
    endpoint it is compared with. (Believed as before `load_stamp_clusters`, the lie took 60-74% in
    either cluster: 6 runs of this test with the module before it, the key left out.)"""
    trusted, untrusted = LyingBackends(), LyingBackends()
    try:
        config = {"clusters": [envoy_configs.CLUSTER, "plain"], "load_stamp_max_age_ms": 100,
                  "load_stamp_clusters": [envoy_configs.CLUSTER]}
        bootstrap = yaml.safe_load(envoy_configs.render_client_envoy(
            [s.address for s in trusted.servers], "tailweight_local", wasm_path=paths.WASM, plugin_config=config))
        # The second cluster, `plain`: the first one's copy but for its endpoints, on the route /plain.
        plain = copy.deepcopy(bootstrap["static_resources"]["clusters"][0])
        plain["name"] = plain["load_assignment"]["cluster_name"] = "plain"
        plain["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": s.port}}}}
            for s in untrusted.servers]
        bootstrap["static_resources"]["clusters"].append(plain)
        hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
        routes.insert(0, {"match": {"prefix": "/plain"}, "route": {**routes[0]["route"], "cluster": "plain"}})
        client = envoy.start(group, "client-two-clusters", yaml.safe_dump(bootstrap, sort_keys=False))
        paths_of = {"trusted": "", "untrusted": "plain"}

        session = requests.Session()
        for path in paths_of.values():
            for _ in range(10):
                r = session.get(client.url() + path, timeout=10)
                assert r.status_code == 200 and STAMP not in r.headers, (path, r.headers)

        before = {"trusted": list(trusted.served), "untrusted": list(untrusted.served)}
        # Both clusters at once, as fast as 12 connections each go (0.06 s answers), for 3 s.
        loads = [group.start(f"fortio-{name}", fortio.load_argv(client.url() + path, 0, 12, 3,
                                                                tmp_path / f"{name}.json"))
                 for name, path in paths_of.items()]
        for proc in loads:
            assert proc.popen.wait(60) == 0
        for name in paths_of:
            total, errors = fortio.counts(fortio.read(tmp_path / f"{name}.json"))
            assert errors == 0 and total >= 150, (name, total, errors)
        trusted_share, trusted_served = trusted.shares_since(before["trusted"])
        untrusted_share, untrusted_served = untrusted.shares_since(before["untrusted"])
        print(f"liar's share: trusted {trusted_share[0]:.3f} {trusted_served}, "
              f"untrusted {untrusted_share[0]:.3f} {untrusted_served}")
        # Untrusted: a third, as without the header (0.30-0.38 in 6 runs).
        assert untrusted_share[0] <= 0.43, untrusted_served
        # Trusted: read, and bounded by what this proxy holds there (0.43-0.50 in 6 runs).
        assert trusted_share[0] <= 0.53, trusted_served
        # Every stamp of the liars went through the filter: read, or removed unread.
        assert client.stat(STAT + "stamps_read") == trusted.served[0], trusted.served
        assert client.stat(STAT + "stamps_untrusted") == untrusted.served[0], untrusted.served
        assert client.stat(STAT + "stamps_invalid") == 0 and client.stat(STAT + "config_errors") == 0
        assert client.stat(STAT + "picks") >= 0.9 * sum(trusted.served + untrusted.served), "the filter steers"
    finally:
        trusted.close()
        untrusted.close()
