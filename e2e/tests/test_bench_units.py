"""Pure parts of the benchmark harness: scenario checks, operator rule, histogram merge, settle time,
Envoy config rendering (validated by the real Envoy)."""
import json
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import analysis, fortio, operator, runner
from harness.membership import EndpointSet
from harness.scenario import ScenarioError, check, load, parse
from tailweight_e2e import envoy, paths
from tailweight_e2e.envoy_configs import (
    NATIVE_POLICIES,
    POLICIES,
    REPORTING_POLICIES,
    STAMPING_SERVER_CONFIG,
    plugin_config_for,
    render_client_envoy,
    render_eds,
    render_server_envoy,
    steers_by_header,
    write_eds,
)
from tailweight_e2e.procs import wait_for

SCENARIOS = paths.REPO / "e2e" / "scenarios"


def minimal(**over):
    data = {"name": "t", "duration_s": 5, "policies": ["round_robin"],
            "backends": [{"count": 2, "workers": 1, "base_ms": 5}],
            "clients": {"count": 1, "qps": 10, "connections": 1}}
    data.update(over)
    return data


@pytest.mark.parametrize("name", ["seed-fib.yaml", "slowdown.yaml", "rollout.yaml", "comeback.yaml",
                                  "grpc-seed.yaml", "grpc-sinkhole.yaml"])
def test_shipped_scenarios_load(name):
    s = load(SCENARIOS / name)
    assert s.clients.count >= 4
    # Every policy but the one that needs the destinations' sidecars and the native shell's
    # load-balancing policy (which decides in Envoy's balancer: its own e2e tests); the native shell's
    # filter runs beside the Wasm shell's (the simulator, reading the same files, runs their decisions
    # as the Wasm shell's).
    assert set(s.policies) == set(POLICIES) - {"tailweight_stamps", "tailweight_native_lb"} and not s.server_sidecars
    assert set(NATIVE_POLICIES) - {"tailweight_native_lb"} <= set(s.policies)


@pytest.mark.parametrize("name,source", [("seed-sidecars.yaml", "seed-fib.yaml"),
                                         ("slowdown-sidecars.yaml", "slowdown.yaml")])
def test_sidecar_scenarios_are_their_source_behind_server_sidecars(name, source):
    s, src = load(SCENARIOS / name), load(SCENARIOS / source)
    assert s.server_sidecars and not src.server_sidecars
    assert (s.backends, s.clients, s.events, s.seed) == (src.backends, src.clients, src.events, src.seed)
    assert s.policies == ["least_request", "tailweight", "tailweight_native", "tailweight_stamps"]


def test_thin_clients_scenario_is_the_seed_spread_over_twelve_sidecars():
    thin, seed = load(SCENARIOS / "thin-clients.yaml"), load(SCENARIOS / "seed-fib.yaml")
    assert thin.backends == seed.backends and thin.clients.qps == seed.clients.qps
    assert (thin.clients.count, thin.clients.connections) == (12, 4)
    assert thin.server_sidecars and "tailweight_stamps" in thin.policies and "operator" not in thin.policies


def test_thin_wide_backends_stamp_only_under_tailweight_stamps():
    """400 backends without sidecars: the emulator writes the stamps, and only for the policy that
    reads them."""
    s = load(SCENARIOS / "thin-wide.yaml")
    assert len(s.backends) == 400 and s.stamping_backends and not s.server_sidecars
    assert s.clients.qps / s.clients.count / len(s.backends) <= 0.125, "a client sees a backend at most every 8 s"
    assert all(b.load_stamps for b in runner.backend_settings(s, "tailweight_stamps"))
    assert not any(b.load_stamps for b in runner.backend_settings(s, "tailweight"))


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


def test_rollout_replaces_every_backend_one_by_one_with_one_surge():
    s = load(SCENARIOS / "rollout.yaml")
    old = [b.index for b in s.backends if not b.absent]
    new = [b.index for b in s.backends if b.absent]
    assert len(old) == len(new) >= 4 and all(s.backends[i].cold_factor > 1 for i in new)
    joins = [e for e in s.events if e.action == "join"]
    leaves = [e for e in s.events if e.action == "leave"]
    assert sorted(b for e in joins for b in e.backends) == new
    assert sorted(b for e in leaves for b in e.backends) == old
    # maxSurge 1: each leave follows its join, before the next join.
    for k, (j, lv) in enumerate(zip(joins, leaves, strict=True)):
        assert j.at_s < lv.at_s < (joins[k + 1].at_s if k + 1 < len(joins) else s.duration_s)
    assert [g.name for g in s.segments][:2] == ["steady", "rollout"] and s.segments[1].from_s == joins[0].at_s


def test_rollout_failing_surges_two_and_one_new_pod_fails_from_its_start_for_twelve_seconds():
    s = load(SCENARIOS / "rollout-failing.yaml")
    new = [b.index for b in s.backends if b.absent]
    joins = [e for e in s.events if e.action == "join"]
    leaves = [e for e in s.events if e.action == "leave"]
    assert sorted(b for e in joins for b in e.backends) == new and all(s.backends[i].cold_factor > 1 for i in new)
    # maxSurge 2: pairs join, a second later a pair leaves, before the next pair joins.
    assert all(len(e.backends) == 2 for e in joins + leaves)
    for k, (j, lv) in enumerate(zip(joins, leaves, strict=True)):
        assert j.at_s < lv.at_s < (joins[k + 1].at_s if k + 1 < len(joins) else s.duration_s)
    fail, recover = ([e for e in s.events if e.action == a] for a in ("fail", "recover"))
    assert len(fail) == len(recover) == 1 and fail[0].backends == recover[0].backends
    (failing,) = fail[0].backends
    joined = next(e.at_s for e in joins if failing in e.backends)
    assert failing in new and 0 < fail[0].at_s - joined <= 1 and recover[0].at_s - fail[0].at_s == 12
    assert {"tailweight", "tailweight_local", "least_request"} <= set(s.policies)


def test_grpc_scenarios_speak_grpc_with_many_streams():
    seed = load(SCENARIOS / "seed-fib.yaml")
    grpc = load(SCENARIOS / "grpc-seed.yaml")
    assert grpc.protocol == "grpc" and seed.protocol == "http"
    strip = [(b.workers, b.base_ms, b.speed, b.jitter, b.payload_bytes) for b in seed.backends]
    assert [(b.workers, b.base_ms, b.speed, b.jitter, b.payload_bytes) for b in grpc.backends] == strip
    assert grpc.clients.streams > grpc.clients.connections and grpc.clients.qps == 600
    sink = load(SCENARIOS / "grpc-sinkhole.yaml")
    assert sink.clients.retries == (True, False)
    assert [(e.action, len(e.backends)) for e in sink.events] == [("fail", 1)]


def test_mesh_keys_parse():
    s = parse(minimal(
        backends=[{"count": 1, "workers": 1, "base_ms": 5, "protocol": "grpc"},
                  {"count": 1, "workers": 1, "base_ms": 5, "protocol": "grpc", "cold_factor": 4, "cold_s": 10,
                   "absent": True}],
        clients={"count": 1, "qps": 10, "connections": 2, "streams": 8, "retries": False},
        segments=[{"name": "steady", "from_s": 0}, {"name": "rollout", "from_s": 2}], duration_s=10,
        events=[{"at_s": 1, "backends": [1], "action": "join"},
                {"at_s": 2, "backends": [0], "action": "leave"},  # stops at 5 s
                {"at_s": 7, "backends": [1], "action": "leave", "value": 0.5},
                {"at_s": 6, "backends": [0], "action": "join"}]))
    assert s.protocol == "grpc" and s.capacity_rps == pytest.approx(200.0), "the absent backend is not counted"
    assert (s.backends[1].cold_factor, s.backends[1].cold_s, s.backends[1].absent) == (4.0, 10.0, True)
    assert (s.clients.streams, s.clients.retries) == (8, (False,))
    assert [(e.action, e.value) for e in s.events] == [("join", None), ("leave", 3.0), ("join", None), ("leave", 0.5)]
    assert [(g.name, g.from_s) for g in s.segments] == [("steady", 0.0), ("rollout", 2.0)]
    assert parse(minimal()).clients.retries == (True,)
    assert parse(minimal(clients={"count": 1, "qps": 1, "connections": 1, "retries": "both"})).clients.retries \
        == (True, False)


def test_events_on_several_backends_and_equal_times_keep_file_order():
    s = parse(minimal(backends=[{"count": 3, "workers": 1, "base_ms": 5},
                                {"count": 2, "workers": 1, "base_ms": 5, "absent": True}],
                      events=[{"at_s": 2, "backends": [0, 1], "action": "leave"},
                              {"at_s": 2, "backends": [3, 4], "action": "join"},
                              {"at_s": 1, "backends": [2], "action": "speed", "value": 2}]))
    assert [(e.at_s, e.action, e.backends) for e in s.events] == [
        (1, "speed", [2]), (2, "leave", [0, 1]), (2, "join", [3, 4])]


TWO_AND_ONE_ABSENT = [{"count": 2, "workers": 1, "base_ms": 5},
                      {"count": 1, "workers": 1, "base_ms": 5, "absent": True}]


@pytest.mark.parametrize("over,needle", [
    ({"backends": [{"count": 1, "workers": 1, "base_ms": 5, "protocol": "h3"}]},
     "backends[0].protocol: unknown variant `h3`, expected `http` or `grpc`"),
    ({"backends": [{"count": 1, "workers": 1, "base_ms": 5}, {"count": 1, "workers": 1, "base_ms": 5,
                                                             "protocol": "grpc"}]},
     "backends[1].protocol: grpc differs from backends[0]'s http"),
    ({"backends": [{"count": 1, "workers": 1, "base_ms": 5, "cold_factor": 0.5}]}, "backends[0].cold_factor"),
    ({"backends": [{"count": 1, "workers": 1, "base_ms": 5, "absent": "yes"}]},
     "backends[0].absent: invalid type: string \"yes\", expected a boolean"),
    ({"backends": [{"count": 2, "workers": 1, "base_ms": 5, "absent": True}]}, "backends: every group is absent"),
    ({"clients": {"count": 1, "qps": 10, "connections": 1, "streams": 4}}, "clients.streams: only for gRPC"),
    ({"clients": {"count": 1, "qps": 10, "connections": 1, "retries": 1}},
     "clients.retries: invalid type: integer `1`, expected true, false or both"),
    ({"clients": {"count": 1, "qps": 10, "connections": 1, "retries": "sometimes"}}, "clients.retries"),
    ({"backends": TWO_AND_ONE_ABSENT, "events": [{"at_s": 1, "backends": [0], "action": "join"}]},
     "events[0] (join at 1 s): backend 0 is already in the endpoint set"),
    ({"backends": TWO_AND_ONE_ABSENT, "events": [{"at_s": 1, "backends": [2], "action": "leave"}]},
     "events[0] (leave at 1 s): backend 2 is not in the endpoint set then"),
    ({"backends": TWO_AND_ONE_ABSENT, "events": [{"at_s": 1, "backends": [0, 1], "action": "leave"}]},
     "events[0] (leave at 1 s): leaves the endpoint set empty"),
    ({"backends": TWO_AND_ONE_ABSENT, "events": [{"at_s": 3, "backends": [1], "action": "leave"},
                                                  {"at_s": 1, "backends": [0], "action": "leave"}]},
     "events[0] (leave at 3 s): leaves the endpoint set empty"),
    ({"backends": TWO_AND_ONE_ABSENT, "events": [{"at_s": 1, "backends": [0], "action": "leave"},
                                                  {"at_s": 2, "backends": [0], "action": "join"}]},
     "events[1] (join at 2 s): backend 0 left and stops listening at 4 s"),
    ({"events": [{"at_s": 1, "backends": [0], "action": "join", "value": 1}]}, "action join takes no value"),
    ({"events": [{"at_s": 1, "backends": [0], "action": "leave", "value": -1}]}, "events[0].value"),
    ({"events": "stop at 3"}, "events: invalid type: string \"stop at 3\", expected a sequence"),
    ({"server_sidecars": "yes"}, "server_sidecars: invalid type: string \"yes\", expected a boolean"),
    ({"policies": ["tailweight_stamps"]}, "tailweight_stamps needs server_sidecars: true"),
    ({"policies": ["operator"], "server_sidecars": True}, "operator cannot run with server_sidecars"),
    ({"stamping_backends": 1}, "stamping_backends: invalid type: integer `1`, expected a boolean"),
    ({"stamping_backends": True, "server_sidecars": True}, "stamping_backends: true cannot go with server_sidecars"),
    ({"stamping_backends": True, "backends": [{"count": 1, "workers": 1, "base_ms": 5, "protocol": "grpc"}],
      "clients": {"count": 1, "qps": 10, "connections": 1}}, "stamping_backends: true needs HTTP backends"),
    ({"segments": []}, "segments: expected a non-empty list"),
    ({"segments": [{"name": "a", "from_s": 1}]}, "segments[0].from_s: the first segment starts at 0"),
    ({"segments": [{"name": "a", "from_s": 0}, {"name": "b", "from_s": 0}]}, "segments[1].from_s: expected after 0"),
    ({"segments": [{"name": "a", "from_s": 0}, {"name": "a", "from_s": 1}]}, "segments[1].name: 'a' is used twice"),
    ({"segments": [{"name": "a b", "from_s": 0}]}, "segments[0].name"),
    ({"segments": [{"name": "a", "from_s": 0}, {"name": "b", "from_s": 5}]}, "expected before duration_s 5"),
    ({"segments": [{"name": "a", "from_s": 0, "to_s": 3}]}, "segments[0]: unknown field `to_s`"),
])
def test_bad_mesh_keys_say_where(over, needle):
    with pytest.raises(ScenarioError) as e:
        parse(minimal(**over))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_recorded_segments_follow_the_scenario_or_the_flag():
    named = parse(minimal(duration_s=30, segments=[{"name": "steady", "from_s": 0}, {"name": "rollout", "from_s": 10},
                                                   {"name": "after", "from_s": 25}])).segments
    assert runner.recorded_segments(30, None, named) == [("steady", 10), ("rollout", 15), ("after", 5)]
    # A shorter --duration drops the segments that would start after the end.
    assert runner.recorded_segments(15, None, named) == [("steady", 10), ("rollout", 5)]
    assert runner.recorded_segments(8, None, named) == [("run", 8)]
    assert runner.recorded_segments(30, 12, named) == [("run1", 12), ("run2", 12), ("run3", 6)]
    assert runner.recorded_segments(30) == [("run", 30)]


def test_groups_flatten_in_order():
    s = parse(minimal(backends=[{"count": 2, "workers": 2, "base_ms": 10},
                                {"count": 1, "workers": 1, "base_ms": 10, "speed": 2}]))
    assert [(b.index, b.speed) for b in s.backends] == [(0, 1.0), (1, 1.0), (2, 2.0)]
    assert s.backends[2].capacity_rps == pytest.approx(50.0)
    assert s.capacity_rps == pytest.approx(450.0)


@pytest.mark.parametrize("over,needle", [
    ({"bogus": 1}, "unknown field `bogus`"),
    ({"policies": ["magic"]}, "unknown policy 'magic'"),
    ({"backends": []}, "non-empty list"),
    ({"backends": [{"count": 1, "workers": 0, "base_ms": 5}]}, "backends[0].workers"),
    ({"backends": [{"count": 1, "workers": 1}]}, "backends[0]: missing field `base_ms`"),
    ({"clients": {"count": 1, "qps": 10}}, "clients: missing field `connections`"),
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


# Every scenario file, the harness's and the simulator's: the schema both check (one parser).
SHIPPED = sorted([*SCENARIOS.glob("*.yaml"), *(paths.REPO / "sim" / "scenarios").glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_scenario_file_passes_the_schema_the_simulator_checks(path):
    doc = check(path)
    assert doc["name"] and doc["backends"] and doc == check(doc), "the checked file checks as itself"
    if path.parent == SCENARIOS:
        assert load(path).backends, "the harness runs its own files"


def test_the_simulator_files_are_refused_by_the_harness_in_one_line():
    with pytest.raises(ScenarioError, match=r"clients\.count: the harness runs at most 64 client Envoys, got 1000"):
        load(paths.REPO / "sim" / "scenarios" / "seed-fib-1000.yaml")
    with pytest.raises(ScenarioError, match=r"policies: ideal is the simulator's only"):
        load(paths.REPO / "sim" / "scenarios" / "thin-wide.yaml")


def test_a_typo_fails_the_harness_and_the_simulator_with_the_same_line(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text((SCENARIOS / "seed-fib.yaml").read_text().replace("workers: 2", "wrokers: 2", 1))
    want = f"{bad}: backends[0]: unknown field `wrokers`"
    with pytest.raises(ScenarioError) as harness:
        load(bad)
    sim = subprocess.run([str(paths.binary("tailweight-sim")), "run", str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert str(harness.value).startswith(want) and "\n" not in str(harness.value)
    assert sim.returncode != 0 and sim.stderr.startswith(f"tailweight-sim: {want}"), sim.stderr


def test_policies_from_the_command_line_are_checked_like_the_file_s():
    assert load(SCENARIOS / "seed-fib.yaml", ["tailweight", "operator"]).policies == ["tailweight", "operator"]
    with pytest.raises(ScenarioError, match="tailweight_stamps needs server_sidecars: true"):
        load(SCENARIOS / "seed-fib.yaml", ["tailweight_stamps"])
    with pytest.raises(ScenarioError, match="policies: unknown policy 'magic'"):
        load(SCENARIOS / "seed-fib.yaml", ["magic"])


# ---- operator rule (DESIGN.md "Peers"; numbers from sim/operator-rule.json) ----

R = operator.RULE


def test_operator_rule_is_the_file_the_simulator_compiles_in():
    rust = paths.REPO / "sim" / "src" / "policy" / "operator_rule.rs"
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


def test_grpc_results_count_every_call_not_serving_as_an_error():
    result = {"DurationHistogram": {"Count": 100, "Data": [{"Start": 0.001, "End": 0.002, "Count": 100}]},
              "RetCodes": {"SERVING": 97, "ERROR": 3}}
    assert fortio.counts(result) == (100, 3)
    s = fortio.summarise([result, {"DurationHistogram": {"Count": 10}, "RetCodes": {"200": 9, "503": 1}}])
    assert (s["requests"], s["errors"], s["codes"]) == (110, 4, {"SERVING": 97, "ERROR": 3, "200": 9, "503": 1})


def test_fortio_grpc_argv_pings_with_streams():
    argv = fortio.load_argv("127.0.0.1:9", 50, 2, 3, Path("/tmp/x.json"), grpc_streams=8)
    assert argv[1:6] == ["load", "-grpc", "-ping", "-s", "8"] and argv[-1] == "127.0.0.1:9"
    assert "-grpc" not in fortio.load_argv("http://127.0.0.1:9/", 50, 2, 3, Path("/tmp/x.json"))


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


def test_share_between_uses_the_samples_around_the_window():
    # Backend 1 gets a third until 10 s, then nothing (samples every 0.5 s).
    samples = [(0.5 * k, [20 * k, 10 * k]) if k <= 20 else (0.5 * k, [20 * k + 30 * (k - 20), 200])
               for k in range(41)]
    assert analysis.share_between(samples, 1, 5.0, 10.0) == pytest.approx(1 / 3)
    assert analysis.share_between(samples, 1, 10.0, 11.0) == 0.0
    assert analysis.share_between(samples, 1, 10.0, 10.9) == 0.0, "the nearest sample to the end"
    assert analysis.share_between(samples, 1, -1.0, 3.0) is None, "no sample before the window"
    assert analysis.share_between(samples, 1, 20.0, 21.0) is None, "nothing after the last sample"


def test_derive_reports_the_events_backends_share_right_after_it():
    samples = [(0.5 * k, [10 * k, 10 * k if k <= 20 else 200 + (k - 20)]) for k in range(61)]
    result = {"backends": ["a", "b"], "samples": samples,
              "events": [{"at_s": 10, "fired_s": 10.02, "backends": [1], "action": "fail", "value": None},
                         {"at_s": 12, "fired_s": 12.0, "backends": [0], "action": "leave", "value": 3},
                         {"at_s": 15, "fired_s": 15.0, "backends": [0], "action": "stop", "value": None,
                          "cause": "leave at 12 s"}]}
    runner.derive(result)
    (x,) = result["reaction"]  # joins, leaves and a leave's stop are not reactions
    assert (x["backend"], x["action"], x["after_until_s"]) == (1, "fail", 30.0)
    assert x["share_before"] == pytest.approx(0.5)
    assert x["share_first_s"] == pytest.approx(2 / 22) and x["share_after"] == pytest.approx(1 / 11)
    assert [s["backend"] for s in result["settle"]] == [1]


def test_a_step_taken_at_once_settles_at_once_in_half_second_windows_and_after_1_s_in_1_s_ones():
    # b serves half the requests until 10 s, then none: the 1 s window ending 10.5 s still holds
    # half a second of the old share, so it reads settled only from 11 s (1.0); the 0.5 s window
    # ending 10.5 s is the first after the event and already settled (0.0: within 0.5 s).
    samples = [(0.5 * k, [10 * k, 10 * min(k, 20)]) for k in range(61)]
    result = {"backends": ["a", "b"], "samples": samples,
              "events": [{"at_s": 10, "fired_s": 10.0, "backends": [1], "action": "stop", "value": None}]}
    runner.derive(result)
    (s,) = result["settle"]
    assert (s["settle_s"], s["settle_half_window_s"]) == (1.0, 0.0)


def test_never_settling_and_immediate_settling():
    times = [1.0, 2.0, 3.0, 4.0]
    assert analysis.settle_time(times, [0.1, 0.1, 0.1, 0.1], 1.5, 2)["settle_share_s"] == 0.0
    assert analysis.settle_time(times, [0.1, 0.1, 0.5, 0.1], 1.5, 1)["settle_share_s"] is None
    assert analysis.settle_time([], [], 1.0, 1)["settle_s"] is None


# ---- Envoy configs, validated by the real Envoy ----

def _backends():
    return ["127.0.0.1:18001", ("127.0.0.1", 18002)]


def _policy_kwargs(policy: str) -> dict:
    """What render_client_envoy needs beyond the endpoints for `policy` (skips without the filter)."""
    kwargs = {}
    if policy in NATIVE_POLICIES:
        kwargs["native_path"] = paths.NATIVE
    elif policy.startswith("tailweight"):
        if not paths.WASM.exists():
            pytest.skip("build/tailweight_filter.wasm missing (make wasm)")
        kwargs["wasm_path"] = paths.WASM
    if policy in REPORTING_POLICIES:
        kwargs["aggregator_port"] = 18100
    return kwargs


def _eds_file(tmp_path, weights: dict[str, int]):
    eds = tmp_path / "eds" / "backends.yaml"
    eds.parent.mkdir()
    write_eds(eds, weights)
    return eds


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_renders_a_valid_envoy_config(policy, tmp_path):
    kwargs = _policy_kwargs(policy)
    if policy == "operator":
        kwargs["eds_path"] = _eds_file(tmp_path, {"127.0.0.1:18001": 916, "127.0.0.1:18002": 134})
    text = render_client_envoy(_backends(), policy, **kwargs)
    error = envoy.validate(text, tmp_path)
    assert error is None, error
    config = yaml.safe_load(text)
    cluster = config["static_resources"]["clusters"][0]
    lb_name = cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]["name"]
    expected = {"round_robin": "round_robin", "least_request": "least_request", "operator": "least_request",
                "cswrr_orca": "client_side_weighted_round_robin", "tailweight_local": "override_host",
                "tailweight": "override_host", "tailweight_stamps": "override_host",
                "tailweight_native_local": "least_request", "tailweight_native": "least_request",
                "tailweight_native_lb": "dynamic_modules"}[policy]
    assert lb_name == "envoy.load_balancing_policies." + expected
    filters = [f["name"] for f in config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
               ["typed_config"]["http_filters"]]
    assert filters[-1] == "envoy.filters.http.router"
    assert ("envoy.filters.http.wasm" in filters) == steers_by_header(policy)
    assert ("envoy.filters.http.dynamic_modules" in filters) == (policy in NATIVE_POLICIES)
    assert [c["name"] for c in config["static_resources"]["clusters"]] == \
        (["backends", "tailweight_aggregator"] if policy in REPORTING_POLICIES else ["backends"])
    # Callers never pick Envoy's ports: admin and listener bind port 0 (envoy.start reads them).
    assert config["admin"]["address"]["socket_address"]["port_value"] == 0
    (listener,) = config["static_resources"]["listeners"]
    assert listener["address"]["socket_address"]["port_value"] == 0 and listener["name"] == "ingress"


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_renders_a_valid_mesh_config(policy, tmp_path):
    """As the harness runs it: endpoints by EDS, Istio's retry policy, HTTP/2 to gRPC backends."""
    kwargs = _policy_kwargs(policy)
    eds = _eds_file(tmp_path, {"127.0.0.1:18001": 1, "127.0.0.1:18002": 1})
    text = render_client_envoy([], policy, eds_path=eds, retries=True, protocol="grpc", **kwargs)
    error = envoy.validate(text, tmp_path)
    assert error is None, error
    config = yaml.safe_load(text)
    cluster = config["static_resources"]["clusters"][0]
    assert cluster["type"] == "EDS" and "load_assignment" not in cluster
    assert cluster["eds_cluster_config"]["eds_config"]["path_config_source"]["path"] == str(eds.resolve())
    assert cluster["circuit_breakers"]["thresholds"][0]["max_retries"] == 2**32 - 1
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert options["explicit_http_config"] == {"http2_protocol_options": {}}
    # The Wasm shell's policies keep the upstream filter that strips the override header.
    assert ("http_filters" in options) == steers_by_header(policy)
    route = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    retry = route["retry_policy"]
    assert retry["retry_on"] == "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
    assert (retry["num_retries"], retry["host_selection_retry_max_attempts"]) == (2, 5)
    assert [p["name"] for p in retry["retry_host_predicate"]] == ["envoy.retry_host_predicates.previous_hosts"]
    assert "retry_policy" not in yaml.safe_load(render_client_envoy([], policy, eds_path=eds, **kwargs))[
        "static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"][
        "virtual_hosts"][0]["routes"][0]["route"]


def test_tailweight_plugin_config_reports_to_the_aggregator_cluster():
    assert plugin_config_for("tailweight") == {
        "aggregator": {"cluster": "tailweight_aggregator", "report_interval_ms": 1000}}
    assert plugin_config_for("tailweight_local") == {}
    assert plugin_config_for("tailweight_stamps") == {
        "aggregator": {"cluster": "tailweight_aggregator", "report_interval_ms": 1000}, "load_stamp_max_age_ms": 20,
        "load_stamp_clusters": ["backends"]}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("stamping", [False, True])
def test_server_sidecar_renders_a_valid_envoy_config(protocol, stamping, tmp_path):
    """A destination's sidecar: one inbound listener (port 0) to its application, with the filter in
    the stamping role or no filter."""
    kwargs = _policy_kwargs("tailweight_local") if stamping else {}
    if stamping:
        kwargs["plugin_config"] = STAMPING_SERVER_CONFIG
    text = render_server_envoy("127.0.0.1:18001", protocol=protocol, **kwargs)
    error = envoy.validate(text, tmp_path)
    assert error is None, error
    config = yaml.safe_load(text)
    (listener,) = config["static_resources"]["listeners"]
    assert listener["name"] == "ingress" and listener["address"]["socket_address"]["port_value"] == 0
    assert listener["traffic_direction"] == "INBOUND"
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    filters = [f["name"] for f in hcm["http_filters"]]
    assert filters == (["envoy.filters.http.wasm", "envoy.filters.http.router"] if stamping
                       else ["envoy.filters.http.router"])
    if stamping:
        configured = hcm["http_filters"][0]["typed_config"]["config"]["configuration"]["value"]
        assert json.loads(configured) == STAMPING_SERVER_CONFIG
    (cluster,) = config["static_resources"]["clusters"]
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert (address["address"], address["port_value"]) == ("127.0.0.1", 18001)
    h2 = "typed_extension_protocol_options" in cluster
    assert h2 == (protocol == "grpc")


def test_render_refuses_incomplete_arguments():
    with pytest.raises(ValueError, match="unknown policy"):
        render_client_envoy(_backends(), "random")
    with pytest.raises(ValueError, match="wasm_path"):
        render_client_envoy(_backends(), "tailweight_local")
    with pytest.raises(ValueError, match="aggregator_port"):
        render_client_envoy(_backends(), "tailweight", wasm_path="x.wasm")
    with pytest.raises(ValueError, match="eds_path"):
        render_client_envoy(_backends(), "operator")
    with pytest.raises(ValueError, match="unknown protocol 'h3'"):
        render_client_envoy(_backends(), "round_robin", protocol="h3")


def _eds(path):
    doc = yaml.safe_load(path.read_text())
    eps = doc["resources"][0]["endpoints"][0]["lb_endpoints"]
    return doc["version_info"], {
        f"{e['endpoint']['address']['socket_address']['address']}:{e['endpoint']['address']['socket_address']['port_value']}":
        e["load_balancing_weight"] for e in eps}


def test_endpoint_set_joins_leaves_and_keeps_weights(tmp_path):
    addrs = [f"127.0.0.1:{p}" for p in (1, 2, 3, 4)]
    path = tmp_path / "eds" / "backends.yaml"
    eps = EndpointSet(path, addrs, [0, 1, 2], weights={addrs[0]: 500}, join_weight=1000)
    assert _eds(path) == ("1", {addrs[0]: 500, addrs[1]: 1, addrs[2]: 1})
    eps.join([3])
    eps.leave([0, 1])
    assert eps.members() == [2, 3] and eps.member_addresses() == addrs[2:]
    assert _eds(path) == ("3", {addrs[2]: 1, addrs[3]: 1000})
    eps.set_weights({addrs[2]: 300, addrs[0]: 900})  # 0 left meanwhile: ignored
    assert _eds(path) == ("4", {addrs[2]: 300, addrs[3]: 1000})
    with pytest.raises(ValueError, match="would empty the endpoint set"):
        eps.leave([2, 3])
    assert _eds(path)[1] == {addrs[2]: 300, addrs[3]: 1000}
    assert sorted(p.name for p in path.parent.iterdir()) == ["backends.yaml"]


def test_operator_weighs_only_the_endpoints_in_the_set(tmp_path):
    addrs = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    eps = EndpointSet(tmp_path / "eds.yaml", addrs, [0, 1], join_weight=operator.join_weight())
    m = R.median_weight
    controller = operator.Controller(eps, {addrs[0]: m, addrs[1]: m},
                                     lambda: {addrs[0]: 1.0, addrs[1]: 1.0, addrs[2]: 0.0}, period_s=0.05)
    eps.join([2])
    assert _eds(eps.path)[1][addrs[2]] == round(R.new_endpoint_weight)
    eps.leave([0])
    controller.start()
    try:
        wait_for(lambda: len(controller.rounds) >= 1, 10, "an operator round")
    finally:
        controller.stop()
    assert not controller.errors and set(controller.rounds[0]["cpu"]) == {addrs[1], addrs[2]}
    assert set(_eds(eps.path)[1]) == {addrs[1], addrs[2]} and set(controller.weights) == {addrs[1], addrs[2]}


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


def test_filter_settings_from_the_command_line_are_json_or_strings_and_bad_ones_are_refused():
    from harness.__main__ import parse_filter_settings
    assert parse_filter_settings(["health_check_path=/healthz", "recovery_ramp_ms=500", "x=[1]"]) == {
        "health_check_path": "/healthz", "recovery_ramp_ms": 500, "x": [1]}
    assert parse_filter_settings([]) == {}
    for bad in ("no_equals", "=1", " =2"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_filter_settings([bad])
