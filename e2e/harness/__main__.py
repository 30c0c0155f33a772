"""make bench SCENARIO=<file>: every policy of the scenario, one after another, then results.json,
results.md and PNG plots in bench/results/<scenario name>/ (or --out)."""
import argparse
import sys
import time
from pathlib import Path

from tailweight_e2e import paths

from . import operator, report, runner
from .scenario import ScenarioError, load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="harness", description=__doc__)
    ap.add_argument("--scenario", default=str(paths.REPO / "e2e/scenarios/seed-fib.yaml"))
    ap.add_argument("--out", help="output directory (default bench/results/<scenario name>)")
    ap.add_argument("--logs", help="logs, configs, Fortio JSON and per-Envoy /stats "
                                   "(default bench/runs/<scenario name>, or <out>/logs with --out)")
    ap.add_argument("--policies", help="comma list overriding the scenario's policies")
    ap.add_argument("--warmup", type=float, help="override warmup_s")
    ap.add_argument("--duration", type=float, help="override duration_s")
    ap.add_argument("--operator-period", type=float, default=operator.PERIOD_S, help="operator controller period, s")
    ap.add_argument("--kill-aggregator-at", type=float,
                    help="kill the aggregator at this second of tailweight's recorded part")
    ap.add_argument("--rerender", action="store_true",
                    help="no runs: recompute shares/settle times and rewrite results.md and plots "
                         "from <out>/results.json")
    ap.add_argument("--segment", type=float, help="split the recorded part into Fortio runs of this many seconds "
                                                 "(percentiles per segment, e.g. before/after --kill-aggregator-at; "
                                                 "overrides the scenario's segments)")
    ap.add_argument("--retries", choices=("on", "off", "both"),
                    help="Istio's default retry policy in the client Envoys: on, off, or each policy run both "
                         "ways (overrides the scenario's clients.retries; default on)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    ap.add_argument("--filter-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a tailweight filter setting for every tailweight policy (repeatable; VALUE is JSON, "
                         "else a string), e.g. health_check_path=/healthz")
    args = ap.parse_args(argv)
    try:
        filter_settings = parse_filter_settings(args.filter_setting)
    except ValueError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    try:
        scenario = load(args.scenario, args.policies.split(",") if args.policies else None)
    except ScenarioError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else paths.REPO / "bench" / "results" / scenario.name
    out_dir.mkdir(parents=True, exist_ok=True)
    # Results are small and worth keeping; logs are bulky and stay out of bench/results.
    if args.logs:
        log_dir = Path(args.logs)
    else:
        log_dir = out_dir / "logs" if args.out else paths.REPO / "bench" / "runs" / scenario.name
    policies = scenario.policies
    needs_wasm = any(p.startswith("tailweight") for p in policies)
    if needs_wasm and not paths.WASM.exists():
        print(f"harness: {paths.WASM} is missing (make wasm)", file=sys.stderr)
        return 2
    if args.rerender:
        import json
        doc = json.loads((out_dir / "results.json").read_text())
        results = [r if "error" in r else runner.derive(r) for r in doc["policies"]]
        return finish(out_dir, log_dir, scenario, results, doc.get("meta", {}))
    retry_modes = RETRY_MODES[args.retries] if args.retries else scenario.clients.retries
    runs = [(policy, retries, run_name(policy, retries))
            for policy in policies for retries in retry_modes]
    results = []
    started = time.monotonic()
    for i, (policy, retries, name) in enumerate(runs):
        opts = runner.Options(out_dir=out_dir, log_dir=log_dir, warmup_s=args.warmup, duration_s=args.duration,
                              operator_period_s=args.operator_period, kill_aggregator_at_s=args.kill_aggregator_at,
                              segment_s=args.segment, retries=retries, run_name=name, plugin_extra=filter_settings,
                              progress=not args.quiet, label=f"{i + 1}/{len(runs)}")
        try:
            results.append(runner.run_policy(scenario, policy, opts))
        except Exception as e:  # one broken policy must not lose the others' results
            print(f"harness: {name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            results.append({"policy": policy, "run": name, "retries": retries, "error": f"{type(e).__name__}: {e}"})
    meta = {"elapsed_s": round(time.monotonic() - started, 1), "filter_settings": filter_settings,
            "note": "operator starts from its converged weights "
                    f"(capacity-proportional, {operator.RULE.median_weight:g}/median)"
                    if "operator" in policies else ""}
    return finish(out_dir, log_dir, scenario, results, meta)


RETRY_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


def parse_filter_settings(items: list[str]) -> dict:
    """`KEY=VALUE` items as a dict: VALUE parsed as JSON when it is JSON, else kept as a string."""
    import json
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--filter-setting: expected KEY=VALUE, got {item!r}")
        try:
            settings[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            settings[key.strip()] = value
    return settings


def run_name(policy: str, retries: bool) -> str:
    """The policy, marked when it runs without Istio's retries."""
    return policy if retries else f"{policy}-no-retries"


def finish(out_dir: Path, log_dir: Path, scenario, results: list, meta: dict) -> int:
    report.write_json(out_dir / "results.json", scenario, results, meta)
    pngs = report.plots(out_dir, scenario, results)
    md = report.markdown(scenario, results, meta) + report.plot_links(pngs)
    (out_dir / "results.md").write_text(md)
    print(md)
    print(f"results: {out_dir / 'results.json'}, {out_dir / 'results.md'}")
    print("plots: " + ", ".join(str(p) for p in pngs))
    print(f"per-Envoy /stats (taken at the end of each run): {log_dir}/<run>/envoy-<i>.stats.txt; "
          f"logs and configs beside them")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
