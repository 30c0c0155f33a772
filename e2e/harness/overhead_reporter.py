"""A synthetic sidecar for `make bench-overhead`'s fleet memory test: every interval it POSTs one v1
report per cluster (docs/wire-protocol.md) naming every endpoint, with steadily growing counters,
so the aggregator's views list them all and the filter under test gets them as suggestions.

    python -m harness.overhead_reporter --url http://127.0.0.1:PORT --clusters a,b,c \
        --addresses-file endpoints.txt --seconds 600 [--interval-ms 1000]

Runs for --seconds at most, then exits; prints one line per failed report (the first 20)."""
import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import requests

REPORT_PATH = "/v1/report"
# Per endpoint and interval: requests answered, each in LATENCY_US.
REQUESTS_PER_INTERVAL = 10
LATENCY_US = 1000


def report_body(reporter: str, incarnation: int, interval_ms: int, cluster: str, addresses: Sequence[str],
                tick: int) -> bytes:
    """One cluster's report at the `tick`-th interval: every endpoint with the same counters. Written
    by joining strings: 1,000 endpoints x 64 clusters a second through json.dumps would keep a
    core busy, and this text is the same JSON."""
    requests_total = REQUESTS_PER_INTERVAL * (tick + 1)
    tail = json.dumps({"requests": requests_total, "errors": 0, "latency_sum_us": requests_total * LATENCY_US,
                       "inflight": 0, "latency_ewma_us": LATENCY_US, "latency_age_ms": 100,
                       "seen_age_ms": 100})[1:]  # without its "{": follows the address below
    endpoints = ",".join(f'{{"address":"{a}",{tail}' for a in addresses)
    head = json.dumps({"version": 1, "reporter": reporter, "incarnation": incarnation, "interval_ms": interval_ms})
    return f'{head[:-1]},"clusters":[{{"name":{json.dumps(cluster)},"endpoints":[{endpoints}]}}]}}'.encode()


def run(url: str, clusters: Sequence[str], addresses: Sequence[str], seconds: float, interval_ms: int,
        reporter: str = "synthetic-fleet") -> int:
    """Report until `seconds` have passed; returns the number of refused or failed reports."""
    session = requests.Session()
    incarnation = int(time.time() * 1000)
    started = time.monotonic()
    failures = tick = 0
    while time.monotonic() - started < seconds:
        due = started + (tick + 1) * interval_ms / 1000
        for cluster in clusters:
            body = report_body(reporter, incarnation, interval_ms, cluster, addresses, tick)
            try:
                r = session.post(url + REPORT_PATH, data=body, timeout=5,
                                 headers={"content-type": "application/json", "x-tailweight-shard": cluster})
                ok, why = r.status_code == 200, f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as e:
                ok, why = False, str(e)
            if not ok:
                failures += 1
                if failures <= 20:
                    print(f"overhead_reporter: report for {cluster} failed: {why}", flush=True)
        tick += 1
        time.sleep(max(0.0, due - time.monotonic()))
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the aggregator, http://127.0.0.1:PORT")
    ap.add_argument("--clusters", required=True, help="comma-separated Envoy cluster names")
    ap.add_argument("--addresses-file", type=Path, required=True, help="one ip:port per line")
    ap.add_argument("--seconds", type=float, required=True, help="stop after this long")
    ap.add_argument("--interval-ms", type=int, default=1000)
    a = ap.parse_args(argv)
    clusters = [c for c in a.clusters.split(",") if c]
    addresses = [line.strip() for line in a.addresses_file.read_text().splitlines() if line.strip()]
    if not clusters or not addresses:
        ap.error("--clusters and --addresses-file must name at least one cluster and one endpoint")
    failures = run(a.url, clusters, addresses, a.seconds, a.interval_ms)
    print(f"overhead_reporter: done, {failures} failed reports", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
