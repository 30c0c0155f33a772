#!/usr/bin/env bash
# The sidecar's own instructions per callback (natively, callgrind): builds the driver, runs it under
# callgrind counting only inside the plugin's callbacks (each test-host method toggles counting
# off), and prints the inclusive count of each callback and the top functions. Arguments go to the
# driver (see src/main.rs).
#   bash bench/filter-native/run.sh --requests 20000 --rate 75 --vms 1
set -euo pipefail
cd "$(dirname "$0")"
nice cargo build --release --offline --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
toggles=()
for f in '*Plugin*configure*' '*Plugin*tick*' '*Plugin*on_call_answer*' '*Plugin*on_request_headers*' \
         '*Plugin*on_response_headers*' '*Plugin*on_stream_done*' '*Plugin*new_stream*' \
         '*TestHost*as*Host*' '*TestExchange*as*Exchange*' '*TestAnswer*as*CallAnswer*'; do
  toggles+=("--toggle-collect=$f")
done
valgrind --tool=callgrind --collect-atstart=no "${toggles[@]}" --callgrind-out-file="$out/cg" \
  ./target/release/tailweight-filter-native "$@" 2>&1 | grep -v '^==' || true
echo "== inclusive instructions per plugin callback (totals over the run)"
callgrind_annotate --inclusive=yes "$out/cg" 2>/dev/null | grep -E 'Plugin.*(on_|tick|configure)' | head -12 || true
echo "== top functions by own instructions"
callgrind_annotate --inclusive=no "$out/cg" 2>/dev/null | sed -n '/file:function/,$p' | sed -n 3,25p
