"""The soak's targets, judged from its samples (pure: the results document in, verdicts out).

Each target states its bound, what was measured and whether it is met (None: not judged, the
measured text says why). Slack beyond the filter's `endpoint_ttl_ms` (a left endpoint is forgotten
that long after its last answer): FILTER_SLACK_S covers the answers still in flight when it left,
the filter's tick (0.2 s; up to 1 s for a quiet VM) and its report interval (1 s); the aggregator's
book adds the report period, an observation's ttl (3 of the periods the report declared) and its
recompute period (1 s). A sidecar below 26 rps reports every 2 or 4 intervals
(sidecar/src/tick.rs: report_period_ms), so the book's slack takes the longest period."""
from dataclasses import dataclass, field
from statistics import fmean

FILTER_DEFAULT_TTL_MS = 60_000  # sidecar/src/config.rs: endpoint_ttl_ms
FILTER_SLACK_S = 3.0
REPORT_PERIOD_MAX_S = 4.0  # the report interval (1 s) doubled at most twice, at a few rps
BOOK_SLACK_S = FILTER_SLACK_S + REPORT_PERIOD_MAX_S + 3 * REPORT_PERIOD_MAX_S + 1.0
FLAT_FROM_S = 300.0  # memory judged from minute 5 (or 5 minutes after a process started)
MAX_GROWTH = 0.05
MIN_FLAT_WINDOW_S = 300.0  # a shorter window is not judged
AVERAGE_S = 60.0  # RSS at the window's start and end: mean of this long's samples
CPU_BUDGET_CORES = 0.5  # the soak's own processes, on average ("well under one core")


@dataclass
class Target:
    name: str
    bound: str
    measured: str
    met: bool | None
    detail: dict = field(default_factory=dict)


def allowed_failures(stops: list[dict], failing_backend_answers: int) -> dict:
    """Failed requests the soak tolerates: those in flight or queued at a backend when it stopped
    listening (a cut request is not retried by Istio's policy), and the error answers of the
    failing backend when they reach the caller (HTTP 503: Istio's default retries no status code;
    over gRPC UNAVAILABLE is retried, so the caller passes 0). The aggregator is not in the request
    path: its kills allow none."""
    in_flight = sum(s["in_flight"] for s in stops)
    return {"total": in_flight + failing_backend_answers, "in_flight_at_stops": in_flight,
            "failing_backend_answers": failing_backend_answers}


def recently_left(left_at: dict[str, float], t: float, horizon_s: float) -> set[str]:
    """Endpoints that left the set at most `horizon_s` before `t`."""
    return {a for a, at in left_at.items() if at <= t and t - at <= horizon_s}


def memory_targets(doc: dict) -> list[Target]:
    """Per process: RSS growth from FLAT_FROM_S (or that long after the process started) to its end,
    each end the mean of AVERAGE_S of samples; judged when the window is at least MIN_FLAT_WINDOW_S."""
    flat_from = doc["plan"].get("flat_from_s", FLAT_FROM_S)
    started = doc.get("process_started_s", {})
    series: dict[str, list[tuple[float, float]]] = {}
    for s in doc["samples"]:
        for name, mb in s["rss_mb"].items():
            series.setdefault(name, []).append((s["t"], mb))
    out = []
    for name, points in series.items():
        begin = max(flat_from, started.get(name, 0.0) + flat_from)
        end = points[-1][0]
        window = [(t, mb) for t, mb in points if t >= begin]
        bound = f"RSS growth <= {MAX_GROWTH:.0%} from {begin / 60:.1f} min to the end"
        first_mb = points[0][1]
        if not window or end - begin < MIN_FLAT_WINDOW_S:
            out.append(Target(f"memory flat: {name}", bound,
                              f"not judged: sampled {points[0][0] / 60:.1f}-{end / 60:.1f} min "
                              f"({len(points)} samples, {first_mb:.1f} -> {points[-1][1]:.1f} MB); "
                              f"needs {MIN_FLAT_WINDOW_S / 60:.0f} min after {begin / 60:.1f} min",
                              None, {"samples": len(points), "first_mb": first_mb, "last_mb": points[-1][1]}))
            continue
        base = fmean(mb for t, mb in window if t <= begin + AVERAGE_S)
        last = fmean(mb for t, mb in window if t >= end - AVERAGE_S)
        peak = max(mb for _, mb in window)
        growth = last / base - 1
        out.append(Target(f"memory flat: {name}", bound,
                          f"{base:.1f} MB -> {last:.1f} MB ({growth:+.1%}), peak {peak:.1f} MB "
                          f"(first sample {first_mb:.1f} MB)",
                          growth <= MAX_GROWTH,
                          {"from_s": begin, "to_s": end, "start_mb": round(base, 2), "end_mb": round(last, 2),
                           "growth": round(growth, 4), "peak_mb": peak, "first_mb": first_mb}))
    return out


def tracking_targets(doc: dict) -> list[Target]:
    """Each Envoy's last report (report tap) lists no endpoint that was never in the set, nor one
    that left more than ttl + FILTER_SLACK_S before the report; its endpoints_tracked gauge is at
    most the live endpoints plus those that left within that horizon."""
    ttl = (doc["plan"].get("endpoint_ttl_ms") or FILTER_DEFAULT_TTL_MS) / 1000.0
    horizon = ttl + FILTER_SLACK_S
    left_at = doc["left_at_s"]
    worst_age = 0.0
    report_violations, gauge_violations = [], []
    most_left_listed = max_gauge = max_over_live = 0
    checked = 0
    for s in doc["samples"]:
        t, live = s["t"], set(s["live"])
        allowed = len(live) + len(recently_left(left_at, t, horizon))
        for k, e in enumerate(s["envoys"]):
            if "tracked" in e:
                checked += 1
                at = t - e.get("report_age_s", 0.0)
                gone = [a for a in e["tracked"] if a not in live]
                most_left_listed = max(most_left_listed, len(gone))
                for a in gone:
                    age = at - left_at[a] if a in left_at else None
                    if age is None or age > horizon:
                        report_violations.append({"t": t, "envoy": k, "address": a,
                                                  "since_left_s": None if age is None else round(age, 1)})
                    else:
                        worst_age = max(worst_age, age)
            gauge = e["stats"].get("endpoints_tracked")
            if gauge is not None:
                max_gauge = max(max_gauge, gauge)
                max_over_live = max(max_over_live, gauge - len(live))
                if gauge > allowed:
                    gauge_violations.append({"t": t, "envoy": k, "gauge": gauge, "allowed": allowed})
    reports = Target(
        "tracked endpoints (each Envoy's last report)",
        f"only live endpoints and those that left <= endpoint_ttl {ttl:g} s + {FILTER_SLACK_S:g} s before",
        f"{checked} reports checked; at most {most_left_listed} left endpoints listed at once, the oldest "
        f"{worst_age:.1f} s after leaving; {len(report_violations)} beyond the bound",
        checked > 0 and not report_violations,
        {"checked": checked, "worst_since_left_s": round(worst_age, 1), "violations": report_violations[:20]})
    gauge = Target(
        "endpoints_tracked gauge",
        f"<= live + left within {horizon:g} s",
        f"max {max_gauge}, at most {max_over_live} above the live count; {len(gauge_violations)} samples beyond",
        max_gauge > 0 and not gauge_violations,
        {"max": max_gauge, "max_over_live": max_over_live, "violations": gauge_violations[:20]})
    return [reports, gauge]


def book_target(doc: dict) -> Target:
    """The aggregator's book (/v1/weights) keeps no endpoint that left more than ttl + BOOK_SLACK_S
    ago, and its endpoint count is at most the live ones plus those that left within that horizon."""
    ttl = (doc["plan"].get("endpoint_ttl_ms") or FILTER_DEFAULT_TTL_MS) / 1000.0
    horizon = ttl + BOOK_SLACK_S
    left_at = doc["left_at_s"]
    violations = []
    worst_age = 0.0
    checked = max_endpoints = 0
    for s in doc["samples"]:
        book = s.get("book")
        if not book:
            continue
        checked += 1
        t, live = s["t"], set(s["live"])
        for a in book["endpoints"]:
            if a in live:
                continue
            age = t - left_at[a] if a in left_at else None
            if age is None or age > horizon:
                violations.append({"t": t, "address": a, "since_left_s": None if age is None else round(age, 1)})
            else:
                worst_age = max(worst_age, age)
        count = book.get("counts", {}).get("endpoints", len(book["endpoints"]))
        max_endpoints = max(max_endpoints, count)
        allowed = len(live) + len(recently_left(left_at, t, horizon))
        if count > allowed:
            violations.append({"t": t, "book_endpoints": count, "allowed": allowed})
    return Target(
        "aggregator book",
        f"only live endpoints and those that left <= {horizon:g} s before (ttl {ttl:g} s + {BOOK_SLACK_S:g} s)",
        f"{checked} samples; at most {max_endpoints} endpoints; a left endpoint at most {worst_age:.1f} s after "
        f"leaving; {len(violations)} beyond the bound",
        checked > 0 and not violations,
        {"checked": checked, "max_endpoints": max_endpoints, "worst_since_left_s": round(worst_age, 1),
         "violations": violations[:20]})


def failures_target(doc: dict) -> Target:
    allowed = doc["allowed_failures"]
    return Target(
        "failed requests",
        f"<= those in flight at a backend's stop ({allowed['in_flight_at_stops']}) + the failing backend's "
        f"answers that reach the caller ({allowed['failing_backend_answers']})",
        f"{doc['errors']} of {doc['requests']} ({doc['codes']})",
        doc["requests"] > 0 and doc["errors"] <= allowed["total"],
        {"errors": doc["errors"], "requests": doc["requests"], "allowed": allowed["total"]})


def restart_target(doc: dict) -> Target:
    """After each aggregator restart every Envoy reports again (reports_ok grows past its value at
    the last sample before the restart) and the new book hears from every client; while it was down
    every Envoy's reports failed (it noticed, and decided locally)."""
    samples = doc["samples"]
    clients = doc["plan"]["clients"]
    lines, ok = [], True
    kills = [k for k in doc["aggregator_kills"] if k["at_s"] is not None]
    if not kills:
        return Target("reports again after each aggregator restart", "every Envoy", "no kill happened", False)
    for n, k in enumerate(kills):
        if k["restarted_s"] is None:
            ok = False
            lines.append(f"kill at {k['at_s']:.0f} s: never restarted")
            continue
        until = kills[n + 1]["at_s"] if n + 1 < len(kills) else float("inf")
        before = [s for s in samples if s["t"] <= k["at_s"]]
        down = [s for s in samples if s["t"] < k["restarted_s"]]
        after = [s for s in samples if k["restarted_s"] < s["t"] < until]
        if not before or not after:
            ok = False
            lines.append(f"kill at {k['at_s']:.0f} s: no sample before or after")
            continue
        failed = [after[0]["envoys"][i]["stats"].get("reports_failed", 0)
                  - before[-1]["envoys"][i]["stats"].get("reports_failed", 0) for i in range(clients)]
        again = [after[-1]["envoys"][i]["stats"].get("reports_ok", 0)
                 - down[-1]["envoys"][i]["stats"].get("reports_ok", 0) for i in range(clients)]
        reporters = (after[-1].get("book") or {}).get("counts", {}).get("reporters")
        fine = all(f > 0 for f in failed) and all(a > 0 for a in again) and reporters == clients
        ok &= fine
        lines.append(f"kill at {k['at_s']:.0f} s, restart at {k['restarted_s']:.0f} s: reports failed {failed}, "
                     f"then reports ok {again} by {after[-1]['t']:.0f} s, book reporters {reporters}")
    return Target("reports again after each aggregator restart",
                  "each Envoy's reports fail while it is down and succeed again after; the new book hears "
                  "every client", "; ".join(lines), ok)


def cpu_target(doc: dict) -> Target:
    soak = [s["soak_cores"] for s in doc["samples"] if "soak_cores" in s]
    machine = [s["machine_cores"] for s in doc["samples"] if "machine_cores" in s]
    loadavg = [s["loadavg_1m"] for s in doc["samples"]]
    if not soak:
        return Target("CPU of the soak", f"mean <= {CPU_BUDGET_CORES:g} cores", "no samples", None)
    return Target(
        "CPU of the soak",
        f"its processes (Envoys, Fortios, emulator, aggregator, harness) use <= {CPU_BUDGET_CORES:g} cores on average",
        f"mean {fmean(soak):.2f}, max {max(soak):.2f} cores; the whole machine (2 cores, shared) "
        f"mean {fmean(machine):.2f}, max {max(machine):.2f} busy cores, 1-min load average "
        f"mean {fmean(loadavg):.2f}, max {max(loadavg):.2f}",
        fmean(soak) <= CPU_BUDGET_CORES,
        {"soak_cores_mean": round(fmean(soak), 3), "soak_cores_max": max(soak),
         "machine_cores_mean": round(fmean(machine), 3), "machine_cores_max": max(machine),
         "loadavg_mean": round(fmean(loadavg), 2), "loadavg_max": max(loadavg)})


def judge(doc: dict) -> list[Target]:
    return [*memory_targets(doc), *tracking_targets(doc), book_target(doc), failures_target(doc),
            restart_target(doc), cpu_target(doc)]
