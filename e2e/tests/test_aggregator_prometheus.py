"""The aggregator's CPU source against a real Prometheus (Debian package) on 127.0.0.1: Prometheus
scrapes a tiny exporter this test controls every second; the aggregator polls Prometheus'
/api/v1/query and its view of each endpoint's CPU follows the exporter's values. When Prometheus
goes away the failures are counted and the aggregator keeps serving."""
import json
import threading

import pytest
import requests

from tailweight_e2e import aggregator
from tailweight_e2e.procs import ProcGroup, wait_for
from tailweight_e2e.prometheus import Prometheus
from tailweight_e2e.stub_server import Reply, Request, StubServer

CLUSTER = "outbound|8080||cpu.e2e.svc.cluster.local"
ENDPOINTS = ["10.1.0.1:8080", "10.1.0.2:8080"]


class Exporter:
    """/metrics with one gauge per endpoint, values set by the test."""

    def __init__(self):
        self.values = {}
        self.lock = threading.Lock()
        self.server = StubServer(self._metrics, name="exporter").start()
        self.port = self.server.port

    def _metrics(self, _request: Request) -> Reply:
        with self.lock:
            lines = ["# TYPE tailweight_e2e_cpu gauge"]
            lines += [f'tailweight_e2e_cpu{{endpoint="{ep}"}} {v}' for ep, v in self.values.items()]
        return Reply(body=("\n".join(lines) + "\n").encode(), headers=[("Content-Type", "text/plain; version=0.0.4")])

    def set(self, values):
        with self.lock:
            self.values = dict(values)

    def close(self):
        self.server.close()


class Reporter:
    """One simulated sidecar with growing cumulative counters."""

    def __init__(self, url):
        self.url = url
        self.round = 0

    def report(self):
        self.round += 1
        n = self.round * 50
        body = {
            "version": 1, "reporter": "e2e-client", "incarnation": 1, "interval_ms": 1000,
            "clusters": [{"name": CLUSTER, "endpoints": [
                {"address": ep, "requests": n, "errors": 0, "latency_sum_us": n * 2000, "inflight": 1,
                 "latency_ewma_us": 2000, "latency_age_ms": 5} for ep in ENDPOINTS]}],
        }
        r = requests.post(f"{self.url}/v1/report", data=json.dumps(body), timeout=5)
        assert r.status_code == 200, r.text

    def view(self):
        r = requests.get(f"{self.url}/v1/weights", params={"cluster": CLUSTER}, timeout=5)
        assert r.status_code == 200, r.text
        return {e["address"]: e for e in r.json()["clusters"][0]["endpoints"]}


def metric(url, name):
    """The value of a metric, summed over its label sets."""
    values = [float(line.rsplit(" ", 1)[1]) for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines()
              if line.startswith(name + " ") or line.startswith(name + "{")]
    assert values, f"{name} not in /metrics"
    return sum(values)


@pytest.fixture
def stack(tmp_path):
    exporter = Exporter()
    group = ProcGroup(tmp_path / "logs")
    try:
        prom = Prometheus(group, [f"127.0.0.1:{exporter.port}"], tmp_path / "prometheus", job="e2e")
        agg = aggregator.start(group, args=[
            "--identity=report", "--cpu-url", prom.url, "--cpu-query", "tailweight_e2e_cpu",
            "--cpu-ip-label", "endpoint", "--cpu-interval-ms", "300", "--cpu-timeout-ms", "1000",
            "--recompute-interval-ms", "200", "--log", "info",
        ])
        yield exporter, Reporter(agg.url), agg.url, prom.proc, agg.proc
    finally:
        group.close()
        exporter.close()


def follow(reporter, expected, what, proc, timeout_s=30):
    """Keep reporting until the aggregator's view shows `expected` CPU per endpoint (from metrics)."""

    def matches():
        reporter.report()
        view = reporter.view()
        return all(ep in view and view[ep]["cpu_source"] == "metrics" and view[ep]["cpu"] is not None
                   and abs(view[ep]["cpu"] - cpu) < 1e-9 for ep, cpu in expected.items())

    wait_for(matches, timeout_s, what, proc, interval_s=0.3)


def test_cpu_view_follows_the_exporter_through_prometheus(stack):
    exporter, reporter, url, prom, agg = stack
    exporter.set({ENDPOINTS[0]: 0.2, ENDPOINTS[1]: 0.6})
    follow(reporter, {ENDPOINTS[0]: 0.2, ENDPOINTS[1]: 0.6}, "first CPU values", agg)
    exporter.set({ENDPOINTS[0]: 0.75, ENDPOINTS[1]: 0.15})
    follow(reporter, {ENDPOINTS[0]: 0.75, ENDPOINTS[1]: 0.15}, "changed CPU values", agg)
    # Equal request rates, so the capacity is inverse to CPU: the second endpoint ends up heavier.
    def heavier():
        reporter.report()
        view = reporter.view()
        return view[ENDPOINTS[1]]["method"] == "cpu" and view[ENDPOINTS[1]]["weight"] > 2 * view[ENDPOINTS[0]]["weight"]
    wait_for(heavier, 30, "weights to follow CPU", agg, interval_s=0.3)
    assert metric(url, "tailweight_cpu_source_polls_total") >= 2
    assert 0 <= metric(url, "tailweight_cpu_source_staleness_seconds") < 5
    assert metric(url, "tailweight_cpu_source_series") == 2


def test_prometheus_going_away_is_counted_and_never_fatal(stack):
    exporter, reporter, url, prom, agg = stack
    exporter.set({ENDPOINTS[0]: 0.3, ENDPOINTS[1]: 0.3})
    follow(reporter, {ENDPOINTS[0]: 0.3, ENDPOINTS[1]: 0.3}, "CPU values", agg)
    prom.stop()
    wait_for(lambda: metric(url, "tailweight_cpu_source_errors_total") >= 3, 30,
             "CPU source errors to be counted", agg)
    assert agg.alive()
    reporter.report()
    assert requests.get(f"{url}/readyz", timeout=5).status_code == 200
    # The last values are kept while they are young enough to use.
    assert reporter.view()[ENDPOINTS[0]]["cpu"] == 0.3
    assert metric(url, "tailweight_cpu_source_staleness_seconds") > 0
