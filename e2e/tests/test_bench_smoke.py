"""The benchmark harness end to end at tiny scale: `python -m harness` on a 2-backend, 2-client scenario
with round_robin and operator (Prometheus + file-based EDS + the 30 s rule at a 2.5 s period), checking
results.json, results.md and the plots."""
import json

import pytest
import yaml

from harness import operator
from harness.__main__ import main

pytestmark = pytest.mark.timeout(240)

TINY = {
    "name": "tiny",
    "seed": 1,
    "warmup_s": 1,
    "duration_s": 5,
    "backends": [{"count": 1, "workers": 2, "base_ms": 5, "jitter": 0.2},
                 {"count": 1, "workers": 2, "base_ms": 5, "speed": 4.0, "jitter": 0.2}],
    "clients": {"count": 2, "qps": 80, "connections": 4},
    "events": [{"at_s": 2, "backends": [1], "action": "speed", "value": 2.0}],
    "policies": ["round_robin", "operator"],
}


def test_tiny_bench_run_writes_complete_results(tmp_path):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    assert main(["--scenario", str(scenario), "--out", str(out), "--operator-period", "2.5", "--quiet"]) == 0

    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "tiny" and doc["clients"] == 2
    assert [p["policy"] for p in doc["policies"]] == ["round_robin", "operator"]
    for p in doc["policies"]:
        assert "error" not in p, p.get("error")
        assert p["errors"] == 0
        # Two clients at 40 rps for 5 s: Fortio's own count, within its pacing margin.
        assert 300 <= p["requests"] <= 420, p["requests"]
        assert len(p["clients"]) == 2 and all(c["errors"] == 0 for c in p["clients"])
        assert p["p50_ms"] <= p["p90_ms"] <= p["p99_ms"] <= p["p99.9_ms"]
        assert sum(p["share"].values()) == pytest.approx(1.0)
        assert len(p["samples"]) >= 8 and len(p["samples"][0][1]) == 2
        assert [e["action"] for e in p["events"]] == ["speed"] and p["events"][0]["fired_s"] >= 2
        assert p["settle"] and p["settle"][0]["backend"] == 1
        assert set(p["cpu_s"]) >= {"emulator", "envoy-0", "envoy-1", "fortio-run-0", "fortio-run-1"}
        assert p["cpu_us_per_request"]["envoys"] > 0
        assert all(s["upstream_rq_5xx"] == 0 for s in p["envoy_stats"])
        assert sum(s["upstream_rq_total"] for s in p["envoy_stats"]) >= p["requests"]
    rr, op = doc["policies"]
    assert rr["share"][rr["backends"][1]] == pytest.approx(0.5, abs=0.06), "round robin splits evenly"
    # The operator starts from capacity-proportional weights (4:1) scaled to the rule's median.
    weights = op["operator"]["initial_weights"]
    m = operator.RULE.median_weight
    assert sorted(weights.values()) == [round(m * 2 / 5), round(m * 8 / 5)]
    assert op["share"][op["backends"][1]] < 0.35
    assert len(op["operator"]["rounds"]) >= 1 and not op["operator"]["errors"]
    # Prometheus needs two scrapes before rate() answers; by the last round it has every backend.
    assert set(op["operator"]["rounds"][-1]["cpu"]) == set(op["backends"])
    assert "cpu_s" in op and "prometheus" in op["cpu_s"]

    md = (out / "results.md").read_text()
    assert "| round_robin |" in md and "| operator |" in md and "Per-endpoint requests/s" in md
    for png in ("latency.png", "endpoint_rps.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "logs" / "operator" / "envoy-0.stats.txt").exists()


def test_bad_scenario_is_one_line_and_exit_2(tmp_path, capsys):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(yaml.safe_dump({**TINY, "policies": ["fastest"]}))
    assert main(["--scenario", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown policy 'fastest'" in err
    # --policies is checked as the scenario's own list is.
    scenario.write_text(yaml.safe_dump(TINY))
    for policies, needle in (("round_robin,fastest", "unknown policy 'fastest'"),
                             ("tailweight_stamps", "or stamping_backends: true (the backends write them)")):
        assert main(["--scenario", str(scenario), "--policies", policies, "--out", str(tmp_path / "out"),
                     "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err


def test_server_sidecars_stand_between_clients_and_backends(tmp_path):
    """With server_sidecars every backend is behind its own Envoy: the clients' endpoints are the
    sidecars, every request crosses one, and the emulator still counts per backend."""
    scenario = tmp_path / "sidecars.yaml"
    scenario.write_text(yaml.safe_dump({**TINY, "name": "sidecars", "events": [], "server_sidecars": True,
                                        "policies": ["least_request", "tailweight_local"]}))
    out = tmp_path / "out"
    assert main(["--scenario", str(scenario), "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    for p in doc["policies"]:
        assert "error" not in p, p.get("error")
        assert p["errors"] == 0 and 300 <= p["requests"] <= 420, (p["errors"], p["requests"])
        servers = p["server_envoy_stats"]
        assert len(servers) == 2 and len(p["server_envoy_admin"]) == 2
        # Every request the clients sent went through a sidecar to its backend, once.
        forwarded = sum(s["upstream_rq_total"] for s in servers)
        assert forwarded == sum(s["upstream_rq_total"] for s in p["envoy_stats"]) >= p["requests"]
        assert all(s["upstream_rq_5xx"] == 0 and "wasmcustom" not in s for s in servers)
        assert p["cpu_us_per_request"]["server_envoys"] > 0
        # The endpoints the clients balance over are the sidecars, not the emulator's listeners.
        assert set(p["backends"]) == set(p["share"]) and len(p["backends"]) == 2
        assert sum(p["share"].values()) == pytest.approx(1.0)
    tw = doc["policies"][1]
    picks = sum(s["wasmcustom"].get("wasmcustom.tailweight.picks_honoured", 0) for s in tw["envoy_stats"])
    assert picks >= tw["requests"] * 0.9, picks


def test_stamping_backends_stamp_every_answer_under_tailweight_stamps(tmp_path):
    """With stamping_backends the backends write the load stamps themselves (no sidecars): under
    tailweight_stamps the clients read one valid stamp from every response."""
    scenario = tmp_path / "stamping.yaml"
    scenario.write_text(yaml.safe_dump({**TINY, "name": "stamping", "events": [], "stamping_backends": True,
                                        "policies": ["tailweight_stamps"]}))
    out = tmp_path / "out"
    assert main(["--scenario", str(scenario), "--out", str(out), "--quiet"]) == 0
    (p,) = json.loads((out / "results.json").read_text())["policies"]
    assert "error" not in p, p.get("error")
    assert p["errors"] == 0 and "server_envoy_stats" not in p
    read = sum(s["wasmcustom"]["wasmcustom.tailweight.stamps_read"] for s in p["envoy_stats"])
    invalid = sum(s["wasmcustom"]["wasmcustom.tailweight.stamps_invalid"] for s in p["envoy_stats"])
    # The recorded requests, the warm-up's and Fortio's first request per connection: all stamped.
    assert read >= p["requests"] and invalid == 0, (read, invalid, p["requests"])
