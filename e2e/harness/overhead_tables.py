"""The numbers of `make bench-overhead` (harness.overhead) made into what a reader compares: medians,
paired differences against the empty filter and against no filter with their confidence intervals,
the targets the filter is judged against, and one markdown table per section."""
import statistics

from harness import overhead_instructions as instructions
from harness import overhead_sidecar as sidecar
from harness.overhead_measure import median_interval, paired, ratios

BASE, EMPTY, FLOOR = "no_wasm", "empty_wasm", "floor_wasm"
# The light-load section runs tailweight twice: as is, and with the chart's sidecar bootstrap
# override (Envoy releasing free heap), to pair the two.
TAILWEIGHT, RELEASING = "tailweight", "tailweight_releasing"
KIB, MIB = 1024, 1024 * 1024

# What the filter is judged against (the lead's targets); `limit` in the unit of the measurement.
TARGETS = {
    "startup": ("start to ready, over the empty filter (--concurrency 2)", 50.0, "ms"),
    "startup_one_core": ("start to ready, over the empty filter (--concurrency 2 on one core)", 50.0, "ms"),
    "module": ("module size", 150 * KIB, "bytes"),
    "rss_idle": ("RSS idle ({idle_late_s:g} s after ready), over the empty filter", 4.0, "MiB"),
    "rss_idle_released": ("RSS idle, Envoy releasing free heap (the chart's sidecar bootstrap override, "
                          "{released_late_s:g} s after ready), over the empty filter", 4.0, "MiB"),
    "rss_fleet": ("RSS at {fleet_clusters} clusters x {fleet_endpoints:,} endpoints, over the empty filter", 8.0,
                  "MiB"),
    "cpu": ("Envoy CPU per request, over no filter", 30.0, "us"),
    "p99": ("p99 latency / the empty filter's", 1.10, "x"),
    "idle_cpu": ("idle Envoy CPU, over the empty filter", 1.0, "ms/s"),
    "light_ratio": ("added CPU per request at 10 rps / at 1,000 rps", 2.0, "x"),
    "sidecar_cpu": ("harness setting: Envoy CPU per request over least_request, 50-1,000 rps", 30.0, "us"),
    "sidecar_slow": ("harness setting: Envoy CPU over least_request at the slowest rate", 1.0, "ms/s"),
}


def _median(samples: list[dict], key: str) -> float | None:
    values = [x[key] for x in samples if x.get(key) is not None]
    return statistics.median(values) if values else None


def _column(samples: list[dict], key: str) -> list:
    return [x.get(key) for x in samples]


def subjects(variants) -> list[str]:
    """The variants judged against the targets: all but the baselines."""
    return [v for v in variants if v not in (BASE, EMPTY, FLOOR)]


def summarise(r: dict) -> dict:
    out: dict = {}
    if "startup" in r:
        out["startup"] = {}
        for c, by_v in r["startup"].items():
            rows = {}
            for v, samples in by_v.items():
                rows[v] = {k: _median(samples, k) for k in ("wall_ms", "cpu_ms", "rss_mib", "to_wasm_ms",
                                                            "compile_ms", "after_compile_ms")}
                if v != EMPTY and EMPTY in by_v:
                    for k in ("wall", "cpu", "rss"):
                        key = "rss_mib" if k == "rss" else f"{k}_ms"
                        rows[v][f"{k}_vs_empty"] = paired(_column(samples, key), _column(by_v[EMPTY], key))
            out["startup"][c] = rows
    if "memory" in r:
        idle, fleet = r["memory"]["idle"], r["memory"]["fleet"]
        rows = {}
        for v, samples in idle.items():
            row = {k: _median(samples, k) for k in ("rss_1s_mib", "rss_late_mib", "heap_allocated_mib",
                                                    "heap_free_mib", "thread_caches_mib", "rss_released_mib",
                                                    "released_heap_allocated_mib", "released_heap_free_mib",
                                                    "released_thread_caches_mib")}
            if v != EMPTY and EMPTY in idle:
                for key, name in (("rss_late_mib", "late_vs_empty"), ("rss_released_mib", "released_vs_empty")):
                    if row[key] is not None:
                        row[name] = paired(_column(samples, key), _column(idle[EMPTY], key))
            f = fleet.get(v, {})
            row["fleet_rss_mib"] = f.get("rss_mib")
            if v != EMPTY and EMPTY in fleet and f.get("rss_mib") is not None:
                row["fleet_vs_empty_mib"] = f["rss_mib"] - fleet[EMPTY]["rss_mib"]
            rows[v] = row
        out["memory"] = rows
    if "cpu" in r:
        out["cpu"] = {}
        for key, by_v in r["cpu"].items():
            latency = r.get("cpu_latency", {}).get(key, {})
            rows = {}
            for v, samples in by_v.items():
                cpu = _column(samples, "cpu_us_per_request")
                row = {"requests": sum(x["requests"] for x in samples), "errors": sum(x["errors"] for x in samples),
                       "cpu_us": median_interval(cpu),
                       **{k: latency.get(v, {}).get(k) for k in ("p50_ms", "p90_ms", "p99_ms")}}
                for base, name in ((BASE, "vs_no_wasm"), (EMPTY, "vs_empty")):
                    if v != base and base in by_v:
                        row[name] = paired(cpu, _column(by_v[base], "cpu_us_per_request"))
                if v != EMPTY and EMPTY in by_v:
                    row["p99_vs_empty_rounds"] = ratios(_column(samples, "p99_ms"), _column(by_v[EMPTY], "p99_ms"))
                    empty_p99 = latency.get(EMPTY, {}).get("p99_ms")
                    row["p99_vs_empty"] = row["p99_ms"] / empty_p99 if row["p99_ms"] and empty_p99 else None
                rows[v] = row
            out["cpu"][key] = rows
    if r.get("light"):
        out["light"] = _light_rows(r["light"])
        out["light_per_request"] = _light_per_request(out["light"])
    if r.get("flat"):
        by_v: dict[str, list[float]] = {}
        for _, rss in r["flat"]:
            for v, mib in rss.items():
                by_v.setdefault(v, []).append(mib)
        out["flat"] = {v: {"first": xs[0], "last": xs[-1], "min": min(xs), "max": max(xs)} for v, xs in by_v.items()}
    if r.get("sidecar"):
        out["sidecar"] = sidecar.summarise(r["sidecar"])
    out["targets"] = targets(r, out)
    return out


def _light_rows(steps: list[dict]) -> list[dict]:
    """One row per step name (its rounds together, in the order first run): per variant the median
    CPU per second, and over the empty filter the median of the per-round differences (the variants
    ran side by side, so each round's difference is paired) with its interval, per second and per
    request."""
    by_step: dict[str, list[dict]] = {}
    for step in steps:
        by_step.setdefault(step["step"], []).append(step)
    rows = []
    for name, rounds in by_step.items():
        row = {"step": name, "rate": rounds[0]["rate"], "rounds": len(rounds), "variants": {}}
        for v in rounds[0]["variants"]:
            cpu = [st["variants"][v]["cpu_ms_per_s"] for st in rounds]
            rps = [st["variants"][v]["requests"] / st["seconds"] if st["rate"] > 0 else 0.0 for st in rounds]
            cell = {"cpu_ms_per_s": statistics.median(cpu), "rps": statistics.median(rps),
                    "errors": sum(st["variants"][v]["errors"] for st in rounds)}
            if cell["rps"] > 0:
                cell["per_request_us"] = statistics.median(c * 1e3 / n for c, n in zip(cpu, rps, strict=True) if n)
            if v == EMPTY and BASE in rounds[0]["variants"] and cell["rps"] > 0:
                base = [st["variants"][BASE]["cpu_ms_per_s"] for st in rounds]
                cell["vs_no_wasm_per_request_us"] = statistics.median(
                    (c - b) * 1e3 / n for c, b, n in zip(cpu, base, rps, strict=True) if n)
            if v != EMPTY and EMPTY in rounds[0]["variants"]:
                base = [st["variants"][EMPTY]["cpu_ms_per_s"] for st in rounds]
                cell["vs_empty"] = paired(cpu, base)
                cell["vs_empty_ms_per_s"] = cell["vs_empty"]["median"]
                if cell["rps"] > 0:
                    cell["vs_empty_per_request"] = median_interval(
                        [(c - b) * 1e3 / n for c, b, n in zip(cpu, base, rps, strict=True) if n])
                    cell["vs_empty_per_request_us"] = cell["vs_empty_per_request"]["median"]
            if v == RELEASING and TAILWEIGHT in rounds[0]["variants"]:
                cell["vs_tailweight"] = paired(cpu, [st["variants"][TAILWEIGHT]["cpu_ms_per_s"] for st in rounds])
            row["variants"][v] = cell
        rows.append(row)
    return rows


def _light_per_request(rows: list[dict]) -> dict:
    """Each variant's added CPU per request over the empty filter at 10 rps and at 1,000 rps, and
    their ratio: the fixed cost per second (ticks, reports) spread over few requests, and whatever
    a request costs more when they come seldom. The empty filter's over no filter, the same way,
    under its own name (what any Wasm filter pays)."""
    by_rate = {row["rate"]: row for row in rows if row["rate"] > 0}
    if 10 not in by_rate or 1000 not in by_rate:
        return {}
    out = {}
    for v in [EMPTY, *subjects(by_rate[10]["variants"])]:
        key = "vs_no_wasm_per_request_us" if v == EMPTY else "vs_empty_per_request_us"
        slow, fast = (by_rate[rate]["variants"].get(v, {}).get(key) for rate in (10, 1000))
        if slow is None or fast is None:
            continue
        out[v] = {"at_10_us": slow, "at_1000_us": fast, "ratio": slow / fast if fast > 0 else None}
        interval = by_rate[10]["variants"][v].get("vs_empty_per_request")
        if v != EMPTY and interval and fast > 0:
            out[v]["ratio_low"], out[v]["ratio_high"] = interval["low"] / fast, interval["high"] / fast
    return out


def targets(r: dict, s: dict) -> list[dict]:
    """One row per target and judged variant: the measurement (a median, with its confidence
    interval where there is one) and whether it meets the target (None: not measured)."""
    rows = []
    variants = r["header"]["variants"]

    def add(key: str, v: str, value, low=None, high=None, detail: str = ""):
        what, limit, unit = TARGETS[key]
        what = what.format(**r["header"]["settings"])
        met = None if value is None else value <= limit
        straddles = low is not None and high is not None and low <= limit < high
        rows.append({"target": key, "what": what, "variant": v, "limit": limit, "unit": unit, "value": value,
                     "low": low, "high": high, "met": met, "ci_straddles": straddles, "detail": detail})

    for v in subjects(variants):
        size = variants[v]["bytes"]
        for key, setting in (("startup", "c2"), ("startup_one_core", "c2_one_core")):
            st = s.get("startup", {}).get(setting, {}).get(v, {}).get("wall_vs_empty")
            if st:
                add(key, v, st["median"], st["low"], st["high"])
        add("module", v, size)
        m = s.get("memory", {}).get(v, {})
        if "late_vs_empty" in m:
            add("rss_idle", v, m["late_vs_empty"]["median"], m["late_vs_empty"]["low"], m["late_vs_empty"]["high"])
        if "released_vs_empty" in m:
            d = m["released_vs_empty"]
            add("rss_idle_released", v, d["median"], d["low"], d["high"])
        if "fleet_vs_empty_mib" in m:
            tracked = r["memory"]["fleet"][v].get("endpoints_tracked")
            add("rss_fleet", v, m["fleet_vs_empty_mib"], detail=f"{tracked} endpoints tracked")
        cpu = s.get("cpu", {})
        if cpu:
            # A section kept from an earlier run (overhead.keep_earlier_sections) may lack a variant.
            measured = [k for k in cpu if "vs_no_wasm" in cpu[k].get(v, {})]
            worst = max((cpu[k][v]["vs_no_wasm"] for k in measured), key=lambda d: d["median"], default=None)
            if worst:
                add("cpu", v, worst["median"], worst["low"], worst["high"], detail="the worst of " + ", ".join(
                    f"{k} {cpu[k][v]['vs_no_wasm']['median']:+.1f}" for k in measured))
            p99s = [(k, cpu[k][v].get("p99_vs_empty")) for k in cpu if cpu[k].get(v, {}).get("p99_vs_empty")]
            if p99s:
                add("p99", v, max(x for _, x in p99s),
                    detail="the worst of " + ", ".join(f"{k} {x:.2f}" for k, x in p99s))
        idle = [row["variants"][v]["vs_empty_ms_per_s"] for row in s.get("light", []) if row["rate"] == 0
                and "vs_empty_ms_per_s" in row["variants"].get(v, {})]
        if idle:
            add("idle_cpu", v, max(idle), detail="the larger of idle fresh and idle after load")
        lr = s.get("light_per_request", {}).get(v)
        if lr and lr["ratio"] is not None:
            add("light_ratio", v, lr["ratio"], lr.get("ratio_low"), lr.get("ratio_high"),
                detail=f"{lr['at_10_us']:.0f} us / {lr['at_1000_us']:.1f} us (the interval: 10 rps's)")
        elif lr:
            add("light_ratio", v, None, detail=f"{lr['at_10_us']:.0f} us / {lr['at_1000_us']:.1f} us: no ratio, the "
                "added cost at 1,000 rps did not measure above zero in this run")
    for key, v, value, low, high, detail in sidecar.target_rows(s.get("sidecar", []), subjects(
            [x for x in (s.get("sidecar") or [{"variants": {}}])[0]["variants"] if x != sidecar.LEAST_REQUEST])):
        add(key, v, value, low, high, detail)
    return rows


# ---- markdown --------------------------------------------------------------------------------------


def _f(x, digits: int = 1, sign: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _ci(d: dict | None, digits: int = 1, sign: bool = True) -> str:
    """median [low, high] of a paired()/median_interval() result."""
    if not d or d.get("median") is None:
        return "–"
    return f"{_f(d['median'], digits, sign)} [{_f(d['low'], digits, sign)}, {_f(d['high'], digits, sign)}]"


def _coverage(d: dict | None) -> str:
    return f"{d['coverage'] * 100:.0f}%" if d and d.get("coverage") is not None else "–"


def markdown(r: dict) -> str:
    h, s = r["header"], r["summary"]
    st = h["settings"]
    m, load = h["machine"], h.get("load_average", {})
    lines = [
        "# What tailweight costs a fleet (`make bench-overhead`" + (" --quick, a smoke run)" if h["quick"] else ")"),
        "",
        f"{h['date']}, {h.get('minutes', '?')} min; {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}; Envoy {m['envoy']}; commit {m['commit']}. Load average (1 min) during the run: "
        f"median {load.get('median')}, {load.get('min')}..{load.get('max')} ({load.get('samples')} samples; "
        f"{load.get('start')} at the start): a shared machine, so compare variants, not absolutes. Envoys pinned "
        "to core 1, load and backends to core 0; CPU from /proc. "
        f"{st['starts']} interleaved starts per variant and concurrency, {st['rounds']} paired rounds of "
        f"{st['seconds']:g} s per variant and configuration. Intervals: [low, high] of the median, "
        "distribution-free (order statistics of the paired per-round differences; coverage in the tables).",
        "",
        "Variants: " + "; ".join(f"**{v}** " + (f"`{x['path']}` ({x['bytes']:,} bytes)" if x["path"] else "(no filter)")
                                 for v, x in h["variants"].items()) + ".",
        "",
        *r.get("notes", []),  # analysis kept with the data (overhead.json's "notes", markdown lines)
    ]
    if "startup" in s:
        lines += _startup_table(r, s)
    if "memory" in s:
        lines += _memory_table(r, s)
    if s.get("flat"):
        lines += _flat_table(r, s)
    if "cpu" in s:
        lines += _cpu_table(r, s)
    if s.get("light"):
        lines += _light_table(r, s)
    if s.get("sidecar"):
        lines += sidecar.markdown(s["sidecar"], st)
    if r.get("instructions"):
        lines += instructions.markdown(r["instructions"])
    lines += _targets_table(s)
    return "\n".join(lines) + "\n"


def _startup_table(r: dict, s: dict) -> list[str]:
    any_c = next(iter(r["startup"].values()))
    n = len(next(iter(any_c.values())))
    lines = [
        "## 1. Start-up",
        "",
        f"Envoy with one listener and one cluster (filter local-only), median of {n} starts per variant and "
        "setting, the variants' starts interleaved; \"on one core\": confined to one core (taskset), as on a busy "
        "node, where V8's compile cannot use a second core. Wall: from spawning Envoy to /ready answering 200 "
        "(polled every 5 ms). CPU: Envoy's utime + stime at /ready; RSS: its VmRSS then. Compile: from Envoy's log "
        "at wasm:debug, "
        "\"Base Wasm created\" to the first \"Thread-Local Wasm created\" (V8 compiles the module and runs "
        "`_initialize`); before wasm: first log line to \"Base Wasm created\"; after compile: to the main "
        "dispatch loop.",
        "",
        "| concurrency | variant | module bytes | wall ms | wall over empty, ms | CPU ms | CPU over empty, ms "
        "| RSS at ready MiB | RSS over empty, MiB | before wasm ms | compile ms | after compile ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    sizes = {v: x["bytes"] for v, x in r["header"]["variants"].items()}
    for c, rows in s["startup"].items():
        for v, x in rows.items():
            size = "–" if sizes.get(v) is None else f"{sizes[v]:,}"
            setting = c.removeprefix("c").replace("_one_core", ", on one core")
            cells = [setting, v, size, _f(x["wall_ms"], 0), _ci(x.get("wall_vs_empty"), 0),
                     _f(x["cpu_ms"], 0), _ci(x.get("cpu_vs_empty"), 0), _f(x.get("rss_mib"), 1),
                     _ci(x.get("rss_vs_empty"), 1), _f(x["to_wasm_ms"], 0),
                     _f(x["compile_ms"], 0), _f(x["after_compile_ms"], 0)]
            lines.append("| " + " | ".join(cells) + " |")
    cov = next((x["wall_vs_empty"]["coverage"] for rows in s["startup"].values() for x in rows.values()
                if x.get("wall_vs_empty") and x["wall_vs_empty"].get("coverage") is not None), None)
    if cov:
        lines += ["", f"Intervals cover the median with {cov * 100:.0f}% confidence."]
    return lines + [""]


def _memory_table(r: dict, s: dict) -> list[str]:
    st = r["header"]["settings"]
    fleet = r["memory"]["fleet"]
    idle_n = len(next(iter(r["memory"]["idle"].values())))
    late = f"{st['idle_late_s']:g} s"
    released = f"{st.get('released_late_s', 0):g} s"
    lines = [
        "## 2. Memory",
        "",
        f"Envoy RSS at --concurrency 2. Idle: the start-up config, 1 s and {late} after /ready, median of "
        f"{idle_n} starts (over empty: paired by start). Releasing: the same config with the sidecar bootstrap "
        f"override charts/tailweight/files/sidecar-bootstrap.json ships (Envoy's `memory_allocator_manager`: tcmalloc "
        f"hands free heap pages back to the kernel, once its heap has not peaked for a minute), {released} after "
        f"/ready, started beside the others. Fleet: {st['fleet_clusters']} clusters each listing "
        f"the same {st['fleet_endpoints']:,} endpoints (one emulator), the route splitting requests evenly "
        f"over them, the aggregator on, a synthetic reporter naming every endpoint each second (so the "
        f"aggregator's views suggest them all); {st['fleet_seconds']:g} s of Fortio at {st['fleet_qps']:g} qps "
        f"({st['fleet_connections']} connections) per variant, one variant after the other; RSS when the load "
        f"ends. Upstream connections close after {st['fleet_idle_timeout_s']:g} s idle (else one per worker, "
        "cluster and endpoint would stay open), the same for every variant. Endpoints tracked: the filter's "
        "`endpoints_tracked` gauge at the end (the most seen during the load); it forgets an endpoint 60 s "
        "after its last good answer, so the load spread over all of them decides how many stay.",
        "",
        f"| variant | idle 1 s MiB | idle {late} MiB | idle over empty, MiB | releasing, {released} MiB "
        "| releasing over empty, MiB | fleet MiB | fleet over empty, MiB | endpoints tracked (most) "
        "| fleet requests (errors) | upstream connections open | Envoy ready s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for v, x in s["memory"].items():
        f = fleet.get(v, {})
        tracked = "–" if f.get("endpoints_tracked") is None else \
            f"{f['endpoints_tracked']:,} ({f.get('endpoints_tracked_max') or 0:,})"
        lines.append(f"| {v} | {_f(x['rss_1s_mib'])} | {_f(x['rss_late_mib'])} | {_ci(x.get('late_vs_empty'))} "
                     f"| {_f(x.get('rss_released_mib'))} | {_ci(x.get('released_vs_empty'))} "
                     f"| {_f(x['fleet_rss_mib'])} | {_f(x.get('fleet_vs_empty_mib'), sign=True)} | {tracked} "
                     f"| {f.get('requests', 0):,} ({f.get('errors', 0)}) | {f.get('upstream_cx_active', '–')} "
                     f"| {_f(f.get('ready_s'), 2)} |")
    total = r["header"]["settings"]["fleet_clusters"] * r["header"]["settings"]["fleet_endpoints"]
    lines += ["", f"({total:,} cluster x endpoint pairs in all.)", ""]
    if any(x.get("heap_allocated_mib") is not None for x in s["memory"].values()):
        lines += [
            f"Where the idle RSS is ({late} after /ready; Envoy's heap from its admin /memory, tcmalloc; medians): "
            "what Envoy's objects hold (allocated), free pages the heap keeps mapped (counted in RSS: the heap "
            "grew while V8 compiled the module and keeps the pages V8 freed) and the threads' caches.",
            "",
            "| variant | RSS MiB | heap allocated MiB | heap free, kept MiB | thread caches MiB |",
            "| --- | ---: | ---: | ---: | ---: |",
            *[f"| {v} | {_f(x['rss_late_mib'])} | {_f(x.get('heap_allocated_mib'))} | {_f(x.get('heap_free_mib'))} "
              f"| {_f(x.get('thread_caches_mib'))} |" for v, x in s["memory"].items()],
            *[f"| {v}, releasing ({released}) | {_f(x['rss_released_mib'])} "
              f"| {_f(x.get('released_heap_allocated_mib'))} | {_f(x.get('released_heap_free_mib'))} "
              f"| {_f(x.get('released_thread_caches_mib'))} |"
              for v, x in s["memory"].items() if x.get("rss_released_mib") is not None],
            "",
        ]
    return lines


def _flat_table(r: dict, s: dict) -> list[str]:
    st = r["header"]["settings"]
    variants = list(s["flat"])
    lines = [
        f"## 2b. Memory over {st['flat_minutes']:g} minutes",
        "",
        f"The light-load Envoys (section 4) at {st['flat_rps']:g} rps each, RSS every 30 s.",
        "",
        "| s | " + " | ".join(f"{v} MiB" for v in variants) + " |",
        "| ---: | " + " | ".join("---:" for _ in variants) + " |",
    ]
    for t, rss in r["flat"]:
        lines.append(f"| {t} | " + " | ".join(_f(rss.get(v), 1) for v in variants) + " |")
    lines += ["", "Last minus first: " + ", ".join(
        f"{v} {s['flat'][v]['last'] - s['flat'][v]['first']:+.1f} MiB" for v in variants) + ".", ""]
    return lines


def _cpu_table(r: dict, s: dict) -> list[str]:
    st = r["header"]["settings"]
    first = next(iter(s["cpu"].values()))
    cov = next((x["vs_no_wasm"]["coverage"] for x in first.values() if x.get("vs_no_wasm")), None)
    lines = [
        "## 3. CPU per request",
        "",
        f"Fortio at {st['qps']:g} qps: HTTP/1.1 with {st['connections']} connections and a "
        f"{st['payload']:,} B payload; gRPC ping (`-grpc -ping -s {st['grpc_streams']} -c {st['grpc_connections']}`) "
        f"through an HTTP/2 cluster to gRPC backends. One Envoy per variant and concurrency (filter local-only), "
        f"warmed up {st['warmup_s']:g} s; then {st['rounds']} rounds, each loading every variant for "
        f"{st['seconds']:g} s, back to back (the order rotating). CPU per request = Envoy's CPU over the run "
        "(its threads' schedstat, ns) / requests; its median over the rounds. Over no filter / over empty: the "
        f"median of the per-round differences [interval; {_coverage({'coverage': cov})} confidence]. Latency: "
        "percentiles of all rounds' merged histograms; p99 / empty: their ratio, and the median [interval] of "
        "the per-round ratios.",
        "",
        "| setup | variant | requests (errors) | CPU us/request | over no filter, us | over empty, us | p50 ms "
        "| p90 ms | p99 ms | p99 / empty | per-round p99 / empty |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, rows in s["cpu"].items():
        proto, _, c = key.partition("_")
        setup = f"{'HTTP/1.1' if proto == 'http' else 'gRPC'}, c{c.removeprefix('c')}"
        for v, x in rows.items():
            lines.append(f"| {setup} | {v} | {x['requests']:,} ({x['errors']}) | {_f(x['cpu_us']['median'])} "
                         f"| {_ci(x.get('vs_no_wasm'))} | {_ci(x.get('vs_empty'))} | {_f(x['p50_ms'], 2)} "
                         f"| {_f(x['p90_ms'], 2)} | {_f(x['p99_ms'], 2)} | {_f(x.get('p99_vs_empty'), 2)} "
                         f"| {_ci(x.get('p99_vs_empty_rounds'), 2, sign=False)} |")
    return lines + [""]


def _light_table(r: dict, s: dict) -> list[str]:
    st = r["header"]["settings"]
    variants = list(s["light"][0]["variants"])
    judged = subjects(variants)
    head = ["step", "rounds"] + [f"{v} ms/s" for v in variants]
    head += [f"{v} over empty, ms/s" for v in judged] + [f"{v} us/request (over empty)" for v in judged]
    rounds = st.get("light_rounds", 1)
    lines = [
        "## 4. Light load",
        "",
        f"Envoy --concurrency 2 with the filter reporting to the aggregator (report interval 1 s; the current "
        f"filter stretches it to 2-4 s at 25 rps or less; the empty filter "
        f"gets the same config and ignores it), every variant at once: idle (fresh), then {rounds} round(s) of "
        f"Fortio at each rate for {st['light_seconds']:g} s, then idle again (endpoints still tracked). CPU per "
        "second from the threads' schedstat (ns), the median over the rounds; per request = CPU per second / "
        "requests per second. Over empty: the median of the per-round differences (the variants run side by "
        "side, so each round pairs them) [interval].",
        "",
        "| " + " | ".join(head) + " |",
        "| --- | " + " | ".join("---:" for _ in head[1:]) + " |",
    ]
    for row in s["light"]:
        cells = [row["step"], str(row["rounds"])] + [_f(row["variants"][v]["cpu_ms_per_s"], 2) for v in variants]
        cells += [_ci(row["variants"][v].get("vs_empty"), 2) for v in judged]
        digits = 1 if row["rate"] >= 100 else 0
        cells += [f"{_f(row['variants'][v].get('per_request_us'), 0)} "
                  f"({_ci(row['variants'][v].get('vs_empty_per_request'), digits)})"
                  if row["rate"] > 0 else "–" for v in judged]
        lines.append("| " + " | ".join(cells) + " |")
    lpr = dict(s.get("light_per_request", {}))
    empty = lpr.pop(EMPTY, None)

    def versus(x: dict) -> str:
        return f"{x['at_10_us']:+.0f} us vs {x['at_1000_us']:+.1f} us ({_f(x['ratio'], 1)} x)"

    if lpr:
        lines += ["", "Added CPU per request over the empty filter at 10 rps vs at 1,000 rps: " + "; ".join(
            f"{v} {versus(x)}" for v, x in lpr.items()) + "."]
    if empty:
        lines += ["", f"The same for the empty filter over no filter (medians of the paired rounds): {versus(empty)}."]
    releasing = [(row["step"], row["variants"][RELEASING]["vs_tailweight"]) for row in s["light"]
                 if "vs_tailweight" in row["variants"].get(RELEASING, {})]
    if releasing:
        lines += ["", f"{RELEASING} (tailweight with the sidecar bootstrap override: Envoy releases free heap) "
                  "over tailweight, ms/s, paired: " + "; ".join(f"{step} {_ci(d, 2)}" for step, d in releasing) + "."]
    return lines + [""]


def _targets_table(s: dict) -> list[str]:
    lines = [
        "## Targets",
        "",
        "Medians against the targets (\"interval straddles\": the confidence interval reaches both sides).",
        "",
        "| variant | target | limit | measured | met | notes |",
        "| --- | --- | ---: | ---: | :---: | --- |",
    ]
    for t in s["targets"]:
        if t["unit"] == "bytes":
            limit, value = f"{t['limit'] / KIB:.0f} KiB", f"{t['value'] / KIB:.1f} KiB" if t["value"] else "–"
        elif t["unit"] == "x":
            limit, value = f"{t['limit']:.2f} x", f"{_f(t['value'], 2)} x"
        else:
            digits = 2 if t["unit"] == "ms/s" else 1
            limit, value = f"{t['limit']:g} {t['unit']}", f"{_f(t['value'], digits)} {t['unit']}"
        if t["low"] is not None:
            value += f" [{_f(t['low'], 1)}, {_f(t['high'], 1)}]"
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        notes = "; ".join(x for x in (t["detail"], "interval straddles" if t["ci_straddles"] else "") if x)
        lines.append(f"| {t['variant']} | {t['what']} | {limit} | {value} | {met} | {notes} |")
    return lines
