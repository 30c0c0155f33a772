"""Record one `make fuzz-<target>` run in bench/results/fuzz.md: one row per target (a new run of
a target replaces its row), from libFuzzer's final statistics in the run's log.

    python tools/fuzz_record.py TARGET LOG SECONDS STATUS [--results FILE] [--root DIR]

STATUS is libFuzzer's exit status: 0 when the run did all its executions without a finding;
otherwise the row names the input it left (a finding: fix it, keep the input in
fuzz/findings/TARGET, run again).
"""

import argparse
import datetime
import pathlib
import re
import subprocess

HEADER = """## Fuzzing (`make fuzz`): one row per target, its last run

Each run: libFuzzer (cargo-fuzz, `--sanitizer none`), niced, one job, from the kept corpus, with
the target's dictionary; the corpus is then minimised by edge coverage into fuzz/corpus/TARGET,
which `make test` replays with fuzz/findings/TARGET (inputs that once failed, fixed since). `at`:
the commit the run was made on (uncommitted changes aside). Time is wall-clock on a shared 2-core
machine (other jobs ran beside it): a rough figure, not a benchmark. What each kept finding
found: its file name in fuzz/findings/TARGET, and the commit that fixed it. `cargo test -p
tailweight-fuzz` (fuzz/tests/records.rs) fails while a target has no row or its parser's source
files changed in a commit that `at` does not include: run `make fuzz-TARGET` again.
"""
COLUMNS = "target | executions | wall s | exec/s | finding | corpus | corpus bytes | findings kept | RSS MiB | UTC | at"
ALIGN = "--- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---"


def stat(log: str, name: str) -> str:
    found = re.findall(rf"stat::{name}:\s+(\d+)", log)
    return found[-1] if found else "?"


def files(directory: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in directory.iterdir() if p.is_file()] if directory.is_dir() else []


def row(target: str, log: str, seconds: int, status: int, root: pathlib.Path) -> str:
    executions = stat(log, "number_of_executed_units")
    rate = str(int(executions) // max(seconds, 1)) if executions.isdigit() else "?"
    if status == 0:
        finding = "none"
    else:
        written = re.findall(r"Test unit written to (\S+)", log)
        finding = f"exit {status}: `{written[-1]}`" if written else f"exit {status}"
    corpus = files(root / "fuzz" / "corpus" / target)
    kept = files(root / "fuzz" / "findings" / target)
    size = sum(p.stat().st_size for p in corpus)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    cells = [target, executions, str(seconds), rate, finding, str(len(corpus)), str(size), str(len(kept))]
    cells += [stat(log, "peak_rss_mb"), when, commit or "?"]
    return "| " + " | ".join(cells) + " |"


def update(results: pathlib.Path, target: str, line: str) -> None:
    text = results.read_text() if results.exists() else ""
    if f"| {COLUMNS} |" not in text:
        text = f"{HEADER}\n| {COLUMNS} |\n| {ALIGN} |"
    rows = [r for r in text.splitlines() if not r.startswith(f"| {target} |")]
    results.write_text("\n".join(rows) + "\n" + line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("log", type=pathlib.Path)
    parser.add_argument("seconds", type=int)
    parser.add_argument("status", type=int)
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path("."))
    parser.add_argument("--results", type=pathlib.Path, default=pathlib.Path("bench/results/fuzz.md"))
    args = parser.parse_args()
    log = args.log.read_text(errors="replace")
    line = row(args.target, log, args.seconds, args.status, args.root)
    update(args.results, args.target, line)
    print(line)


if __name__ == "__main__":
    main()
