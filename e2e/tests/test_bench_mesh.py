"""The harness as a mesh, at small scale on real processes: every policy over gRPC (h2c between the
client Envoys and the backends, Fortio's gRPC pings over few connections with several streams), and
a rolling update with tailweight (backends joining the EDS set cold, old ones leaving it and
stopping) after which every client Envoy tracks only what it should. Counts and shares only, with
margins; nothing is timed."""
import json

import pytest
import yaml

from harness import analysis, runner
from harness.__main__ import main
from harness.scenario import parse
from tailweight_e2e import paths
from tailweight_e2e.envoy_configs import POLICIES

pytestmark = pytest.mark.timeout(300)

GRPC = {
    "name": "grpc-six",
    "seed": 2,
    "warmup_s": 1,
    "duration_s": 4,
    "backends": [{"count": 2, "workers": 2, "base_ms": 5, "jitter": 0.2, "protocol": "grpc"},
                 {"count": 1, "workers": 2, "base_ms": 5, "speed": 4.0, "jitter": 0.2, "protocol": "grpc"}],
    "clients": {"count": 2, "qps": 80, "connections": 2, "streams": 4},
    # Every policy but the one that needs the destinations' sidecars (see the load-stamp test).
    "policies": [p for p in POLICIES if p != "tailweight_stamps"],
}

# Four backends, two replaced one by one under load: a new one joins (cold), then an old one leaves
# the endpoint set and stops listening 1.5 s later. The run ends 14 s after the last leave.
ROLLOUT = {
    "name": "rollout-small",
    "seed": 4,
    "warmup_s": 2,
    "duration_s": 20,
    "backends": [{"count": 2, "workers": 2, "base_ms": 5, "jitter": 0.2},
                 {"count": 2, "workers": 2, "base_ms": 5, "jitter": 0.2, "cold_factor": 3, "cold_s": 3,
                  "absent": True}],
    "clients": {"count": 2, "qps": 120, "connections": 4},
    "events": [{"at_s": 2, "backends": [2], "action": "join"},
               {"at_s": 3, "backends": [0], "action": "leave", "value": 1.5},
               {"at_s": 5, "backends": [3], "action": "join"},
               {"at_s": 6, "backends": [1], "action": "leave", "value": 1.5}],
    "policies": ["tailweight"],
}
ENDPOINT_TTL_S = 4.0
# Below the ttl (the filter requires it): the new backend that joined cold looks slow for a while and
# gets few picks; its estimate goes stale (and it is tried again) well before it would be forgotten.
STALE_AFTER_MS = 2000
# Beyond the ttl, before a left endpoint must be gone from a report: the answers still in flight
# when it left, the filter's tick (0.2 s) and its report interval (1 s).
FORGET_SLACK_S = 2.0
# Beyond that, before the aggregator's book has let a left endpoint go: the reporter ttl (3 s, what
# the last report that listed it renewed) and its expiry pass.
BOOK_SLACK_S = 4.0


@pytest.fixture(scope="module", autouse=True)
def built():
    for path in (paths.WASM, paths.RELEASE / "tailweight-aggregator", paths.RELEASE / "tailweight-emulator"):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `make build`")


def test_every_policy_runs_over_grpc_without_errors(tmp_path):
    scenario = tmp_path / "grpc.yaml"
    scenario.write_text(yaml.safe_dump(GRPC))
    out = tmp_path / "out"
    assert main(["--scenario", str(scenario), "--out", str(out), "--operator-period", "2", "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert [p["policy"] for p in doc["policies"]] == GRPC["policies"]
    for p in doc["policies"]:
        name = p["policy"]
        assert "error" not in p, p.get("error")
        assert p["protocol"] == "grpc" and p["retries"] is True
        # Two clients at 40 calls/s for 4 s, every call a gRPC ping answered SERVING.
        assert 250 <= p["requests"] <= 340, (name, p["requests"])
        assert p["errors"] == 0 and p["codes"] == {"SERVING": p["requests"]}, (name, p["codes"])
        # The backends saw every recorded call (and Fortio's uncounted first ping per connection).
        served = sum(p["samples"][-1][1]) - sum(p["samples"][0][1])
        assert served >= p["requests"], (name, served, p["requests"])
        assert sum(s["upstream_rq_total"] for s in p["envoy_stats"]) >= p["requests"]
        for k in range(2):
            stats = (out / "logs" / name / f"envoy-{k}.stats.txt").read_text()
            assert "cluster.backends.upstream_cx_http2_total: 0\n" not in stats, f"{name}: HTTP/2 to the backends"
        if name == "tailweight_native_lb":
            # Envoy's load balancer is the native policy: the filter learns every endpoint and
            # steers none itself; `picks` counts the policy's choices.
            assert all(s["wasmcustom"]["wasmcustom.tailweight.endpoints_tracked"] == 3
                       for s in p["envoy_stats"]), (name, [s["wasmcustom"] for s in p["envoy_stats"]])
        if name.startswith("tailweight"):
            assert all(s["wasmcustom"]["wasmcustom.tailweight.picks"] > 0 for s in p["envoy_stats"]), name
    assert "gRPC (h2c), 2 connections x 4 streams per client" in (out / "results.md").read_text()


def test_load_stamps_cross_grpc_through_the_destinations_sidecars(tmp_path):
    """The gRPC backends behind their own sidecars: under tailweight_stamps each sidecar stamps every
    response and the clients read (and remove) every stamp; least_request's plain sidecars stamp
    nothing."""
    scenario = tmp_path / "grpc-sidecars.yaml"
    scenario.write_text(yaml.safe_dump({**GRPC, "name": "grpc-sidecars", "server_sidecars": True,
                                        "policies": ["least_request", "tailweight_stamps"]}))
    out = tmp_path / "out"
    assert main(["--scenario", str(scenario), "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    plain, stamps = doc["policies"]
    for p in (plain, stamps):
        assert "error" not in p, p.get("error")
        assert p["errors"] == 0 and p["codes"] == {"SERVING": p["requests"]}, (p["policy"], p["codes"])
        assert len(p["server_envoy_stats"]) == 3
    assert all("wasmcustom" not in s for s in plain["server_envoy_stats"])
    written = sum(s["wasmcustom"]["wasmcustom.tailweight.stamps_written"] for s in stamps["server_envoy_stats"])
    read = sum(s["wasmcustom"]["wasmcustom.tailweight.stamps_read"] for s in stamps["envoy_stats"])
    invalid = sum(s["wasmcustom"]["wasmcustom.tailweight.stamps_invalid"] for s in stamps["envoy_stats"])
    # Every response a client's filter saw carried a stamp: the recorded calls, the warm-up's and
    # Fortio's first ping per connection.
    assert read >= stamps["requests"] and invalid == 0, (read, invalid, stamps["requests"])
    assert written >= read, (written, read)


def test_rollout_leaves_every_envoy_tracking_only_live_endpoints(tmp_path):
    scenario = parse(ROLLOUT)
    opts = runner.Options(out_dir=tmp_path, progress=False,
                          plugin_extra={"endpoint_ttl_ms": int(ENDPOINT_TTL_S * 1000),
                                        "stale_after_ms": STALE_AFTER_MS})
    r = runner.run_policy(scenario, "tailweight", opts)
    backends = r["backends"]

    assert [(e["action"], e["backends"]) for e in r["events"]] == [
        ("join", [2]), ("leave", [0]), ("stop", [0]), ("join", [3]), ("leave", [1]), ("stop", [1])]
    assert r["live_endpoints"] == backends[2:]
    # No request failed beyond those that can be in flight (Istio's retries: none expected).
    in_flight_bound = ROLLOUT["clients"]["count"] * ROLLOUT["clients"]["connections"]
    assert r["errors"] <= in_flight_bound, r["codes"]
    assert r["requests"] > 0.8 * 120 * 16
    # After the last old backend stopped, the new ones serve everything (the last one joined cold and
    # slow-starts, so its share is small but not zero).
    last_stop = r["events"][-1]["fired_s"]
    after = {b: analysis.share_between(r["samples"], b, last_stop, r["samples"][-1][0]) for b in range(4)}
    assert after[0] == after[1] == 0 and after[2] > 0 and after[3] > 0, after

    for k, s in enumerate(r["envoy_stats"]):
        w = s["wasmcustom"]
        picks = w["wasmcustom.tailweight.picks"]
        assert picks > 0.5 * r["requests"] / 2, (k, picks)
        assert w["wasmcustom.tailweight.picks_not_honoured"] <= 0.05 * picks, (k, w)
        # Its last report: the live endpoints, plus at most those that left within the ttl.
        tracked = s["tracked"]
        report_at = r["ended_s"] - tracked["report_age_s"]
        for address in tracked["not_live"]:
            assert address in r["left_at_s"], f"envoy {k} tracks {address}, which was never in the set"
            since = report_at - r["left_at_s"][address]
            assert since <= ENDPOINT_TTL_S + FORGET_SLACK_S, f"envoy {k} tracks {address} {since:.1f} s after it left"
        assert tracked["live_not_tracked"] == [], (k, tracked)
        # The gauge (written by whichever of the Envoy's VMs ticked last) counts no more than that.
        recently_left = [a for a, t in r["left_at_s"].items() if r["ended_s"] - t <= ENDPOINT_TTL_S + FORGET_SLACK_S]
        assert w["wasmcustom.tailweight.endpoints_tracked"] <= len(r["live_endpoints"]) + len(recently_left), (k, w)

    # The aggregator's book follows the reports: once no report lists a left endpoint, it is gone
    # from the aggregator's view within a reporter ttl.
    book_after = max(r["left_at_s"].values()) + ENDPOINT_TTL_S + FORGET_SLACK_S + BOOK_SLACK_S
    late_views = [view for at, view in r["aggregator_view"] if at > book_after]
    assert late_views, (book_after, r["ended_s"])
    for view in late_views:
        assert not set(view) & set(r["left_at_s"]), view
        assert set(view) == set(r["live_endpoints"]), view
