"""The loop end to end at small scale, on real processes: two client Envoys with the tailweight
filter reporting to the real aggregator, three real (emulated) backends of which one is 5x slower.
Asserts shares and zero errors (no timing thresholds), and that killing the aggregator in the middle
of a run fails no request."""
import pytest

from harness import runner
from harness.scenario import parse
from tailweight_e2e import paths

pytestmark = pytest.mark.timeout(300)

SMALL = {
    "name": "loop",
    "seed": 3,
    "warmup_s": 3,
    "duration_s": 8,
    "backends": [{"count": 2, "workers": 2, "base_ms": 5, "jitter": 0.2},
                 {"count": 1, "workers": 2, "base_ms": 5, "speed": 5.0, "jitter": 0.2}],
    # 150 rps: round robin sends the slow backend 50 rps of its 2 / 25 ms = 80 rps capacity, so it
    # copes (62% busy) and only its latency differs; the filter has to see that.
    "clients": {"count": 2, "qps": 150, "connections": 4},
    "policies": ["round_robin", "tailweight"],
}


@pytest.fixture(scope="module")
def scenario():
    for path in (paths.WASM, paths.RELEASE / "tailweight-aggregator"):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `make build`")
    return parse(SMALL)


def slow_share(result: dict) -> float:
    return result["share"][result["backends"][2]]


def test_tailweight_with_aggregator_moves_traffic_off_the_slow_backend(scenario, tmp_path):
    rr = runner.run_policy(scenario, "round_robin", runner.Options(out_dir=tmp_path, progress=False))
    tw = runner.run_policy(scenario, "tailweight", runner.Options(out_dir=tmp_path, progress=False))
    assert rr["errors"] == 0 and tw["errors"] == 0, (rr["codes"], tw["codes"])
    assert slow_share(rr) == pytest.approx(1 / 3, abs=0.05)
    # Round robin gives the 5x slower backend a third; tailweight must give it clearly less.
    assert slow_share(tw) < 0.6 * slow_share(rr), (slow_share(tw), slow_share(rr))
    # The aggregator really took part: every Envoy's upstream requests include its reports.
    assert tw["cpu_s"]["aggregator"] >= 0 and tw["aggregator_killed_at_s"] is None


def test_killing_the_aggregator_mid_run_fails_no_request(scenario, tmp_path):
    tw = runner.run_policy(scenario, "tailweight",
                           runner.Options(out_dir=tmp_path, progress=False, kill_aggregator_at_s=3.0))
    assert tw["aggregator_killed_at_s"] is not None and tw["aggregator_killed_at_s"] >= 3.0
    assert tw["requests"] > 0.8 * 150 * 8
    assert tw["errors"] == 0, tw["codes"]
    assert all(s["upstream_rq_5xx"] == 0 for s in tw["envoy_stats"])
    # Local-only picking keeps the slow backend's share low after the aggregator is gone.
    assert slow_share(tw) < 0.25
