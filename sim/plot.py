"""Plot a simulator sweep: p99 latency vs offered load, one line per policy (log scale).

usage: python sim/plot.py SWEEP.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        sweep = json.load(f)
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy in sweep["order"]:
        points = sweep["policies"].get(policy, [])
        if not points:
            continue
        loads = [100 * p["load_factor"] for p in points]
        p99 = [max(p["p99_ms"], 1e-3) for p in points]
        style = {"ideal": dict(color="black", linestyle="--", linewidth=2),
                 "tailweight": dict(linewidth=2.5)}.get(policy, {})
        ax.plot(loads, p99, marker="o", label=policy, **style)
    ax.set_yscale("log")
    ax.set_xlabel("offered load, % of total capacity")
    ax.set_ylabel("p99 latency, ms (log)")
    ax.set_title(f"{sweep['scenario']}: {sweep['clients']} clients x {sweep['endpoints']} endpoints, "
                 f"{sweep['duration_s']:g} s per point")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
