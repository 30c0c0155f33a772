"""results.json, results.md (the seed's before/after style: one row per policy) and PNG plots."""
import json
import math
from pathlib import Path

from tailweight_e2e.envoy_configs import REPORTING_POLICIES

from . import analysis
from .scenario import Scenario


def _fmt(x, digits=1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def write_json(path: Path, scenario: Scenario, results: list[dict], meta: dict) -> None:
    doc = {"scenario": scenario.name, "scenario_file": str(scenario.path) if scenario.path else None,
           "capacity_rps": round(scenario.capacity_rps, 1), "offered_qps": scenario.clients.qps,
           "clients": scenario.clients.count, "meta": meta, "policies": results}
    path.write_text(json.dumps(doc, indent=1, default=str))


def run_of(r: dict) -> str:
    """The row label of a result entry (older results have no run name: the policy)."""
    return r.get("run", r["policy"])


def _pct(x) -> str:
    return _fmt(100 * x, 1) + "%" if x is not None else "-"


def markdown(scenario: Scenario, results: list[dict], meta: dict) -> str:
    # p99 ratios compare with least_request run the same way (with or without retries).
    base = {r.get("retries", True): r for r in results if "error" not in r and r["policy"] == "least_request"}
    clients = scenario.clients
    absent = sum(b.absent for b in scenario.backends)
    lines = [f"# {scenario.name}: {len(scenario.backends) - absent} backends"
             + (f" (+{absent} joining later)" if absent else "")
             + f", {clients.count} client Envoys, {clients.qps:g} rps offered "
             f"({clients.qps / scenario.capacity_rps:.0%} of capacity {scenario.capacity_rps:.0f} rps)", ""]
    first = results[0] if results else {}
    transport = (f"gRPC (h2c), {clients.connections} connections x {clients.streams} streams per client"
                 if scenario.protocol == "grpc" else f"HTTP/1.1, {clients.connections} connections per client")
    lines.append(f"warm-up {first.get('warmup_s', '?')} s, recorded {first.get('duration_s', '?')} s per policy; "
                 f"{transport}; client Envoys with Istio's default retry policy unless marked -no-retries; "
                 f"{meta.get('note', '')}".rstrip("; ")
                 + (f"; tailweight filter settings {meta['filter_settings']}" if meta.get("filter_settings") else ""))
    lines += ["", "| run | p50 ms | p90 ms | p99 ms | p99.9 ms | p99 / least_request | errors | requests | "
                  "Envoy retries | CPU cores (all) | Envoy us/req | aggregator us/req |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {run_of(r)} | failed: {r['error'].splitlines()[0][:120]} ||||||||||")
            continue
        b = base.get(r.get("retries", True))
        ratio = r["p99_ms"] / b["p99_ms"] if b and b["p99_ms"] else None
        cpu = r.get("cpu_us_per_request", {})
        retried = sum(s.get("upstream_rq_retry", 0) for s in r.get("envoy_stats", []))
        lines.append(f"| {run_of(r)} | {_fmt(r['p50_ms'])} | {_fmt(r['p90_ms'])} | {_fmt(r['p99_ms'])} | "
                     f"{_fmt(r['p99.9_ms'])} | {_fmt(ratio, 2)} | {r['errors']} | {r['requests']} | {retried} | "
                     f"{_fmt(r.get('cpu_cores'), 2)} | {_fmt(cpu.get('envoys'), 0)} | "
                     f"{_fmt(cpu.get('aggregator'), 0)} |")
    # Per-endpoint requests/s (the seed's "per-pod rps 100 each -> 25..224").
    ok = [r for r in results if "error" not in r]
    if ok:
        lines += ["", "Per-endpoint requests/s over the recorded part (absent: joins during the run):", "",
                  "| backend | speed | capacity rps | " + " | ".join(run_of(r) for r in ok) + " |",
                  "| --- | ---: | ---: | " + " | ".join("---:" for _ in ok) + " |"]
        for i, b in enumerate(scenario.backends):
            cells = []
            for r in ok:
                share = list(r["share"].values())
                cells.append(_fmt(share[i] * r["requests"] / r["duration_s"], 0) if i < len(share) else "-")
            lines.append(f"| {i}{' (absent)' if b.absent else ''} | {b.speed:g} | {b.capacity_rps:.0f} | "
                         + " | ".join(cells) + " |")
    lines += _membership_lines(ok)
    settle = [(run_of(r), s) for r in ok for s in r.get("settle", [])]
    if settle:
        lines += ["", "Reaction to events: seconds until the backend's share (1 s window, sampled every 0.5 s) "
                      "stays within 20% of the step (|share - final| <= 0.2 x max(|before - final|, final); "
                      "before = mean of the 5 s before the event, final = mean of the last 10 s), and, literally, "
                      "within 20% of the final share (noise-bound when the final share is small); the last "
                      "column is the first with 0.5 s windows (a 1 s window cannot report less than 1 s; 0 there: "
                      "settled in the first 0.5 s):", "",
                  "| run | backend | event at s | share before | final share | settle s (20% of step) | "
                  "settle s (20% of final) | settle s (0.5 s windows, 20% of step) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

        def secs(x):
            return _fmt(x) if x is not None else "not settled"

        for run, s in settle:
            lines.append(f"| {run} | {s['backend']} | {_fmt(s['at_s'])} | {_pct(s.get('before_share'))} | "
                         f"{_pct(s['final_share'])} | {secs(s['settle_s'])} | {secs(s.get('settle_share_s'))} | "
                         f"{secs(s.get('settle_half_window_s')) if 'settle_half_window_s' in s else '-'} |")
    reaction = [(run_of(r), x) for r in ok for x in r.get("reaction", [])]
    if reaction:
        lines += ["", "The event's backend's share of all requests (from the emulator's counters, sampled every "
                      "0.5 s): in the 5 s before the event, in its first second, and from then until the "
                      "backend's next event or the end:", "",
                  "| run | backend | action | at s | share before | share first 1 s | share after | after until s |",
                  "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for run, x in reaction:
            lines.append(f"| {run} | {x['backend']} | {x['action']} | {_fmt(x['at_s'])} | {_pct(x['share_before'])} | "
                         f"{_pct(x['share_first_s'])} | {_pct(x['share_after'])} | {_fmt(x['after_until_s'])} |")
    lines += _segment_lines(ok)
    lines += _filter_lines(ok)
    cpu_rows = [(run_of(r), r.get("cpu_s", {})) for r in ok]
    if cpu_rows:
        lines += ["", "CPU seconds per process over the recorded part:", "",
                  "| run | Envoys | Fortios | emulator | aggregator | Prometheus |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for policy, used in cpu_rows:
            envoys = sum(v for k, v in used.items() if k.startswith("envoy-"))
            fortios = sum(v for k, v in used.items() if k.startswith("fortio-"))
            lines.append(f"| {policy} | {envoys:.2f} | {fortios:.2f} | {used.get('emulator', 0):.2f} | "
                         f"{_fmt(used.get('aggregator'), 2)} | {_fmt(used.get('prometheus'), 2)} |")
    return "\n".join(lines) + "\n"


def _membership_lines(ok: list[dict]) -> list[str]:
    """The joins and leaves as the first run fired them (every run fires the same events)."""
    events = [e for e in (ok[0].get("events", []) if ok else []) if e["action"] in ("join", "leave")
              or e.get("cause")]
    if not events:
        return []
    cells = [f"{e['fired_s']:.1f} s {e['action']} {','.join(map(str, e['backends']))}"
             + (f" ({e['cause']})" if e.get("cause") else "") for e in events]
    return ["", f"Endpoint set changes ({run_of(ok[0])}): " + "; ".join(cells) + "."]


def _segment_lines(ok: list[dict]) -> list[str]:
    """Each segment's percentiles, then p99 per segment side by side with its ratio to the first."""
    seg_rows = [(r, seg) for r in ok for seg in r.get("segments", [])]
    if not seg_rows:
        return []
    lines = ["", "Per segment of the recorded part (separate Fortio runs):", "",
             "| run | segment | from s | to s | aggregator | p50 ms | p90 ms | p99 ms | p99.9 ms | errors | requests |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r, seg in seg_rows:
        killed = r.get("aggregator_killed_at_s")
        state = "-" if killed is None and r["policy"] not in REPORTING_POLICIES else (
            "killed" if killed is not None and seg["from_s"] >= killed - 1 else "running")
        lines.append(f"| {run_of(r)} | {seg.get('name', '-')} | {seg['from_s']:g} | {seg['to_s']:g} | {state} | "
                     f"{_fmt(seg['p50_ms'])} | {_fmt(seg['p90_ms'])} | {_fmt(seg['p99_ms'])} | "
                     f"{_fmt(seg['p99.9_ms'])} | {seg['errors']} | {seg['requests']} |")
    names = [seg.get("name", f"{seg['from_s']:g}-{seg['to_s']:g} s") for seg in ok[0].get("segments", [])]
    if len(names) >= 2:
        first = names[0]
        lines += ["", f"p99 ms per segment, and each later segment's p99 over {first}'s:", "",
                  "| run | " + " | ".join(names) + " | " + " | ".join(f"{n} / {first}" for n in names[1:]) + " |",
                  "| --- | " + " | ".join("---:" for _ in names) + " | " + " | ".join("---:" for _ in names[1:]) + " |"]
        for r in ok:
            p99 = [seg["p99_ms"] for seg in r.get("segments", [])]
            if len(p99) != len(names):
                continue
            ratios = [x / p99[0] if p99[0] else None for x in p99[1:]]
            lines.append(f"| {run_of(r)} | " + " | ".join(_fmt(x) for x in p99) + " | "
                         + " | ".join(_fmt(x, 2) for x in ratios) + " |")
    return lines


def _filter_lines(ok: list[dict]) -> list[str]:
    """The tailweight filter's counters per client Envoy at the end, and the endpoints it tracked
    then against the endpoint set (from its last report to the aggregator; tailweight only)."""
    rows = [(r, k, s) for r in ok if r["policy"].startswith("tailweight")
            for k, s in enumerate(r.get("envoy_stats", [])) if s.get("wasmcustom")]
    if not rows:
        return []
    lines = ["", "The tailweight filter per client Envoy at the end (picks not honoured: served by another "
                 "endpoint than the first choice; refused: Envoy did not try it, e.g. no longer in its set; "
                 "tracked: endpoints_tracked, and from the last report the endpoints tracked that are not in "
                 "the endpoint set, with the seconds since they left):", "",
             "| run | Envoy | picks | not honoured | refused | endpoints_tracked | tracked, not in the set | "
             "in the set, not tracked |", "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r, k, s in rows:
        def stat(name, w=s["wasmcustom"]):
            return w.get(f"wasmcustom.tailweight.{name}", 0)

        picks = stat("picks")
        share = f" ({100 * stat('picks_not_honoured') / picks:.1f}%)" if picks else ""
        tracked = s.get("tracked")
        if tracked is None:
            stale, missing = "-", "-"
        else:
            end = r.get("ended_s", r["duration_s"])
            left = r.get("left_at_s", {})
            stale = ", ".join(f"{a} ({end - left[a]:.0f} s)" if a in left else a for a in tracked["not_live"]) or "none"
            missing = str(len(tracked["live_not_tracked"]))
        lines.append(f"| {run_of(r)} | {k} | {picks} | {stat('picks_not_honoured')}{share} | {stat('picks_refused')} | "
                     f"{stat('endpoints_tracked')} | {stale} | {missing} |")
    return lines


def plot_links(pngs: list[Path]) -> str:
    """The plots, shown in results.md (they sit beside it)."""
    if not pngs:
        return ""
    return "\nPlots:\n\n" + "".join(f"![{p.stem}]({p.name})\n" for p in dict.fromkeys(pngs))


def plots(out_dir: Path, scenario: Scenario, results: list[dict]) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    written = []
    if not ok:
        return written
    # Latency percentiles per policy.
    fig, ax = plt.subplots(figsize=(9, 4.5))
    keys = ["p50_ms", "p90_ms", "p99_ms", "p99.9_ms"]
    width = 0.8 / len(keys)
    for k, key in enumerate(keys):
        xs = [i + (k - (len(keys) - 1) / 2) * width for i in range(len(ok))]
        ax.bar(xs, [r[key] for r in ok], width, label=key.replace("_ms", ""))
    ax.set_xticks(range(len(ok)))
    ax.set_xticklabels([run_of(r) for r in ok], rotation=15)
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{scenario.name}: latency percentiles per policy")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out_dir / "latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # Per-endpoint requests/s over time, one panel per policy, colour by backend speed.
    # Colour by kind: speed, and whether the backend joins during the run.
    kinds = sorted({(b.speed, b.absent) for b in scenario.backends})
    cmap = plt.get_cmap("viridis")
    colour = {k: cmap(i / max(1, len(kinds) - 1)) for i, k in enumerate(kinds)}

    def kind_label(i: int) -> str | None:
        b = scenario.backends[i]
        first = all((bb.speed, bb.absent) != (b.speed, b.absent) for bb in scenario.backends[:i])
        return f"speed {b.speed:g}{' (joins)' if b.absent else ''}" if first else None

    cols = 2 if len(ok) > 1 else 1
    rows = math.ceil(len(ok) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, r in zip(axes.flat, ok, strict=False):  # the grid may have a spare cell
        # 1 s rates from the 0.5 s samples.
        samples = r["samples"][::2] if len(r["samples"]) > 2 else r["samples"]
        times, rates = analysis.rates(samples)
        for i, b in enumerate(scenario.backends):
            ax.plot(times, [row[i] for row in rates], color=colour[(b.speed, b.absent)], lw=0.9, label=kind_label(i))
        for ev in r.get("events", []):
            ax.axvline(ev["fired_s"], color="red", ls="--", lw=0.8)
        ax.set_title(run_of(r))
        ax.set_xlabel("s")
        ax.set_ylabel("requests/s per backend")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(ok):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{scenario.name}: per-endpoint requests/s")
    fig.tight_layout()
    path = out_dir / "endpoint_rps.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)

    # The aggregator's weights over time (what the filter was told), where it ran.
    for r in ok:
        view = r.get("aggregator_view") or []
        if not view:
            continue
        fig, ax = plt.subplots(figsize=(9, 4))
        for i, (address, b) in enumerate(zip(r["backends"], scenario.backends, strict=True)):
            pts = [(t, v[address][0]) for t, v in view if address in v]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour[(b.speed, b.absent)], lw=0.9,
                        label=kind_label(i))
        for ev in r.get("events", []):
            ax.axvline(ev["fired_s"], color="red", ls="--", lw=0.8)
        ax.set_title(f"{scenario.name} / {run_of(r)}: aggregator weight per endpoint (mean 1)")
        ax.set_xlabel("s")
        ax.set_ylabel("weight")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"aggregator_weights_{run_of(r)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
