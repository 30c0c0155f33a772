"""Fortio load runs and their JSON results: per-client percentiles, and combined percentiles computed
from the merged latency histograms (never by averaging percentiles)."""
import json
from collections.abc import Sequence
from pathlib import Path

from tailweight_e2e import paths
from tailweight_e2e.procs import Proc, ProcGroup

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
# Histogram resolution 0.1 ms: Fortio's buckets are then 0.1 ms wide up to 2 ms, 0.5 ms to 10 ms,
# 1 ms to 20 ms, 5 ms to 100 ms, 100 ms to 1 s (values interpolate linearly inside a bucket).
RESOLUTION_S = 0.0001

Bucket = tuple[float, float, int]  # start s, end s, count


def load_argv(url: str, qps: float, connections: int, duration_s: float, json_path: Path,
              payload_bytes: int = 0, timeout_s: float = 20.0, grpc_streams: int | None = None) -> list[str]:
    """`fortio load` at `qps` in all over `connections` connections. With `grpc_streams`, gRPC pings
    (`-grpc -ping`) with that many concurrent streams per HTTP/2 connection, and `url` is the
    destination host:port."""
    grpc = ["-grpc", "-ping", "-s", str(grpc_streams)] if grpc_streams else []
    argv = [str(paths.fortio()), "load", *grpc, "-qps", f"{qps:g}", "-c", str(connections), "-t", f"{duration_s:g}s",
            "-uniform",  # spread each connection's start so the clients do not fire in lockstep
            "-timeout", f"{timeout_s:g}s",
            "-allow-initial-errors",  # a failing backend must not abort the client before it starts
            "-r", f"{RESOLUTION_S:g}",
            "-p", ",".join(f"{p:g}" for p in PERCENTILES), "-json", str(json_path), "-quiet"]
    if payload_bytes:
        argv += ["-payload-size", str(payload_bytes)]
    return argv + [url]


def start_load(group: ProcGroup, name: str, url: str, qps: float, connections: int, duration_s: float,
               json_path: Path, payload_bytes: int = 0, grpc_streams: int | None = None) -> Proc:
    return group.start(name, load_argv(url, qps, connections, duration_s, json_path, payload_bytes,
                                       grpc_streams=grpc_streams))


def read(json_path: Path) -> dict:
    return json.loads(Path(json_path).read_text())


def buckets(result: dict) -> list[Bucket]:
    data = (result.get("DurationHistogram") or {}).get("Data") or []
    return [(float(d["Start"]), float(d["End"]), int(d["Count"])) for d in data]


# A successful call: HTTP 200, or a gRPC ping answered (Fortio's gRPC codes are health states:
# SERVING for an answer, ERROR for any failed call).
OK_CODES = ("200", "SERVING")


def counts(result: dict) -> tuple[int, int]:
    """(requests, errors): errors are every return code but 200 (-1 = socket error or timeout) and,
    for gRPC, every call that did not end in SERVING."""
    codes: dict[str, int] = result.get("RetCodes") or {}
    total = int((result.get("DurationHistogram") or {}).get("Count", 0))
    ok = sum(int(codes.get(c, 0)) for c in OK_CODES)
    return total, total - ok


def client_percentiles(result: dict) -> dict[str, float]:
    """Fortio's own percentiles for one client, in ms."""
    out = {}
    for p in (result.get("DurationHistogram") or {}).get("Percentiles") or []:
        out[f"p{p['Percentile']:g}"] = float(p["Value"]) * 1e3
    return out


def _cdf(all_buckets: Sequence[Bucket], x: float) -> float:
    """Requests at or below x, each bucket's requests spread uniformly over [start, end]."""
    total = 0.0
    for start, end, count in all_buckets:
        if x >= end:
            total += count
        elif x > start:
            total += count * (x - start) / (end - start)
    return total


def merged_percentile(all_buckets: Sequence[Bucket], percentile: float) -> float:
    """The value (s) below which `percentile`% of the requests of all histograms lie (bisection
    on the merged piecewise-uniform CDF; buckets of different clients may overlap at the edges)."""
    n = sum(c for _, _, c in all_buckets)
    if n == 0:
        return float("nan")
    target = n * percentile / 100.0
    lo = min(s for s, _, _ in all_buckets)
    hi = max(e for _, e, _ in all_buckets)
    for _ in range(60):
        mid = (lo + hi) / 2
        if _cdf(all_buckets, mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


def summarise(results: Sequence[dict]) -> dict:
    """Combined view of several clients' Fortio results."""
    merged: list[Bucket] = [b for r in results for b in buckets(r)]
    requests = errors = 0
    codes: dict[str, int] = {}
    for r in results:
        total, bad = counts(r)
        requests += total
        errors += bad
        for code, n in (r.get("RetCodes") or {}).items():
            codes[code] = codes.get(code, 0) + int(n)
    latency_sum = sum(float((r.get("DurationHistogram") or {}).get("Sum", 0.0)) for r in results)
    return {
        "requests": requests,
        "errors": errors,
        "codes": codes,
        "actual_qps": sum(float(r.get("ActualQPS", 0.0)) for r in results),
        "mean_ms": latency_sum / requests * 1e3 if requests else float("nan"),
        "max_ms": max((float((r.get("DurationHistogram") or {}).get("Max", 0.0)) for r in results), default=0.0) * 1e3,
        **{f"p{p:g}_ms": merged_percentile(merged, p) * 1e3 for p in PERCENTILES},
    }
