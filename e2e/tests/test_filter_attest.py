"""Attestations with a real Envoy and the real aggregator: a server-role filter with
`attest_clusters` counts what its endpoint served per source principal (here from the insecure
`attest_source_header`, as in a meshless setup) and POSTs it to /v1/attest; the aggregator takes it
only under its `--attest-rule`, and then counts only the cluster's real callers' reports.

Counts are asserted with margins real runs meet; nothing here times anything."""
import time

import pytest
import requests

from tailweight_e2e import aggregator, envoy, envoy_configs, paths
from tailweight_e2e.stub_server import Reply, StubServer

STAT = "wasmcustom.tailweight."
SHOP = "outbound|8080||shop.prod.svc.cluster.local"
FRONT = "spiffe://cluster.local/ns/prod/sa/frontend"


@pytest.fixture
def app():
    server = StubServer(lambda _: Reply(body=b"ok"), name="app").start()
    yield server.address
    server.close()


def attesting_server(group, app, agg, shell="wasm"):
    """A destination's sidecar attesting what it served, with the Wasm shell or the native one."""
    config = {"role": "server", "sync_interval_ms": 50, "attest_clusters": [SHOP], "attest_source_header": "x-source",
              "aggregator": {"cluster": envoy_configs.AGGREGATOR_CLUSTER, "report_interval_ms": 200}}
    module = {"native_path": paths.NATIVE} if shell == "native" else {"wasm_path": paths.WASM}
    yaml = envoy_configs.render_server_envoy(app, plugin_config=config, aggregator_port=agg.port, **module)
    return envoy.start(group, f"server-{len(group.procs)}", yaml)


def serve(server, count, principal=FRONT):
    session = requests.Session()
    for _ in range(count):
        assert session.get(server.url(), headers={"x-source": principal}, timeout=10).status_code == 200


def wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def report(reporter, endpoint, round_, errors_per_round):
    return {"version": 1, "reporter": reporter, "incarnation": 1, "interval_ms": 200,
            "clusters": [{"name": SHOP, "endpoints": [{
                "address": endpoint, "requests": 50 * round_, "errors": errors_per_round * round_,
                "latency_sum_us": (50 - errors_per_round) * round_ * 10_000, "inflight": 1,
                "latency_ewma_us": 10_000, "latency_age_ms": 0}]}]}


@pytest.mark.parametrize("shell", ["wasm", "native"])
def test_a_server_role_attests_what_it_served_and_only_callers_count(group, app, shell):
    # --identity report: a report's principal is its reporter field; --attest-rule any: the harness
    # has no mesh identities, so anyone may attest; --attest-address peer: the filter calls the
    # aggregator directly, so each attestation must name the sending Envoy's own IP (127.0.0.1).
    agg = aggregator.start(group, args=["--identity=report", "--attest-rule", "any", "--attest-address", "peer",
                                        "--recompute-interval-ms", "50"])
    server = attesting_server(group, app, agg, shell)
    endpoint = server.address()
    serve(server, 20)
    assert wait_for(lambda: server.stat(STAT + "attestations_sent") >= 2), server.stats(STAT)
    assert server.stat(STAT + "attestations_failed") == 0, server.log()
    # The real caller reports A healthy; two principals that never called it claim 90% errors.
    # While the frontend keeps calling, the endpoint goes on attesting it.
    for round_ in range(1, 16):
        serve(server, 5)
        for reporter, errors in ((FRONT, 0), ("spiffe://cluster.local/ns/dev/sa/a0", 45),
                                 ("spiffe://cluster.local/ns/dev/sa/a1", 45)):
            r = requests.post(f"{agg.url}/v1/report", json=report(reporter, endpoint, round_, errors), timeout=5)
            assert r.status_code == 200, r.text
        time.sleep(0.2)
    page = requests.get(f"{agg.url}/v1/weights", params={"cluster": SHOP}, timeout=5).json()
    [decision] = page["clusters"][0]["endpoints"]
    assert decision["address"] == endpoint and not decision["ejected"], decision
    assert decision["eps"] == 0, decision
    assert server.stat(STAT + "attestations_failed") == 0
    metrics = requests.get(f"{agg.url}/metrics", timeout=5).text
    assert 'tailweight_reports_rejected_total{reason="attest_not_senders_address"} 0' in metrics


def test_the_aggregator_refuses_attestations_its_rule_does_not_allow(group, app):
    # The default rule (namespace) needs a mesh identity in the service's namespace: a meshless
    # caller has none, so every attestation is refused, counted, and traffic is untouched.
    agg = aggregator.start(group, args=["--identity=report"])
    server = attesting_server(group, app, agg)
    serve(server, 20)
    assert wait_for(lambda: server.stat(STAT + "attestations_failed") >= 2), server.stats(STAT)
    assert "aggregator answered 403 to an attestation" in server.log()
    metrics = requests.get(f"{agg.url}/metrics", timeout=5).text
    assert 'tailweight_reports_rejected_total{reason="attest_not_allowed"}' in metrics
