"""The simulator next to the real benchmark on the same scenario: per-policy p50/p99, the p99
ranking, the factor between them, and the per-group request shares.

usage: python sim/validate.py SIM_RESULTS.json BENCH_RESULTS.json [--readme sim/README.md]

With --readme, the text between `<!-- validation:begin -->` and `<!-- validation:end -->` in that
file is replaced by the comparison. Pairs of policies whose real p99 differ by less than TIE are
counted as ties (a 60 s benchmark on a shared machine does not order them reliably).
"""
import json
import sys
from itertools import combinations

TIE = 0.10
BEGIN, END = "<!-- validation:begin -->", "<!-- validation:end -->"


def load(path):
    with open(path) as f:
        return json.load(f)


def group_shares(share_by_backend, group_sizes):
    out, i = [], 0
    for n in group_sizes:
        out.append(sum(share_by_backend[i:i + n]))
        i += n
    return out


def compare(sim, bench):
    real = {p["policy"]: p for p in bench["policies"]}
    simp = {p["policy"]: p for p in sim["policies"]}
    common = [p["policy"] for p in sim["policies"] if p["policy"] in real]
    if not common:
        raise SystemExit("no policy in common between the two result files")
    sizes = [g["endpoints"] for g in sim["policies"][0]["groups"]]
    rows, factors = [], []
    for name in common:
        r, s = real[name], simp[name]
        rp99, sp99 = r["p99_ms"], s["latency_ms"]["p99"]
        rp50, sp50 = r["p50_ms"], s["latency_ms"]["p50"]
        factors += [max(rp99 / sp99, sp99 / rp99), max(rp50 / sp50, sp50 / rp50)]
        real_groups = group_shares(list(r["share"].values()), sizes)
        sim_groups = [g["share"] for g in s["groups"]]
        rows.append((name, rp50, sp50, rp99, sp99, real_groups, sim_groups))
    by_real = sorted(common, key=lambda n: real[n]["p99_ms"])
    by_sim = sorted(common, key=lambda n: simp[n]["latency_ms"]["p99"])
    discordant, ties = [], 0
    for a, b in combinations(common, 2):
        ra, rb = real[a]["p99_ms"], real[b]["p99_ms"]
        if abs(ra - rb) < TIE * min(ra, rb):
            ties += 1
            continue
        sa, sb = simp[a]["latency_ms"]["p99"], simp[b]["latency_ms"]["p99"]
        if (ra < rb) != (sa < sb):
            discordant.append((a, b))
    lines = [
        f"Scenario `{bench['scenario']}`: {bench['clients']} client proxies, {bench['offered_qps']:g} rps "
        f"offered; simulator run: {sim['clients']} clients, {sim['qps']:g} rps, "
        f"{'connection-limited like Fortio' if sim['connection_limit'] else 'open loop'}, seed {sim['seed']}.",
        "",
        "| policy | real p50 ms | sim p50 ms | real p99 ms | sim p99 ms | sim / real p99 | real group shares % "
        "| sim group shares % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for name, rp50, sp50, rp99, sp99, rg, sg in rows:
        lines.append(f"| {name} | {rp50:.1f} | {sp50:.1f} | {rp99:.1f} | {sp99:.1f} | {sp99 / rp99:.2f} | "
                     f"{' / '.join(f'{100 * x:.1f}' for x in rg)} | {' / '.join(f'{100 * x:.1f}' for x in sg)} |")
    lines += [
        "",
        f"- p99 ranking, real: {' < '.join(by_real)}",
        f"- p99 ranking, sim:  {' < '.join(by_sim)}",
        f"- pairs ordered differently (real p99 apart by >= {TIE:.0%}): "
        + (", ".join(f"{a} vs {b}" for a, b in discordant) if discordant else "none")
        + f"; {ties} pairs are ties in the real run",
        f"- largest factor between real and simulated p50 or p99: {max(factors):.2f}",
    ]
    return "\n".join(lines) + "\n", not discordant, max(factors)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    readme = argv[argv.index("--readme") + 1] if "--readme" in argv else None
    if readme:
        args.remove(readme)
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    text, ranking_ok, factor = compare(load(args[0]), load(args[1]))
    print(text)
    if readme:
        with open(readme) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{readme}: markers {BEGIN} / {END} not found")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(readme, "w") as f:
            f.write(head + BEGIN + "\n" + text + END + tail)
        print(f"updated {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
