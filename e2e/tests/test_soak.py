"""The soak (e2e/harness/soak.py): its targets judged on made-up samples (each can fail), and the
2-minute plan on real processes (`make soak-short`): rolling updates with new addresses, a failing
backend, the aggregator killed and restarted twice; every Envoy tracks only live and recently left
endpoints, the aggregator's book forgets those that left, no request fails beyond those in flight
at a backend's stop, the filters report again after each restart, and RSS was sampled (memory
flatness needs the 30-minute run). Counts and sets only, with margins; nothing is timed."""
import dataclasses

import pytest

from harness import soak, soak_targets
from tailweight_e2e import paths

TTL_MS = 10_000
A, B, C, D = (f"127.0.0.1:{p}" for p in (1001, 1002, 1003, 1004))


def envoy(tracked: list[str], gauge: int, **stats) -> dict:
    return {"tracked": tracked, "report_age_s": 0.5, "stats": {"endpoints_tracked": gauge, **stats}}


def doc_with(samples: list[dict], left_at: dict | None = None, **over) -> dict:
    doc = {"plan": {"endpoint_ttl_ms": TTL_MS, "clients": 1, "flat_from_s": 300.0}, "samples": samples,
           "left_at_s": left_at or {},
           "aggregator_kills": [], "allowed_failures": soak_targets.allowed_failures([], 0),
           "errors": 0, "requests": 100, "codes": {"SERVING": 100}}
    doc.update(over)
    return doc


def sample(t: float, live: list[str], envoys: list[dict], book: list[str] | None = None,
           rss: dict | None = None, **extra) -> dict:
    return {"t": t, "live": live, "envoys": envoys, "rss_mb": rss or {},
            "book": None if book is None else {"endpoints": book, "counts": {"endpoints": len(book), "reporters": 1}},
            "loadavg_1m": 1.0, **extra}


def by_name(targets) -> dict:
    return {t.name: t for t in targets}


def test_a_left_endpoint_is_tracked_until_the_ttl_and_slack_and_not_after():
    horizon = TTL_MS / 1000 + soak_targets.FILTER_SLACK_S
    within = doc_with([sample(20.0, [B, C], [envoy([A, B, C], 3)])], {A: 20.0 - horizon + 1})
    got = by_name(soak_targets.tracking_targets(within))
    assert got["tracked endpoints (each Envoy's last report)"].met is True
    assert got["endpoints_tracked gauge"].met is True

    beyond = doc_with([sample(20.0, [B, C], [envoy([A, B, C], 3)])], {A: 20.0 - horizon - 1})
    got = by_name(soak_targets.tracking_targets(beyond))
    assert got["tracked endpoints (each Envoy's last report)"].met is False
    assert got["endpoints_tracked gauge"].met is False  # 3 > 2 live + 0 recently left

    never = doc_with([sample(20.0, [B, C], [envoy([D, B, C], 2)])])
    violations = by_name(soak_targets.tracking_targets(never))["tracked endpoints (each Envoy's last report)"]
    assert violations.met is False and violations.detail["violations"][0]["since_left_s"] is None


def test_the_book_must_forget_what_left():
    horizon = TTL_MS / 1000 + soak_targets.BOOK_SLACK_S
    fresh = doc_with([sample(30.0, [B], [envoy([B], 1)], book=[A, B])], {A: 30.0 - horizon + 1})
    assert soak_targets.book_target(fresh).met is True
    stale = doc_with([sample(30.0, [B], [envoy([B], 1)], book=[A, B])], {A: 30.0 - horizon - 1})
    assert soak_targets.book_target(stale).met is False
    assert soak_targets.book_target(doc_with([sample(30.0, [B], [envoy([B], 1)])])).met is False  # no book seen


def test_memory_growth_is_judged_from_minute_five_over_a_long_enough_window():
    def run(end_mb: float, minutes: int) -> soak_targets.Target:
        samples = [sample(60.0 * m, [A], [envoy([A], 1)], rss={"envoy-0": 50.0 if m < 10 else end_mb})
                   for m in range(minutes + 1)]
        return soak_targets.memory_targets(doc_with(samples))[0]

    assert run(52.0, 30).met is True
    grown = run(56.0, 30)
    assert grown.met is False and grown.detail["growth"] == pytest.approx(0.12)
    assert run(80.0, 8).met is None  # from minute 5 to 8: too short to judge
    restarted = soak_targets.memory_targets(doc_with(
        [sample(60.0 * m, [A], [envoy([A], 1)], rss={"aggregator-2": 5.0}) for m in range(20, 29)],
        process_started_s={"aggregator-2": 1200.0}))[0]
    assert restarted.met is None and "25.0 min" in restarted.bound  # 5 minutes after its start


def test_failed_requests_are_bounded_by_what_was_in_flight_at_the_stops():
    stops = [{"in_flight": 2}, {"in_flight": 0}]
    assert soak_targets.failures_target(doc_with([], errors=2, allowed_failures=soak_targets.allowed_failures(
        stops, 0))).met is True
    assert soak_targets.failures_target(doc_with([], errors=3, allowed_failures=soak_targets.allowed_failures(
        stops, 0))).met is False


def test_reports_must_fail_while_the_aggregator_is_down_and_succeed_after():
    def at(t, failed, ok, book=True):
        return sample(t, [A], [envoy([A], 1, reports_failed=failed, reports_ok=ok)], book=[A] if book else None)

    kills = [{"at_s": 10.0, "restarted_s": 20.0, "name": "aggregator-2"}]
    good = doc_with([at(5, 0, 5), at(15, 5, 5, False), at(25, 5, 9), at(30, 5, 14)], aggregator_kills=kills)
    assert soak_targets.restart_target(good).met is True
    silent = doc_with([at(5, 0, 5), at(15, 5, 5, False), at(25, 5, 5), at(30, 5, 5)], aggregator_kills=kills)
    assert soak_targets.restart_target(silent).met is False
    unnoticed = doc_with([at(5, 0, 5), at(15, 0, 5, False), at(25, 0, 9), at(30, 0, 14)], aggregator_kills=kills)
    assert soak_targets.restart_target(unnoticed).met is False


def test_rollouts_replace_every_backend_with_a_new_address_and_the_failure_hits_a_serving_one():
    plan = soak.SHORT
    events = soak.rollout_events(plan)
    joins = [e["backends"][0] for e in events if e["action"] == "join"]
    leaves = [e["backends"][0] for e in events if e["action"] == "leave"]
    assert joins == list(range(plan.backends, plan.backends * (1 + len(plan.rollouts_at_s))))
    assert sorted(leaves) == list(range(plan.backends * len(plan.rollouts_at_s)))
    (failing,) = {e["backends"][0] for e in events if e["action"] in ("fail", "recover")}
    # It joined before the failure and leaves only after it recovered.
    join_at = next((e["at_s"] for e in events if e["action"] == "join" and e["backends"] == [failing]), 0.0)
    leave_at = next((e["at_s"] for e in events if e["action"] == "leave" and e["backends"] == [failing]), 1e9)
    assert join_at <= plan.fail_at_s and leave_at > plan.fail_at_s + plan.fail_for_s
    soak.scenario_of(plan)  # the harness's own checks accept it
    with pytest.raises(ValueError, match="no backend serves"):
        soak.rollout_events(dataclasses.replace(plan, fail_at_s=5, fail_for_s=100))


@pytest.mark.timeout(480)
def test_short_soak_keeps_tracking_and_the_book_bounded_without_failed_requests(tmp_path):
    for path in (paths.WASM, paths.RELEASE / "tailweight-aggregator", paths.RELEASE / "tailweight-emulator"):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `make build`")
    plan = soak.SHORT
    doc = soak.run(plan, tmp_path / "out", tmp_path / "logs", progress=False)
    targets = {t["name"]: t for t in doc["targets"]}

    assert doc["events_not_fired"] == []
    assert [k["restarted_s"] is not None for k in doc["aggregator_kills"]] == [True, True]
    for name in ("tracked endpoints (each Envoy's last report)", "endpoints_tracked gauge", "aggregator book",
                 "failed requests", "reports again after each aggregator restart"):
        assert targets[name]["met"] is True, targets[name]
    # Constant load: most of what was offered was sent (the margin covers a busy machine).
    assert doc["requests"] >= 0.7 * plan.qps * plan.duration_s, doc["requests"]

    samples = doc["samples"]
    # The tracking bound was exercised: right after leaves, Envoys still listed left endpoints ...
    assert any(a not in s["live"] for s in samples for e in s["envoys"] for a in e.get("tracked", []))
    # ... and at the end (46 s after the last leave, the ttl is 10 s) every list and the book hold
    # only live endpoints, and every Envoy tracks some.
    last = samples[-1]
    for k, e in enumerate(last["envoys"]):
        assert e["tracked"] and set(e["tracked"]) <= set(last["live"]), (k, e["tracked"], last["live"])
        assert 0 < e["stats"]["endpoints_tracked"] <= len(last["live"]), (k, e["stats"])
        assert e["stats"]["picks"] > 0
    assert last["book"] is not None and set(last["book"]["endpoints"]) <= set(last["live"]), last["book"]

    # RSS sampled for every Envoy, the emulator and each aggregator incarnation (flatness is not
    # judged in 2 minutes).
    counts: dict[str, int] = {}
    for s in samples:
        for name, mb in s["rss_mb"].items():
            assert mb > 1, (name, mb)
            counts[name] = counts.get(name, 0) + 1
    expected = {f"envoy-{i}" for i in range(plan.clients)} | {"emulator", "aggregator-1", "aggregator-2",
                                                               "aggregator-3"}
    assert set(counts) == expected, counts
    full = plan.duration_s / plan.sample_s
    assert all(counts[f"envoy-{i}"] >= 0.8 * full for i in range(plan.clients)), counts
    assert all(t["met"] is None for n, t in targets.items() if n.startswith("memory flat")), targets
    for name in ("results.json", "results.md", "rss.png", "tracking.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0, name
