#!/usr/bin/env bash
# One bounded run of the probe: two python backends, one Envoy (nice 19, at most ~10 s), a handful
# of requests on 127.0.0.1, then everything stopped by PID. Output in $OUT (default /tmp/h37-probe).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ENVOY=${ENVOY:-$HOME/.cache/tailweight/venv/lib/python3.11/site-packages/envoy/_bin/envoy}
OUT=${OUT:-/tmp/h37-probe}
SO_DIR=$HERE/../target/release
rm -rf "$OUT"; mkdir -p "$OUT/a" "$OUT/b"
echo A > "$OUT/a/who"; echo B > "$OUT/b/who"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
nice -n 19 timeout 30 python3 -m http.server 28082 --bind 127.0.0.1 --directory "$OUT/a" >"$OUT/a.log" 2>&1 & pids+=($!)
nice -n 19 timeout 30 python3 -m http.server 28083 --bind 127.0.0.1 --directory "$OUT/b" >"$OUT/b.log" 2>&1 & pids+=($!)
ENVOY_DYNAMIC_MODULES_SEARCH_PATH=$SO_DIR nice -n 19 timeout 30 "$ENVOY" -c "$HERE/envoy.yaml" \
  --concurrency 2 --base-id 3737 -l info --component-log-level dynamic_modules:debug \
  >"$OUT/envoy.log" 2>&1 & pids+=($!)
for port in 28081 28082 28083; do  # Envoy's admin, then both backends
  path=/ready; [ "$port" = 28081 ] || path=/who
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port$path" && break; sleep 0.2; done
done
req() { echo "== $*"; curl -s -D - -o "$OUT/body" "$@" http://127.0.0.1:28080/who | grep -iE '^(HTTP|x-probe)' | tr -d '\r'; echo "body: $(cat "$OUT/body")"; }
echo "--- no override (round robin)"; req; req
echo "--- override to :28083 (x4)"; for _ in 1 2 3 4; do req -H 'x-probe-target: 127.0.0.1:28083'; done
echo "--- override to :28082 (x2)"; for _ in 1 2; do req -H 'x-probe-target: 127.0.0.1:28082'; done
echo "--- override to a host not in the cluster, not strict / strict"
req -H 'x-probe-target: 127.0.0.1:28099'
req -H 'x-probe-target: 127.0.0.1:28099' -H 'x-probe-strict: 1'
echo "--- override to a non-address"; req -H 'x-probe-target: not-an-ip'
echo "--- attribute dump"; req -H 'x-probe-dump: 1' -H 'x-probe-target: 127.0.0.1:28083'
echo "--- LB policy (cluster lbtwo): round robin x3, x-probe-pick 1 x2, pick 0 with the filter's override to :28083"
req -H 'x-probe-lb: 1'; req -H 'x-probe-lb: 1'; req -H 'x-probe-lb: 1'
req -H 'x-probe-lb: 1' -H 'x-probe-pick: 1'; req -H 'x-probe-lb: 1' -H 'x-probe-pick: 1'
req -H 'x-probe-lb: 1' -H 'x-probe-pick: 0' -H 'x-probe-target: 127.0.0.1:28083'
sleep 1.5  # the bootstrap timer's five ticks
echo "--- stats"; curl -s http://127.0.0.1:28081/stats | grep -iE 'probe_|dynamicmodule' 
curl -s 'http://127.0.0.1:28081/stats/prometheus' | grep -iE 'probe_' | grep -v '^#'
curl -s -X POST http://127.0.0.1:28081/quitquitquit >/dev/null
sleep 0.5
echo "--- envoy log (dynamic modules)"; grep -iE 'dynamic|probe|abi|matched|deprecat|error|critical' "$OUT/envoy.log" | cut -c1-400
