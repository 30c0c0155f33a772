"""`make bench-overhead` (harness.overhead): its statistics, its Envoy configs (validated by the real
Envoy), its synthetic reporter against the real aggregator, and a --quick run end to end (it
completes and writes every section with numbers; no timing is asserted)."""
import json
import math

import pytest
import requests

from harness import overhead, overhead_configs, overhead_instructions, overhead_reporter, overhead_sidecar
from harness.overhead_measure import median_interval, paired, start_phases
from tailweight_e2e import aggregator, envoy, paths
from tailweight_e2e.procs import wait_for


def test_light_rows_pair_the_rounds_of_each_step():
    """Each round's variants ran side by side: over empty is the median of per-round differences,
    per request divides each round's difference by that round's rate."""
    def step(name, rate, rnd, empty, tw, requests):
        cell = {"requests": requests, "errors": 0}
        return {"step": name, "rate": rate, "round": rnd, "seconds": 10.0,
                "variants": {"empty_wasm": {**cell, "cpu_ms_per_s": empty}, "tailweight": {**cell, "cpu_ms_per_s": tw}}}
    steps = [step("idle", 0, None, 1.0, 1.2, 0),
             step("10 rps", 10, 0, 5.0, 5.5, 100), step("10 rps", 10, 1, 9.0, 9.2, 100),
             step("10 rps", 10, 2, 6.0, 7.0, 100)]
    rows = overhead.tables._light_rows(steps)
    assert [(r["step"], r["rounds"]) for r in rows] == [("idle", 1), ("10 rps", 3)]
    tw = rows[1]["variants"]["tailweight"]
    assert tw["cpu_ms_per_s"] == 7.0  # the median of 5.5, 9.2, 7.0
    assert tw["vs_empty_ms_per_s"] == pytest.approx(0.5)  # the median of +0.5, +0.2, +1.0 (not 7.0 - 6.0)
    assert (tw["vs_empty"]["low"], tw["vs_empty"]["high"]) == pytest.approx((0.2, 1.0))
    assert tw["vs_empty_per_request_us"] == pytest.approx(50.0)  # 0.5 ms/s over 10 rps
    assert rows[0]["variants"]["tailweight"]["vs_empty_ms_per_s"] == pytest.approx(0.2)
    assert "vs_empty" not in rows[1]["variants"]["empty_wasm"]


def test_sidecar_rows_pair_each_round_with_least_request():
    """Per rate, each variant's CPU per request over least_request is the median of the per-round
    differences (the variants ran side by side in each round), per request and per second."""
    def cell(cpu_ms, requests, seconds=10.0):
        return {"cpu_ns": {"workers": cpu_ms * 1e6, "main": 0, "other": 0}, "requests": requests, "errors": 0,
                "seconds": seconds}
    steps = [{"rate": 10, "round": r, "variants": {"least_request": cell(lr, 100), "tailweight": cell(tw, 100)}}
             for r, (lr, tw) in enumerate([(50, 60), (90, 91), (55, 58)])]
    steps.append({"rate": 1000, "round": 0, "variants": {"least_request": cell(1000, 10_000),
                                                         "tailweight": cell(1300, 10_000)}})
    rows = overhead_sidecar.summarise(steps)
    assert [(r["rate"], r["rounds"]) for r in rows] == [(10, 3), (1000, 1)]
    tw = rows[0]["variants"]["tailweight"]
    assert tw["vs_least_request_us"]["median"] == pytest.approx(30.0)  # +100, +10, +30 us per request
    assert tw["vs_least_request_ms_per_s"]["median"] == pytest.approx(0.3)
    assert tw["us_per_request"] == pytest.approx(600.0)  # the median of 600, 910, 580
    assert rows[1]["variants"]["tailweight"]["vs_least_request_us"]["median"] == pytest.approx(30.0)
    targets = overhead_sidecar.target_rows(rows, ["tailweight"])
    assert [(t[0], t[2]) for t in targets] == [("sidecar_cpu", pytest.approx(30.0)),
                                               ("sidecar_slow", pytest.approx(0.3))]


def test_callgrind_dumps_are_split_by_object(tmp_path):
    """Self costs go to the current `ob=`; names come once, then by number; a call's inclusive cost
    (the line after `calls=`) is not counted again."""
    dump = tmp_path / "cg.1"
    dump.write_text("\n".join([
        "events: Ir", "ob=(1) /opt/envoy/_bin/envoy", "fn=(1) 0x1", "10 100", "+2 50",
        "cob=(2) ???", "cfn=(2) 0x2", "calls=1 0", "12 999", "ob=(2)", "fn=(2)", "1 30",
        "ob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6", "fn=(3) memcpy", "5 7", "totals: 187"]) + "\n")
    assert overhead_instructions.objects(dump) == {"envoy": 150, "anon": 30, "libc": 7}
    assert overhead_instructions.total(dump) == 187


def test_median_interval_takes_the_widest_order_statistics_reaching_the_confidence():
    # n = 10: k = 2 covers 1 - 2 (1 + 10) / 1024 = 97.9%; k = 3 would cover 89.1% < 90%.
    d = median_interval([7, 1, 9, 3, 5, 2, 8, 4, 10, 6])
    assert (d["median"], d["low"], d["high"]) == (5.5, 2, 9)
    assert d["coverage"] == pytest.approx(1 - 2 * 11 / 1024, abs=1e-3)
    # Too few samples for 90%: min..max, and the coverage says how little that is.
    few = median_interval([3.0, 1.0, 2.0])
    assert (few["low"], few["high"], few["coverage"]) == (1.0, 3.0, 0.75)
    assert median_interval([])["median"] is None


def test_paired_differences_cancel_what_a_busy_round_adds_to_both():
    # Round 2 ran on a busy machine: both variants cost more, their difference did not change.
    d = paired([250.0, 400.0, 252.0], [210.0, 350.0, 205.0])
    assert d["all"] == [40.0, 50.0, 47.0] and d["median"] == 47.0


def test_start_phases_come_from_envoys_own_log_lines():
    log = "\n".join([
        "[2026-11-24 22:22:31.281][1][info][main] [source/server/server.cc:463] initializing epoch 0 (base id=0)",
        "[2026-11-24 22:22:31.294][1][debug][wasm] [source/extensions/common/wasm/wasm.cc:83] Base Wasm created 1 now",
        "[2026-11-24 22:22:32.178][1][debug][wasm] [wasm.cc:101] Thread-Local Wasm created 2 now active",
        "[2026-11-24 22:22:32.180][1][debug][wasm] [wasm.cc:101] Thread-Local Wasm created 3 now active",
        "[2026-11-24 22:22:32.237][1][info][main] [source/server/server.cc:1098] starting main dispatch loop",
    ])
    p = start_phases(log)
    assert p["to_wasm_ms"] == pytest.approx(13) and p["compile_ms"] == pytest.approx(884)
    assert p["after_compile_ms"] == pytest.approx(59) and p["init_to_dispatch_ms"] == pytest.approx(956)
    assert start_phases(log.splitlines()[0] + "\n" + log.splitlines()[-1])["compile_ms"] is None  # no wasm


def test_configs_differ_only_in_the_filter_and_envoy_accepts_them(tmp_path):
    http, grpc = ["127.0.0.1:18001", "127.0.0.1:18002"], ["127.0.0.1:18003"]
    with_filter = overhead_configs.with_grpc(overhead_configs.client(paths.WASM, http), grpc)
    without = overhead_configs.with_grpc(overhead_configs.client(None, http), grpc)
    assert envoy.validate(overhead_configs.render(with_filter), tmp_path) is None
    assert envoy.validate(overhead_configs.render(without), tmp_path) is None
    names = [f["name"] for listener in with_filter["static_resources"]["listeners"]
             for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]]
    assert names.count(overhead_configs.WASM_FILTER) == 2  # both listeners
    for listener in without["static_resources"]["listeners"]:
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        assert [f["name"] for f in hcm["http_filters"]] == ["envoy.filters.http.router"]
    fleet = overhead_configs.fleet(paths.WASM, http, 3, 18009, idle_timeout_s=1)
    assert envoy.validate(overhead_configs.render(fleet), tmp_path) is None
    clusters = {c["name"]: c for c in fleet["static_resources"]["clusters"]}
    assert set(clusters) == {"fleet_00", "fleet_01", "fleet_02", "tailweight_aggregator"}
    assert all(len(clusters[n]["load_assignment"]["endpoints"][0]["lb_endpoints"]) == 2
               for n in overhead_configs.fleet_cluster_names(3))
    # The native shell as a variant: its filter instead of the Wasm one, on both listeners and every
    # fleet cluster, and Envoy accepts it.
    native = overhead_configs.with_grpc(overhead_configs.client(paths.NATIVE, http), grpc)
    assert envoy.validate(overhead_configs.render(native), tmp_path) is None
    names = [f["name"] for listener in native["static_resources"]["listeners"]
             for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]]
    assert names.count("envoy.filters.http.dynamic_modules") == 2 and overhead_configs.WASM_FILTER not in names
    fleet = overhead_configs.fleet(paths.NATIVE, http, 3, 18009, idle_timeout_s=1)
    assert envoy.validate(overhead_configs.render(fleet), tmp_path) is None


def test_the_shipped_sidecar_bootstrap_override_makes_envoy_release_free_heap(group):
    """The chart's bootstrap override (charts/tailweight/files/sidecar-bootstrap.json), merged into a
    sidecar config as pilot-agent merges it: Envoy accepts it and starts tcmalloc's background
    release at the rate it names."""
    override = overhead_configs.sidecar_bootstrap_override()
    manager = override["memory_allocator_manager"]
    per_s = int(manager["bytes_to_release"]) / float(manager["memory_release_interval"].removesuffix("s"))
    assert per_s > 0
    cfg = overhead_configs.with_sidecar_bootstrap_override(overhead_configs.client(paths.WASM, ["127.0.0.1:9"]))
    assert cfg["static_resources"] == overhead_configs.client(paths.WASM, ["127.0.0.1:9"])["static_resources"]
    e = envoy.start(group, "releasing", overhead_configs.render(cfg))
    wait_for(lambda: f"Configured tcmalloc with background release rate: {per_s:.0f} bytes per second" in e.log(),
             10, "tcmalloc's background release configured", e.proc)


def test_synthetic_reports_make_the_aggregator_list_every_endpoint(group):
    agg = aggregator.start(group, args=["--identity=report"])
    addresses = [f"127.0.0.1:{20000 + i}" for i in range(300)]
    for tick in range(2):
        body = overhead_reporter.report_body("synthetic", 1, 1000, "fleet_00", addresses, tick)
        assert json.loads(body)["clusters"][0]["endpoints"][5]["requests"] == 10 * (tick + 1)
        r = requests.post(agg.url + overhead_reporter.REPORT_PATH, data=body, timeout=5)
        assert r.status_code == 200, r.text
    # The benchmark waits on this very check before its first fleet Envoy starts.
    wait_for(lambda: overhead.views_list_all(agg.url, "fleet_00", len(addresses)), 15, "the view", agg.proc)


def numbers(*xs) -> bool:
    return all(isinstance(x, int | float) and math.isfinite(x) for x in xs)


@pytest.mark.timeout(420)
def test_quick_run_writes_every_section_with_numbers(tmp_path):
    out = tmp_path / "out"
    overhead.main(["--quick", "--out", str(out), "--logs", str(tmp_path / "logs")])
    r = json.loads((out / "overhead.json").read_text())
    variants = set(overhead.VARIANTS)
    assert set(r["header"]["variants"]) == variants and numbers(r["header"]["load_average"]["median"])

    s = r["summary"]
    for c in ("c1", "c2", "c2_one_core"):
        rows = s["startup"][c]
        assert set(rows) == variants
        assert all(numbers(x["wall_ms"], x["cpu_ms"]) and x["wall_ms"] > 0 for x in rows.values())
        assert all(numbers(rows[v]["compile_ms"]) for v in ("empty_wasm", "tailweight"))
        assert numbers(rows["tailweight"]["wall_vs_empty"]["median"])
    for v, x in s["memory"].items():
        assert numbers(x["rss_1s_mib"], x["rss_late_mib"], x["fleet_rss_mib"]), (v, x)
        # Envoy's own heap account, from its admin /memory: part of the RSS.
        assert numbers(x["heap_allocated_mib"], x["heap_free_mib"], x["thread_caches_mib"]), (v, x)
        assert 0 < x["heap_allocated_mib"] + x["heap_free_mib"] + x["thread_caches_mib"] < x["rss_late_mib"]
        # The same config with the chart's bootstrap override, started beside it.
        assert numbers(x["rss_released_mib"], x["released_heap_free_mib"]), (v, x)
    assert numbers(s["memory"]["tailweight"]["released_vs_empty"]["median"])
    fleet = r["memory"]["fleet"]
    assert fleet["tailweight"]["endpoints_tracked"] > 0 and fleet["no_wasm"]["endpoints_tracked"] is None
    assert all(fleet[v]["requests"] > 0 for v in variants)
    assert set(s["cpu"]) == {"http_c1", "grpc_c1", "http_c2", "grpc_c2"}
    for setup, rows in s["cpu"].items():
        for v, x in rows.items():
            assert x["requests"] > 0 and numbers(x["cpu_us"]["median"], x["p50_ms"], x["p99_ms"]), (setup, v, x)
        assert numbers(rows["tailweight"]["vs_no_wasm"]["median"], rows["tailweight"]["p99_vs_empty"])
    assert [row["step"] for row in s["light"]] == ["idle", "1 rps", "10 rps", "100 rps", "1000 rps",
                                                   "idle after load"]
    assert all(numbers(cell["cpu_ms_per_s"]) for row in s["light"] for cell in row["variants"].values())
    # Beside the variants, tailweight with the sidecar bootstrap override, paired with tailweight.
    assert all(numbers(row["variants"][overhead.tables.RELEASING]["vs_tailweight"]["median"]) for row in s["light"])
    added = s["light_per_request"]["tailweight"]
    assert numbers(added["at_10_us"], added["at_1000_us"])
    # A smoke run is short: at 1,000 rps the added cost can measure at or below zero (noise), and
    # then there is no ratio (the targets table says why).
    no_ratio = added["at_1000_us"] <= 0
    assert added["ratio"] is None if no_ratio else numbers(added["ratio"]), added
    empty = s["light_per_request"]["empty_wasm"]  # the empty filter over no filter, for reference
    assert numbers(empty["at_10_us"], empty["at_1000_us"])
    sidecar = s["sidecar"]
    assert [row["rate"] for row in sidecar] == [10, 50, 150, 1000]
    for row in sidecar:
        assert set(overhead_sidecar.bootstraps(overhead.VARIANTS, ["127.0.0.1:9"], 9)) <= set(row["variants"])
        assert all(c["requests"] > 0 and numbers(c["us_per_request"], c["ms_per_s"]) for c in row["variants"].values())
        assert numbers(row["variants"]["tailweight"]["vs_least_request_us"]["median"])
    assert {t["target"] for t in s["targets"]} == set(overhead.tables.TARGETS)
    # Any variant's ratio may be missing for that reason (the native shell's added cost is near zero).
    assert all(numbers(t["value"]) for t in s["targets"]
               if not (t["target"] == "light_ratio" and "did not measure above zero" in t["detail"]))

    md = (out / "overhead.md").read_text()
    for heading in ("## 1. Start-up", "## 2. Memory", "## 3. CPU per request", "## 4. Light load",
                    "## 5. Where the harness's sidecars live", "## Targets"):
        assert heading in md
    assert "None" not in md and "nan" not in md
