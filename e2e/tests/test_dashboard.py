"""The chart's Grafana dashboard (charts/tailweight/dashboards/tailweight.json) has no dead panel:
a real Prometheus scrapes a real client Envoy (the filter with per-endpoint metrics and the chart's
sidecar bootstrap override, whose stats_tags label the pick counters) and the real aggregator it
reports to, during short bounded Fortio runs against emulated backends; every query of every panel,
with Grafana's variables as a viewer of all services has them, returns data. Then one backend
answers 503 to everything, and the ejection panel's query shows exactly that endpoint ejected.

Grafana itself never runs (AGPL): only the queries, which are what a panel draws."""
import json

import yaml

from harness import emulator as emu
from harness import fortio, overhead_configs
from tailweight_e2e import aggregator, envoy, envoy_configs, paths
from tailweight_e2e.procs import wait_for
from tailweight_e2e.prometheus import Prometheus

DASHBOARD = paths.REPO / "charts" / "tailweight" / "dashboards" / "tailweight.json"
SCRAPE_S = 1.0
# Grafana's variables: every service, and a rate window of a few scrapes (Grafana's
# $__rate_interval is at least four scrape intervals).
VARIABLES = {"$__rate_interval": "8s", "$cluster": ".*"}
EJECTIONS = "Ejected endpoints"


def panel_queries() -> dict[str, list[str]]:
    """Each panel's title and its targets' PromQL with the variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = {}
    for panel in dashboard["panels"]:
        exprs = []
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: a variable the test does not fill in: {expr}"
            exprs.append(expr)
        queries[panel["title"]] = exprs
    return queries


def test_every_panel_has_data_and_a_failing_endpoint_shows_as_ejected(group, tmp_path):
    queries = panel_queries()
    assert len(queries) == 10 and EJECTIONS in queries, list(queries)
    backends = emu.start(group, [emu.BackendSettings(workers=4, base_ms=2.0) for _ in range(3)])
    agg = aggregator.start(group, args=["--identity=report", "--recompute-interval-ms", "200"])
    # One sidecar stands for many: its explorations (left to least_request) keep reaching a failing
    # endpoint after it suspended it, as the probes of a mesh's many sidecars would, so the
    # aggregator gets the evidence to eject it.
    plugin = envoy_configs.plugin_config_for("tailweight", report_interval_ms=250,
                                             extra={"per_endpoint_metrics": True, "explore_ratio": 0.3})
    cfg = envoy_configs.render_client_envoy(backends.addresses, "tailweight", wasm_path=paths.WASM,
                                            plugin_config=plugin, aggregator_port=agg.port)
    cfg = overhead_configs.with_sidecar_bootstrap_override(yaml.safe_load(cfg))
    proxy = envoy.start(group, "envoy-client", yaml.safe_dump(cfg))
    sidecar = proxy.admin.removeprefix("http://")
    prom = Prometheus(group, [f"127.0.0.1:{agg.port}"], tmp_path / "prometheus", scrape_interval_s=SCRAPE_S,
                      job="aggregator", more_jobs=[("sidecars", "/stats/prometheus", [sidecar])])

    def load(name, seconds, wait=True):
        out = tmp_path / f"{name}.json"
        proc = group.start(name, fortio.load_argv(proxy.url(), 100, 4, seconds, out))
        if not wait:
            return proc
        proc.popen.wait(seconds + 60)
        return fortio.counts(fortio.read(out))

    total, errors = load("healthy", 6)
    assert errors == 0 and total >= 500

    def all_panels_have_data():
        dead = {title: expr for title, exprs in queries.items() for expr in exprs if not prom.query(expr)}
        assert not dead, f"panels without data: {dead}"
        return True

    wait_for(all_panels_have_data, 30, "every panel's queries to return data", prom.proc, interval_s=1.0)
    # The share panel: per cluster, the endpoints' shares add up to 1, every endpoint picked.
    shares = {r["metric"]["upstream_endpoint"]: float(r["value"][1])
              for r in prom.query(queries["Share of picks per endpoint"][0])}
    assert set(shares) == set(backends.addresses) and abs(sum(shares.values()) - 1) < 1e-6, shares
    ejected = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[EJECTIONS][0])}
    assert ejected == {a: 0.0 for a in backends.addresses}, ejected

    failing = backends.addresses[1]
    backends.event([1], "fail")
    # The aggregator holds what the sidecars report now: look while they send traffic.
    failing_load = load("failing", 25, wait=False)

    def shown_ejected():
        rows = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[EJECTIONS][0])}
        assert rows == {a: float(a == failing) for a in backends.addresses}, rows
        return rows

    wait_for(shown_ejected, 25, f"{failing} in the ejection panel", prom.proc, interval_s=1.0)
    suspensions = prom.query(queries["Suspensions and recoveries"][0].replace("rate(", "increase(").replace(
        VARIABLES["$__rate_interval"], "5m"))
    assert float(suspensions[0]["value"][1]) > 0, suspensions
    failing_load.popen.wait(60)
