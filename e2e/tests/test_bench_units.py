"""Pure parts of the benchmark harness: scenario checks, operator rule, histogram merge, settle time,
Envoy config rendering (validated by the real Envoy)."""
import json
import math
import re

import pytest
import yaml

from bench import analysis, fortio, operator, overhead
from bench.scenario import ScenarioError, load, parse
from tailweight_e2e import envoy, paths
from tailweight_e2e.envoy_configs import POLICIES, plugin_config_for, render_client_envoy, render_eds, write_eds

SCENARIOS = paths.REPO / "e2e" / "scenarios"


def minimal(**over):
    data = {"name": "t", "duration_s": 5, "policies": ["round_robin"],
            "backends": [{"count": 2, "workers": 1, "base_ms": 5}],
            "clients": {"count": 1, "qps": 10, "connections": 1}}
    data.update(over)
    return data


@pytest.mark.parametrize("name", ["seed-fib.yaml", "slowdown.yaml"])
def test_shipped_scenarios_load(name):
    s = load(SCENARIOS / name)
    assert s.clients.count >= 4
    assert set(s.policies) == set(POLICIES)


def test_seed_scenario_overloads_the_slowest_backend_under_an_even_split():
    s = load(SCENARIOS / "seed-fib.yaml")
    assert [b.speed for b in s.backends].count(1.0) == 3 and len(s.backends) == 15
    even = s.clients.qps / len(s.backends)
    assert even > min(b.capacity_rps for b in s.backends), "an even split must overload fib29"
    assert s.clients.qps < 0.5 * s.capacity_rps, "total well under capacity"


def test_slowdown_scenario_slows_one_of_ten_by_five():
    s = load(SCENARIOS / "slowdown.yaml")
    assert len(s.backends) == 10 and len({(b.speed, b.base_ms, b.workers) for b in s.backends}) == 1
    assert [(e.at_s, len(e.backends), e.action, e.value) for e in s.events] == [(20, 1, "speed", 5.0)]


def test_groups_flatten_in_order():
    s = parse(minimal(backends=[{"count": 2, "workers": 2, "base_ms": 10},
                                {"count": 1, "workers": 1, "base_ms": 10, "speed": 2}]))
    assert [(b.index, b.speed) for b in s.backends] == [(0, 1.0), (1, 1.0), (2, 2.0)]
    assert s.backends[2].capacity_rps == pytest.approx(50.0)
    assert s.capacity_rps == pytest.approx(450.0)


@pytest.mark.parametrize("over,needle", [
    ({"bogus": 1}, "unknown key(s) ['bogus']"),
    ({"policies": ["magic"]}, "unknown policy 'magic'"),
    ({"backends": []}, "non-empty list"),
    ({"backends": [{"count": 1, "workers": 0, "base_ms": 5}]}, "backends[0].workers"),
    ({"backends": [{"count": 1, "workers": 1}]}, "missing key(s) ['base_ms']"),
    ({"clients": {"count": 1, "qps": 10}}, "missing key(s) ['connections']"),
    ({"events": [{"at_s": 1, "backends": [5], "action": "stop"}]}, "events[0].backends"),
    ({"events": [{"at_s": 1, "backends": [0], "action": "speed"}]}, "needs value"),
    ({"events": [{"at_s": 1, "backends": [0], "action": "fail", "value": 2}]}, "takes no value"),
    ({"events": [{"at_s": 1, "backends": [0], "action": "melt"}]}, "events[0].action"),
    ({"events": [{"at_s": 99, "backends": [0], "action": "stop"}]}, "events[0].at_s"),
    ({"name": "a b"}, "name:"),
])
def test_bad_scenarios_say_where(over, needle):
    with pytest.raises(ScenarioError) as e:
        parse(minimal(**over))
    assert needle in str(e.value)


def test_unreadable_scenario_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load(tmp_path / "missing.yaml")


# ---- operator rule (DESIGN.md "Peers"; numbers from sim/operator-rule.json) ----

R = operator.RULE


def test_operator_rule_is_the_file_the_simulator_compiles_in():
    rust = paths.REPO / "sim" / "src" / "policy" / "operator.rs"
    (included,) = re.findall(r'include_str!\("([^"]+)"\)', rust.read_text())
    assert (rust.parent / included).resolve() == operator.RULE_FILE.resolve()
    assert operator.load_rule(operator.RULE_FILE) == R
    assert operator.PERIOD_S == R.period_s


def test_operator_rule_file_missing_a_number_is_one_clear_error(tmp_path):
    bad = tmp_path / "rule.json"
    doc = json.loads(operator.RULE_FILE.read_text())
    del doc["dead_band"]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"rule\.json: KeyError: 'dead_band'"):
        operator.load_rule(bad)


def test_operator_rule_moves_hot_endpoints_down_one_step_per_unit_distance():
    m = R.median_weight
    out = operator.step({"a": m, "b": m, "c": m}, {"a": 2.0, "b": 1.0, "c": 0.0})  # mean of non-zero = 1.5
    # a: distance +1/3; b: -1/3; c: zero CPU still counts as distance -1.
    raw = {"a": m * (1 - R.step / 3), "b": m * (1 + R.step / 3), "c": m * (1 + R.step)}
    med = sorted(raw.values())[1]
    assert out == pytest.approx({k: v * m / med for k, v in raw.items()})


def test_operator_rule_ignores_small_distances_and_clamps():
    m = R.median_weight
    inside = 1.0 + 0.8 * R.dead_band
    assert operator.step({"a": m, "b": m}, {"a": 1.0, "b": inside}) == pytest.approx({"a": m, "b": m})
    out = operator.step({"a": 1.5 * R.max_weight, "b": 0.5 * R.min_weight, "c": m}, {"a": 1.0, "b": 3.0, "c": 2.0})
    # a moves up, b down, both beyond the clamp; c unchanged (distance 0) is the median.
    assert out == pytest.approx({"a": R.max_weight, "b": R.min_weight, "c": m})


def test_operator_rule_follows_its_numbers():
    other = operator.OperatorRule(period_s=1, dead_band=0.5, step=0.1, min_weight=1, max_weight=1e6,
                                  median_weight=10, new_endpoint_weight=7)
    out = operator.step({"a": 10, "b": 10}, {"a": 1.0, "b": 1.3, "c": 0.9}, other)  # mean 1.0667
    assert out["a"] == pytest.approx(10) and out["b"] == pytest.approx(10)  # inside the 50% band
    assert out["c"] == pytest.approx(7 * 10 / 10)  # new, then the median (10) scales by 1
    out = operator.step({"a": 10, "b": 10, "c": 10}, {"a": 4.0, "b": 1.0, "c": 1.0}, other)  # mean 2
    assert out == pytest.approx({"a": 9 * 10 / 10.5, "b": 10.5 * 10 / 10.5, "c": 10.5 * 10 / 10.5})


def test_operator_new_endpoints_start_at_the_new_endpoint_weight():
    m = R.median_weight
    out = operator.step({"a": m, "b": m}, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert out["c"] == pytest.approx(R.new_endpoint_weight) and out["a"] == pytest.approx(m)


def test_operator_converged_weights_are_capacity_proportional_with_the_rule_median():
    w = operator.converged_weights({"f25": 200.0, "f27": 76.4, "f27b": 76.4, "f29": 29.2})
    assert statistics_median(w.values()) == pytest.approx(R.median_weight)
    assert w["f25"] / w["f29"] == pytest.approx(200 / 29.2)


def statistics_median(values):
    import statistics
    return statistics.median(list(values))


# ---- Fortio histogram merge ----

def test_merged_percentiles_come_from_buckets_not_averages():
    fast = {"DurationHistogram": {"Count": 100, "Data": [{"Start": 0.001, "End": 0.002, "Count": 100}]},
            "RetCodes": {"200": 100}}
    slow = {"DurationHistogram": {"Count": 100, "Data": [{"Start": 0.100, "End": 0.200, "Count": 100}]},
            "RetCodes": {"200": 98, "503": 1, "-1": 1}}
    s = fortio.summarise([fast, slow])
    assert s["requests"] == 200 and s["errors"] == 2
    assert s["p50_ms"] == pytest.approx(2.0, abs=0.01)      # the boundary between the two populations
    assert s["p90_ms"] == pytest.approx(180.0, abs=0.1)     # 80% of the way through the slow bucket
    avg_of_p90 = (1.9 + 190) / 2
    assert abs(s["p90_ms"] - avg_of_p90) > 50


def test_overlapping_edge_buckets_merge():
    a = [(0.010, 0.012, 10)]
    b = [(0.011, 0.013, 10)]
    assert fortio.merged_percentile(a + b, 50) * 1e3 == pytest.approx(11.5, abs=0.01)
    assert math.isnan(fortio.merged_percentile([], 50))


# ---- shares and settle time ----

def test_rates_and_shares():
    samples = [(0.0, [0, 0]), (1.0, [10, 30]), (2.0, [20, 70])]
    times, rates = analysis.rates(samples)
    assert times == [1.0, 2.0] and rates == [[10, 30], [10, 40]]
    assert analysis.overall_shares(samples) == [20 / 90, 70 / 90]
    t, sh = analysis.windowed_shares(samples, 1.0)
    assert t == [1.0, 2.0] and sh[1] == [0.2, 0.8]


def test_settle_time_is_the_end_of_the_last_excursion():
    times = [float(t) for t in range(1, 31)]
    share = [0.10] * 10 + [0.08, 0.05, 0.03, 0.025, 0.02] + [0.02] * 15
    out = analysis.settle_time(times, share, event_s=10.0, final_window_s=10)
    assert out["final_share"] == pytest.approx(0.02) and out["before_share"] == pytest.approx(0.10)
    # 20% of the step (0.016): outside until the 0.05 at t=12, inside from t=13 on.
    assert out["settle_s"] == pytest.approx(3.0)
    # 20% of the final share (0.004): outside until the 0.025 at t=14, inside from t=15 on.
    assert out["settle_share_s"] == pytest.approx(5.0)


def test_noise_around_a_small_final_share_does_not_hide_a_fast_reaction():
    times = [float(t) for t in range(1, 41)]
    share = [0.10] * 20 + [0.004, 0.0, 0.008, 0.002, 0.006] * 4
    out = analysis.settle_time(times, share, event_s=20.0, final_window_s=10)
    assert out["settle_s"] == 0.0
    assert out["settle_share_s"] is None


def test_never_settling_and_immediate_settling():
    times = [1.0, 2.0, 3.0, 4.0]
    assert analysis.settle_time(times, [0.1, 0.1, 0.1, 0.1], 1.5, 2)["settle_share_s"] == 0.0
    assert analysis.settle_time(times, [0.1, 0.1, 0.5, 0.1], 1.5, 1)["settle_share_s"] is None
    assert analysis.settle_time([], [], 1.0, 1)["settle_s"] is None


# ---- Envoy configs, validated by the real Envoy ----

def _backends():
    return ["127.0.0.1:18001", ("127.0.0.1", 18002)]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_renders_a_valid_envoy_config(policy, tmp_path):
    kwargs = {}
    if policy.startswith("tailweight"):
        if not paths.WASM.exists():
            pytest.skip("build/tailweight_filter.wasm missing (make wasm)")
        kwargs["wasm_path"] = paths.WASM
    if policy == "tailweight":
        kwargs["aggregator_port"] = 18100
    if policy == "operator":
        eds = tmp_path / "eds" / "backends.yaml"
        eds.parent.mkdir()
        write_eds(eds, {"127.0.0.1:18001": 916, "127.0.0.1:18002": 134})
        kwargs["eds_path"] = eds
    text = render_client_envoy(_backends(), policy, **kwargs)
    error = envoy.validate(text, tmp_path)
    assert error is None, error
    config = yaml.safe_load(text)
    cluster = config["static_resources"]["clusters"][0]
    lb_name = cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]["name"]
    expected = {"round_robin": "round_robin", "least_request": "least_request", "operator": "least_request",
                "cswrr_orca": "client_side_weighted_round_robin", "tailweight_local": "override_host",
                "tailweight": "override_host"}[policy]
    assert lb_name == "envoy.load_balancing_policies." + expected
    filters = [f["name"] for f in config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
               ["typed_config"]["http_filters"]]
    assert filters[-1] == "envoy.filters.http.router"
    assert ("envoy.filters.http.wasm" in filters) == policy.startswith("tailweight")
    assert [c["name"] for c in config["static_resources"]["clusters"]] == \
        (["backends", "tailweight_aggregator"] if policy == "tailweight" else ["backends"])
    # Callers never pick Envoy's ports: admin and listener bind port 0 (envoy.start reads them).
    assert config["admin"]["address"]["socket_address"]["port_value"] == 0
    (listener,) = config["static_resources"]["listeners"]
    assert listener["address"]["socket_address"]["port_value"] == 0 and listener["name"] == "ingress"


def test_tailweight_plugin_config_reports_to_the_aggregator_cluster():
    assert plugin_config_for("tailweight") == {
        "aggregator": {"cluster": "tailweight_aggregator", "report_interval_ms": 1000}}
    assert plugin_config_for("tailweight_local") == {}


def test_render_refuses_incomplete_arguments():
    with pytest.raises(ValueError, match="unknown policy"):
        render_client_envoy(_backends(), "random")
    with pytest.raises(ValueError, match="wasm_path"):
        render_client_envoy(_backends(), "tailweight_local")
    with pytest.raises(ValueError, match="aggregator_port"):
        render_client_envoy(_backends(), "tailweight", wasm_path="x.wasm")
    with pytest.raises(ValueError, match="eds_path"):
        render_client_envoy(_backends(), "operator")


def test_eds_file_is_written_atomically_with_integer_weights(tmp_path):
    path = tmp_path / "eds.yaml"
    write_eds(path, {"127.0.0.1:1": 350, "127.0.0.1:2": 100}, version="7")
    doc = yaml.safe_load(path.read_text())
    assert doc["version_info"] == "7"
    eps = doc["resources"][0]["endpoints"][0]["lb_endpoints"]
    assert [e["load_balancing_weight"] for e in eps] == [350, 100]
    assert list(tmp_path.iterdir()) == [path]
    with pytest.raises(ValueError, match="must be >= 1"):
        render_eds({"127.0.0.1:1": 0})


def test_overhead_differences_pair_the_variants_of_each_round():
    # Round 2 ran on a busy machine: both variants cost more, their difference did not change.
    variants = {"tailweight": {"envoy_cpu_us_per_request_all": [250.0, 400.0, 252.0]},
                "no_wasm": {"envoy_cpu_us_per_request_all": [210.0, 350.0, 205.0]}}
    d = overhead.paired_difference(variants, "tailweight", "no_wasm")
    assert d == {"median_us": 47.0, "per_round_us": [40.0, 50.0, 47.0]}
