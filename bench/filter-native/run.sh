#!/usr/bin/env bash
# The filter's own instructions per callback (natively, callgrind): builds the harness, runs it under
# callgrind counting only inside the filter's callbacks (each host function toggles counting off,
# proxy_on_memory_allocate, which the host calls back, on again), and prints the inclusive count of
# each exported callback and the top functions. Arguments go to the harness (see src/main.rs).
#   bash bench/filter-native/run.sh --requests 20000 --rate 75 --vms 1
set -euo pipefail
cd "$(dirname "$0")"
nice cargo build --release --offline --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
toggles=()
for f in proxy_on_context_create proxy_on_request_headers proxy_on_response_headers proxy_on_log proxy_on_delete \
         proxy_on_tick proxy_on_http_call_response proxy_on_memory_allocate 'proxy_get_*' 'proxy_set_*' \
         proxy_replace_header_map_value proxy_remove_header_map_value proxy_log proxy_increment_metric \
         proxy_record_metric proxy_define_metric proxy_http_call random_get; do
  toggles+=("--toggle-collect=$f")
done
valgrind --tool=callgrind --collect-atstart=no "${toggles[@]}" --callgrind-out-file="$out/cg" \
  ./target/release/tailweight-filter-native "$@" 2>&1 | grep -v '^==' || true
echo "== inclusive instructions per exported callback (totals over the run)"
callgrind_annotate --inclusive=yes "$out/cg" 2>/dev/null | grep -E 'dispatch.rs:proxy_on_' || true
echo "== top functions by own instructions"
callgrind_annotate --inclusive=no "$out/cg" 2>/dev/null | sed -n '/file:function/,$p' | sed -n 3,25p
