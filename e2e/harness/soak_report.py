"""The soak's results: results.json (the document), results.md (every target, the measured value,
met or not; the events; RSS, filter stats and segments) and two plots: rss.png (RSS over time, one
line per process) and tracking.png (endpoints tracked per Envoy and in the book against the live
set)."""
import json
from pathlib import Path

from .soak_targets import FILTER_DEFAULT_TTL_MS, FILTER_SLACK_S, recently_left

FILTER_COLUMNS = ("picks", "picks_honoured", "picks_not_honoured", "picks_refused", "fallbacks", "failures",
                  "suspensions", "recoveries", "endpoints_tracked", "endpoints_forgotten", "reports_sent",
                  "reports_ok", "reports_failed", "views_applied")


def write(out_dir: Path, doc: dict) -> list[Path]:
    """results.json, the plots, then results.md linking them; returns the plot paths."""
    out_dir = Path(out_dir)
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1, default=str))
    pngs = plots(out_dir, doc)
    (out_dir / "results.md").write_text(markdown(doc, [p.name for p in pngs]))
    return pngs


def _verdict(met) -> str:
    return {True: "met", False: "**NOT MET**", None: "not judged"}[met]


def _rollout_spans(doc: dict) -> list[tuple[float, float]]:
    """(first join, last leave) of each rolling update, from the events as fired."""
    plan = doc["plan"]
    spans = []
    for start in plan["rollouts_at_s"]:
        end = start + (plan["backends"] - 1) * plan["rollout_step_s"] + plan["ready_s"] + plan["stop_after_s"]
        fired = [e["fired_s"] for e in doc["events"] if e["action"] in ("join", "leave", "stop")
                 and start <= e["at_s"] <= end]
        if fired:
            spans.append((min(fired), max(fired)))
    return spans


def markdown(doc: dict, pngs: list[str]) -> str:
    plan = doc["plan"]
    ttl_s = (plan["endpoint_ttl_ms"] or FILTER_DEFAULT_TTL_MS) / 1000
    concurrency = ", ".join(str(plan["concurrency"][i % len(plan["concurrency"])]) for i in range(plan["clients"]))
    kills = doc["aggregator_kills"]
    fail = next((e for e in doc["events"] if e["action"] == "fail"), None)
    transport = "gRPC (h2c, Fortio pings)" if plan["protocol"] == "grpc" else "HTTP/1.1"
    lines = [
        f"# {plan['name']}: tailweight in a mesh that moves, {plan['duration_s'] / 60:g} min", "",
        f"{plan['clients']} client Envoys (worker threads: {concurrency}) configured like Istio sidecars (Istio's "
        f"default retry policy, endpoints from one EDS file), the filter reporting every 1 s to the real "
        f"aggregator through the report tap; {plan['qps']:g} rps in all at a constant rate ({transport}, "
        f"{plan['connections']} connections per client, Fortio runs of {plan['segment_s']:g} s back to back); "
        f"{plan['backends']} backends serving at once ({plan['workers']} workers, {plan['base_ms']:g} ms); "
        f"filter endpoint_ttl {ttl_s:g} s"
        + (" (its default)" if plan["endpoint_ttl_ms"] is None else "") + f"; warm-up {plan['warmup_s']:g} s, "
        f"then {plan['duration_s']:g} s recorded, sampled every {plan['sample_s']:g} s "
        f"({len(doc['samples'])} samples); wall time {doc['elapsed_s'] / 60:.1f} min.", "",
        f"- {len(plan['rollouts_at_s'])} rolling updates (at "
        + ", ".join(f"{t:g}" for t in plan["rollouts_at_s"]) + " s): each replaces every backend one by one "
        f"every {plan['rollout_step_s']:g} s (maxSurge 1): a new pod (new address) joins cold "
        f"({plan['cold_factor']:g}x slower, warming over {plan['cold_s']:g} s), the old one leaves "
        f"{plan['ready_s']:g} s later and stops "
        f"listening {plan['stop_after_s']:g} s after that; {len(doc['backends'])} addresses in all.",
        (f"- backend {fail['backends'][0]} answers with errors from {fail['fired_s']:.0f} s for "
         f"{plan['fail_for_s']:g} s." if fail else "- no backend failed."),
        "- aggregator SIGKILLed at " + ", ".join(
            f"{k['at_s']:.0f} s (restarted {k['restarted_s']:.0f} s)" if k["restarted_s"] is not None
            else f"{k['at_s']:.0f} s (not restarted)" for k in kills if k["at_s"] is not None)
        + "; each restart starts an empty book on a new port, the report tap forwards there.",
        "", "## Targets", "", "| target | bound | measured | verdict |", "| --- | --- | --- | --- |"]
    for t in doc["targets"]:
        lines.append(f"| {t['name']} | {t['bound']} | {t['measured']} | {_verdict(t['met'])} |")
    allowed = doc["allowed_failures"]
    stops_cut = [s for s in doc["stops"] if s["in_flight"]]
    lines += ["", "Failed requests are counted by Fortio (every call that did not end in SERVING, or every "
              "response but 200), per segment below. What may fail: the requests in flight or queued at a "
              "backend when it stopped listening (the emulator's `emulator_inflight` + `emulator_queue_length` "
              f"of that backend just before the stop: {allowed['in_flight_at_stops']} in all over "
              f"{len(doc['stops'])} stops" + (f", at {', '.join(str(round(s['at_s'])) for s in stops_cut)} s"
                                               if stops_cut else "") + "); "
              + ("the failing backend's UNAVAILABLE answers are retried by Istio's policy (`unavailable`), so none "
                 "may reach the caller; " if plan["protocol"] == "grpc" else
                 f"the failing backend's 503 answers ({allowed['failing_backend_answers']}; Istio's default "
                 "retries no HTTP status); ")
              + "the aggregator is not in the request path, so its kills may fail none."]
    lines += _rss_lines(doc)
    lines += _filter_lines(doc)
    lines += _segment_lines(doc)
    if pngs:
        lines += ["", "Plots: " + ", ".join(f"[{p}]({p})" for p in pngs)]
    return "\n".join(lines) + "\n"


def _rss_lines(doc: dict) -> list[str]:
    series: dict[str, list[tuple[float, float]]] = {}
    for s in doc["samples"]:
        for name, mb in s["rss_mb"].items():
            series.setdefault(name, []).append((s["t"], mb))
    out = ["", "## RSS (MB)", "", "| process | sampled min | first | at 5 min | last | peak |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, points in series.items():
        at5 = next((f"{mb:.1f}" for t, mb in points if t >= 300), "-")
        out.append(f"| {name} | {points[0][0] / 60:.1f}-{points[-1][0] / 60:.1f} | {points[0][1]:.1f} | {at5} | "
                   f"{points[-1][1]:.1f} | {max(mb for _, mb in points):.1f} |")
    return out


def _filter_lines(doc: dict) -> list[str]:
    last = doc["samples"][-1]["envoys"] if doc["samples"] else []
    out = ["", "## Filter stats at the end (`wasmcustom.tailweight.*`) and Envoy retries", "",
           "| Envoy | " + " | ".join(FILTER_COLUMNS) + " | retries |",
           "| --- | " + " | ".join("---:" for _ in FILTER_COLUMNS) + " | ---: |"]
    for k, e in enumerate(last):
        st = e["stats"]
        out.append(f"| envoy-{k} | " + " | ".join(str(st.get(c, "-")) for c in FILTER_COLUMNS)
                   + f" | {st.get('cluster.backends.upstream_rq_retry', '-')} |")
    return out


def _segment_lines(doc: dict) -> list[str]:
    if not doc["segments"]:
        return []
    out = ["", "## Fortio segments", "", "| segment | from s | to s | requests | errors | p99 ms |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for seg in doc["segments"]:
        out.append(f"| {seg['name']} | {seg['from_s']:g} | {seg['to_s']:g} | {seg['requests']} | {seg['errors']} | "
                   f"{seg['p99_ms']:.1f} |")
    return out


def _mark_events(ax, doc: dict) -> None:
    for k, (a, b) in enumerate(_rollout_spans(doc)):
        ax.axvspan(a / 60, b / 60, color="0.85", label="rolling update" if k == 0 else None)
    fail = next((e for e in doc["events"] if e["action"] == "fail"), None)
    if fail:
        ax.axvspan(fail["fired_s"] / 60, (fail["fired_s"] + doc["plan"]["fail_for_s"]) / 60, color="orange",
                   alpha=0.25, label="backend failing")
    for k, kill in enumerate(x for x in doc["aggregator_kills"] if x["at_s"] is not None):
        ax.axvline(kill["at_s"] / 60, color="red", linestyle="--", label="aggregator killed" if k == 0 else None)
        if kill["restarted_s"] is not None:
            ax.axvline(kill["restarted_s"] / 60, color="green", linestyle=":",
                       label="aggregator restarted" if k == 0 else None)


def plots(out_dir: Path, doc: dict) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = doc["samples"]
    if not samples:
        return []
    minutes = [s["t"] / 60 for s in samples]
    names = list(dict.fromkeys(n for s in samples for n in s["rss_mb"]))
    envoys = [n for n in names if n.startswith("envoy-")]
    others = [n for n in names if n not in envoys]
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for ax, group, title in ((axes[0], envoys, "client Envoys"), (axes[1], others, "aggregator and emulator")):
        _mark_events(ax, doc)
        for name in group:
            points = [(s["t"] / 60, s["rss_mb"][name]) for s in samples if name in s["rss_mb"]]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", markersize=3, label=name)
        flat = doc["plan"].get("flat_from_s", 300) / 60
        if flat <= minutes[-1]:
            ax.axvline(flat, color="0.4", linewidth=0.8)
        values = [s["rss_mb"][n] for s in samples for n in group if n in s["rss_mb"]]
        if values:
            # At least +-12% of the median in view: a 5% growth shows, noise is not magnified.
            lo, hi, mid = min(values), max(values), sorted(values)[len(values) // 2]
            half = max((hi - lo) * 0.6, 0.12 * mid)
            ax.set_ylim(max(0.0, (lo + hi) / 2 - half), (lo + hi) / 2 + half)
        ax.set_ylabel("RSS MB")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    axes[1].set_xlabel("minutes into the recorded part (grey line: where memory is judged from)")
    fig.suptitle(f"{doc['plan']['name']}: RSS per process")
    fig.tight_layout()
    rss = Path(out_dir) / "rss.png"
    fig.savefig(rss, dpi=100)
    plt.close(fig)

    plan = doc["plan"]
    horizon = (plan["endpoint_ttl_ms"] or FILTER_DEFAULT_TTL_MS) / 1000 + FILTER_SLACK_S
    left_at = doc["left_at_s"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    _mark_events(ax, doc)
    ax.step(minutes, [len(s["live"]) for s in samples], where="post", color="black", label="live endpoints")
    ax.step(minutes, [len(s["live"]) + len(recently_left(left_at, s["t"], horizon)) for s in samples],
            where="post", color="black", linestyle="--", linewidth=0.8, label=f"live + left within {horizon:g} s")
    for k in range(plan["clients"]):
        ax.plot(minutes, [s["envoys"][k]["stats"].get("endpoints_tracked") for s in samples], marker=".",
                markersize=3, linewidth=0.8, label=f"envoy-{k} endpoints_tracked")
    ax.plot(minutes, [len(s["book"]["endpoints"]) if s.get("book") else None for s in samples], marker="x",
            markersize=4, linewidth=0.8, color="purple", label="aggregator book")
    ax.set_xlabel("minutes into the recorded part")
    ax.set_ylabel("endpoints")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.set_title(f"{plan['name']}: endpoints tracked against the live set")
    fig.tight_layout()
    tracking = Path(out_dir) / "tracking.png"
    fig.savefig(tracking, dpi=100)
    plt.close(fig)
    return [rss, tracking]
