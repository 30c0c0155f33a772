"""The chart's Grafana dashboard (charts/tailweight/dashboards/tailweight.json) has no dead panel and
its variables filter every panel: a real Prometheus scrapes two real client Envoys (the filter with
per-endpoint metrics and the chart's sidecar bootstrap override, whose stats_tags label the pick
counters) and the real aggregator one of them reports to, each target labelled with the namespace
and pod the Prometheus Operator's monitors add, during short bounded Fortio runs against emulated
backends. With every variable at "All", every query of every panel returns data; with one namespace,
pod, service, endpoint and aggregator replica chosen, every panel shows that selection only; with
values nothing carries, every panel is empty. The other sidecar's aggregator is a port nothing
listens on: it never receives a view, and is listed as such, not drawn as a view of age 0. Then one
backend answers 503 to everything, and the ejection panel's query shows exactly that endpoint
ejected.

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
# Grafana's $__rate_interval is at least four scrape intervals.
RATE_INTERVAL = "8s"
# Seconds of load in the healthy phase: longer than its checks take on a loaded host.
HEALTHY_S = 30
VARIABLES = ("namespace", "pod", "cluster", "endpoint", "aggregator")
# Each variable at "All" (its allValue), as a viewer of everything has them.
ALL = dict.fromkeys(VARIABLES, ".*")
NAMESPACE = "shop"
VIEWED, ALONE = "client-viewed-0", "client-alone-0"
AGGREGATOR_NAMESPACE, AGGREGATOR_POD = "tailweight", "tailweight-aggregator-0"
EJECTIONS = "Ejected endpoints"
SHARES = "Share of picks per endpoint"
AGE = "Age of the sidecars' views"
NEVER = "Sidecars that never received a view"
WHY = "Why does this endpoint get little traffic"


def dashboard_variables() -> set[str]:
    return {v["name"] for v in json.loads(DASHBOARD.read_text())["templating"]["list"] if v["type"] == "query"}


def panel_queries(values: dict[str, str]) -> dict[str, list[str]]:
    """Each panel's title and its targets' PromQL with Grafana's variables set to `values`."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = {}
    for panel in dashboard["panels"]:
        exprs = []
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
            for name in sorted(values, key=len, reverse=True):
                expr = expr.replace(f"${name}", values[name])
            assert "$" not in expr, f"{panel['title']}: a variable the test does not fill in: {expr}"
            exprs.append(expr)
        queries[panel["title"]] = exprs
    return queries


def test_the_dashboard_has_the_variables_the_test_sets():
    assert dashboard_variables() == set(VARIABLES)


def test_every_panel_has_data_filters_by_its_variables_and_a_failing_endpoint_shows_as_ejected(group, tmp_path):
    queries = panel_queries(ALL)
    assert len(queries) == 12 and {EJECTIONS, SHARES, AGE, NEVER, WHY} <= set(queries), list(queries)
    backends = emu.start(group, [emu.BackendSettings(workers=4, base_ms=2.0) for _ in range(3)])
    agg = aggregator.start(group, args=["--identity=report", "--recompute-interval-ms", "200"])
    # One sidecar stands for many: its explorations (left to least_request) keep reaching a failing
    # endpoint after it suspended it, as the probes of a mesh's many sidecars would, so the
    # aggregator gets the evidence to eject it.
    plugin = envoy_configs.plugin_config_for("tailweight", report_interval_ms=250,
                                             extra={"per_endpoint_metrics": True, "explore_ratio": 0.3})

    def sidecar(name, aggregator_port):
        cfg = envoy_configs.render_client_envoy(backends.addresses, "tailweight", wasm_path=paths.WASM,
                                                plugin_config=plugin, aggregator_port=aggregator_port)
        cfg = overhead_configs.with_sidecar_bootstrap_override(yaml.safe_load(cfg))
        return envoy.start(group, name, yaml.safe_dump(cfg))

    proxy = sidecar("envoy-client", agg.port)
    # Its aggregator is a reserved port nothing listens on: every report fails, no view arrives.
    alone = sidecar("envoy-client-alone", group.reserve_port())
    targets = {proxy.admin.removeprefix("http://"): VIEWED, alone.admin.removeprefix("http://"): ALONE}
    labels = {address: {"namespace": NAMESPACE, "pod": pod} for address, pod in targets.items()}
    labels[f"127.0.0.1:{agg.port}"] = {"namespace": AGGREGATOR_NAMESPACE, "pod": AGGREGATOR_POD}
    prom = Prometheus(group, [f"127.0.0.1:{agg.port}"], tmp_path / "prometheus", scrape_interval_s=SCRAPE_S,
                      job="aggregator", more_jobs=[("sidecars", "/stats/prometheus", list(targets))],
                      target_labels=labels)

    def load(name, client, seconds, wait=True):
        out = tmp_path / f"{name}.json"
        proc = group.start(name, fortio.load_argv(client.url(), 100, 4, seconds, out))
        if not wait:
            return proc
        proc.popen.wait(seconds + 60)
        return fortio.counts(fortio.read(out))

    # Load runs through every check of the healthy phase: each rate panel then has a live rate, and
    # a check that finds a window empty (a scrape loop stalled on a loaded host) polls again.
    alone_load = load("healthy-alone", alone, HEALTHY_S, wait=False)
    healthy_load = load("healthy", proxy, HEALTHY_S, wait=False)

    def dead_panels(selected):
        return {title: expr for title, exprs in selected.items() for expr in exprs if not prom.query(expr)}

    def all_panels_have_data():
        dead = dead_panels(queries)
        assert not dead, f"panels without data: {dead}"
        # The share panel: per cluster, the endpoints' shares add up to 1, every endpoint picked.
        shares = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[SHARES][0])}
        assert set(shares) == set(backends.addresses) and abs(sum(shares.values()) - 1) < 1e-6, shares
        return True

    wait_for(all_panels_have_data, 30, "every panel's queries to return data", prom.proc, interval_s=1.0)
    ejected = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[EJECTIONS][0])}
    assert ejected == {a: 0.0 for a in backends.addresses}, ejected

    # Never received a view: listed, and absent from the age panel, though its age gauge reads 0.
    never = {(r["metric"]["namespace"], r["metric"]["pod"]) for r in prom.query(queries[NEVER][0])}
    assert never == {(NAMESPACE, ALONE)}, never
    aged = {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(queries[AGE][0])}
    assert set(aged) == {VIEWED}, aged
    raw = prom.query(f'tailweight_weights_age_ms{{pod="{ALONE}"}}')
    assert [float(r["value"][1]) for r in raw] == [0.0], raw

    # One of each chosen: every panel has data but the never-received list, and shows the choice only.
    cluster = next(iter(prom.query(queries[SHARES][0])))["metric"]["upstream_cluster"]
    chosen = {"namespace": NAMESPACE, "pod": VIEWED, "cluster": cluster, "endpoint": backends.addresses[0],
              "aggregator": AGGREGATOR_POD}
    one = panel_queries(chosen)
    allowed = {"namespace": {NAMESPACE, AGGREGATOR_NAMESPACE}, "pod": {VIEWED, AGGREGATOR_POD},
               "upstream_cluster": {cluster}, "upstream_endpoint": {backends.addresses[0]}}

    def the_choice_only():
        dead = dead_panels(one)
        assert set(dead) == {NEVER}, dead
        for title, exprs in one.items():
            for expr in exprs:
                for row in prom.query(expr):
                    assert all(row["metric"][k] in values for k, values in allowed.items() if k in row["metric"]), \
                        (title, row)
        assert [r["metric"]["upstream_endpoint"] for r in prom.query(one[SHARES][0])] == [backends.addresses[0]]
        return True

    wait_for(the_choice_only, 30, "every panel to show the one chosen", prom.proc, interval_s=1.0)
    alone_only = panel_queries({**chosen, "pod": ALONE})
    assert not prom.query(alone_only[AGE][0]) and prom.query(alone_only[NEVER][0])
    # Values no series carries: every panel is empty, so no query escapes the variables.
    nothing = panel_queries(dict.fromkeys(VARIABLES, "no-such-value"))
    escaping = [(title, expr) for title, exprs in nothing.items() for expr in exprs if prom.query(expr)]
    assert not escaping, escaping

    for proc in (alone_load, healthy_load):
        proc.popen.wait(HEALTHY_S + 60)
    total, errors = fortio.counts(fortio.read(tmp_path / "healthy.json"))
    assert errors == 0 and total >= 500

    failing = backends.addresses[1]
    backends.event([1], "fail")
    # The aggregator holds what the sidecars report now: look while they send traffic.
    failing_load = load("failing", proxy, 25, wait=False)

    def shown_ejected():
        rows = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[EJECTIONS][0])}
        assert rows == {a: float(a == failing) for a in backends.addresses}, rows
        return rows

    wait_for(shown_ejected, 25, f"{failing} in the ejection panel", prom.proc, interval_s=1.0)
    # The panel that says why: the failing endpoint is ejected by the aggregator, the others not.
    why_ejected = {r["metric"]["upstream_endpoint"]: float(r["value"][1]) for r in prom.query(queries[WHY][2])}
    assert why_ejected == {a: float(a == failing) for a in backends.addresses}, why_ejected
    suspensions = prom.query(queries["Suspensions and recoveries"][0].replace("rate(", "increase(").replace(
        RATE_INTERVAL, "5m"))
    assert float(suspensions[0]["value"][1]) > 0, suspensions
    failing_load.popen.wait(60)
