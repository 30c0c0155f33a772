"""results.json, results.md (the seed's before/after style: one row per policy) and PNG plots."""
import json
import math
from pathlib import Path

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


def markdown(scenario: Scenario, results: list[dict], meta: dict) -> str:
    by = {r["policy"]: r for r in results if "error" not in r}
    base = by.get("least_request")
    lines = [f"# {scenario.name}: {len(scenario.backends)} backends, {scenario.clients.count} client Envoys, "
             f"{scenario.clients.qps:g} rps offered ({scenario.clients.qps / scenario.capacity_rps:.0%} of capacity "
             f"{scenario.capacity_rps:.0f} rps)", ""]
    first = results[0] if results else {}
    lines.append(f"warm-up {first.get('warmup_s', '?')} s, recorded {first.get('duration_s', '?')} s per policy; "
                 f"{meta.get('note', '')}".rstrip("; "))
    lines += ["", "| policy | p50 ms | p90 ms | p99 ms | p99.9 ms | p99 / least_request | errors | requests | "
                  "CPU cores (all) | Envoy us/req | aggregator us/req |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['policy']} | failed: {r['error'].splitlines()[0][:120]} |||||||||")
            continue
        ratio = r["p99_ms"] / base["p99_ms"] if base and base["p99_ms"] else None
        cpu = r.get("cpu_us_per_request", {})
        lines.append(f"| {r['policy']} | {_fmt(r['p50_ms'])} | {_fmt(r['p90_ms'])} | {_fmt(r['p99_ms'])} | "
                     f"{_fmt(r['p99.9_ms'])} | {_fmt(ratio, 2)} | {r['errors']} | {r['requests']} | "
                     f"{_fmt(r.get('cpu_cores'), 2)} | {_fmt(cpu.get('envoys'), 0)} | "
                     f"{_fmt(cpu.get('aggregator'), 0)} |")
    # Per-endpoint requests/s (the seed's "per-pod rps 100 each -> 25..224").
    ok = [r for r in results if "error" not in r]
    if ok:
        lines += ["", "Per-endpoint requests/s over the recorded part:", "",
                  "| backend | speed | capacity rps | " + " | ".join(r["policy"] for r in ok) + " |",
                  "| --- | ---: | ---: | " + " | ".join("---:" for _ in ok) + " |"]
        for i, b in enumerate(scenario.backends):
            cells = []
            for r in ok:
                share = list(r["share"].values())
                cells.append(_fmt(share[i] * r["requests"] / r["duration_s"], 0) if i < len(share) else "-")
            lines.append(f"| {i} | {b.speed:g} | {b.capacity_rps:.0f} | " + " | ".join(cells) + " |")
    settle = [(r["policy"], s) for r in ok for s in r.get("settle", [])]
    if settle:
        lines += ["", "Reaction to events: seconds until the backend's share (1 s window, sampled every 0.5 s) "
                      "stays within 20% of the step (|share - final| <= 0.2 x max(|before - final|, final); "
                      "before = mean of the 5 s before the event, final = mean of the last 10 s), and, literally, "
                      "within 20% of the final share (noise-bound when the final share is small):", "",
                  "| policy | backend | event at s | share before | final share | settle s (20% of step) | "
                  "settle s (20% of final) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

        def pct(x):
            return _fmt(100 * x, 1) + "%" if x is not None else "-"

        def secs(x):
            return _fmt(x) if x is not None else "not settled"

        for policy, s in settle:
            lines.append(f"| {policy} | {s['backend']} | {_fmt(s['at_s'])} | {pct(s.get('before_share'))} | "
                         f"{pct(s['final_share'])} | {secs(s['settle_s'])} | {secs(s.get('settle_share_s'))} |")
    seg_rows = [(r["policy"], seg, r.get("aggregator_killed_at_s")) for r in ok for seg in r.get("segments", [])]
    if seg_rows:
        lines += ["", "Per segment of the recorded part (separate Fortio runs):", "",
                  "| policy | from s | to s | aggregator | p50 ms | p90 ms | p99 ms | p99.9 ms | errors | requests |",
                  "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for policy, seg, killed in seg_rows:
            state = "-" if killed is None and policy != "tailweight" else (
                "killed" if killed is not None and seg["from_s"] >= killed - 1 else "running")
            lines.append(f"| {policy} | {seg['from_s']:g} | {seg['to_s']:g} | {state} | {_fmt(seg['p50_ms'])} | "
                         f"{_fmt(seg['p90_ms'])} | {_fmt(seg['p99_ms'])} | {_fmt(seg['p99.9_ms'])} | {seg['errors']} | "
                         f"{seg['requests']} |")
    cpu_rows = [(r["policy"], r.get("cpu_s", {})) for r in ok]
    if cpu_rows:
        lines += ["", "CPU seconds per process over the recorded part:", "",
                  "| policy | Envoys | Fortios | emulator | aggregator | Prometheus |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for policy, used in cpu_rows:
            envoys = sum(v for k, v in used.items() if k.startswith("envoy-"))
            fortios = sum(v for k, v in used.items() if k.startswith("fortio-"))
            lines.append(f"| {policy} | {envoys:.2f} | {fortios:.2f} | {used.get('emulator', 0):.2f} | "
                         f"{_fmt(used.get('aggregator'), 2)} | {_fmt(used.get('prometheus'), 2)} |")
    return "\n".join(lines) + "\n"


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
    ax.set_xticklabels([r["policy"] for r in ok], rotation=15)
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
    speeds = sorted({b.speed for b in scenario.backends})
    cmap = plt.get_cmap("viridis")
    colour = {s: cmap(i / max(1, len(speeds) - 1)) for i, s in enumerate(speeds)}
    cols = 2 if len(ok) > 1 else 1
    rows = math.ceil(len(ok) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, r in zip(axes.flat, ok, strict=False):  # the grid may have a spare cell
        # 1 s rates from the 0.5 s samples.
        samples = r["samples"][::2] if len(r["samples"]) > 2 else r["samples"]
        times, rates = analysis.rates(samples)
        for i, b in enumerate(scenario.backends):
            ax.plot(times, [row[i] for row in rates], color=colour[b.speed], lw=0.9,
                    label=f"speed {b.speed:g}" if all(bb.speed != b.speed for bb in scenario.backends[:i]) else None)
        for ev in r.get("events", []):
            ax.axvline(ev["fired_s"], color="red", ls="--", lw=0.8)
        ax.set_title(r["policy"])
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
                first_of_speed = all(bb.speed != b.speed for bb in scenario.backends[:i])
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour[b.speed], lw=0.9,
                        label=f"speed {b.speed:g}" if first_of_speed else None)
        for ev in r.get("events", []):
            ax.axvline(ev["fired_s"], color="red", ls="--", lw=0.8)
        ax.set_title(f"{scenario.name} / {r['policy']}: aggregator weight per endpoint (mean 1)")
        ax.set_xlabel("s")
        ax.set_ylabel("weight")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"aggregator_weights_{r['policy']}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
