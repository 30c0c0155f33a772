# Upgrade and rollback under load on the real node (issue 40, item 2), sourced by chart.sh once
# steered ran; Fortio keeps sending through all of it:
#   upgrade    a new module (the same Wasm with one custom section appended: a new digest) packed
#              with scripts/pack-wasm-oci.sh, pushed to the registry, and `helm upgrade` to that
#              digest; the failed requests of the window around it, the client's picks still grow,
#              and the client's Envoy runs the module of the new digest and no other
#   rollback   `helm rollback` to the first revision in a window: its failed requests, the picks
#              still growing, and the client's Envoy back on the first digest
# Then leave.sh: opting the namespace out and in again, and the uninstall.
# shellcheck shell=bash

# module_next: the Wasm of MODULE_LAYOUT plus a custom section "tw-upgrade" (id 0, size 11, name
# length 10), packed as tag next into $WORK/module-next and pushed; prints the new digest.
module_next() {
  local manifest layer
  manifest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$MODULE_LAYOUT/index.json")
  layer=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"][7:])' "$MODULE_LAYOUT/blobs/sha256/$manifest")
  mkdir -p "$WORK/module-next" && tar -xzf "$MODULE_LAYOUT/blobs/sha256/$layer" -C "$WORK/module-next" &&
  printf '\x00\x0b\x0atw-upgrade' >> "$WORK/module-next/plugin.wasm" &&
  bash "$HERE/../../scripts/pack-wasm-oci.sh" "$ORAS" "$WORK/module-next/plugin.wasm" "$WORK/module-next/layout" next >&2 &&
  "$ORAS" cp --no-tty --to-plain-http --from-oci-layout "$WORK/module-next/layout:next" "$REG_ADDR/tailweight-filter:next" >&2 &&
  "$ORAS" resolve --plain-http "$REG_ADDR/tailweight-filter:next"
}
# module_digests NAME: the manifest digests (hex, distinct, sorted) of the Wasm modules pod NAME's Envoy
# runs now. The istio-agent hands Envoy each module as a local file named <manifest digest>.wasm (its
# cache key for an OCI image: istio pkg/wasm, getModulePath), which the filter's vm_config in Envoy's
# /config_dump names; a module's file stays in the agent's cache after a swap, the config does not.
module_digests() {
  nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 5 "http://127.0.0.1:15000/config_dump" |
    grep -oE '[0-9a-f]{64}\.wasm"' | cut -c1-64 | sort -u | tr '\n' ' ' | sed 's/ $//'
}
# runs_module NAME DIGEST: pod NAME's Envoy runs the module of DIGEST (sha256:...) and no other.
runs_module() { [ "$(module_digests "$1")" = "${2#sha256:}" ]; }
picks_now() { tw_stats emu-client | awk -F': ' '$1 ~ /picks$/ {n += $2} END {print n + 0}'; }

# -- upgrade ------------------------------------------------------------------------------------------------
if NEXT_DIGEST=$(module_next 2> "$WORK/upgrade.log") && [ "$NEXT_DIGEST" != "$MODULE_DIGEST" ]; then
  picks_before=$(picks_now)
  modules_before=$(module_digests emu-client)
  emu_window > "$WORK/upgrade.window" &
  window_pid=$!
  "$HELM" --kubeconfig "$WORK/kubeconfig" upgrade tailweight "$CHART_TGZ" --namespace "$TW_NS" \
    --values "$WORK/tw-values.yaml" --set "module.oci.digest=$NEXT_DIGEST" >> "$WORK/upgrade.log" 2>&1
  upgraded=$?
  wait "$window_pid"
  read -r slow_share requests failed shares < "$WORK/upgrade.window"
  wait_until 60 runs_module emu-client "$NEXT_DIGEST"
  modules_after=$(module_digests emu-client)
  picks_after=$(picks_now)
  if [ "$upgraded" = 0 ] && [ "$picks_after" -gt "$picks_before" ] && [ "$modules_after" = "${NEXT_DIGEST#sha256:}" ]; then
    result upgrade "PASS helm upgrade to module @${NEXT_DIGEST:0:19}... under load: $failed failed of $requests requests in ${WINDOW_S} s, slow pod share $slow_share%, picks $picks_before -> $picks_after, client Envoy's module ${modules_before:0:12} -> ${modules_after:0:12}"
  else result upgrade "FAIL helm upgrade exit $upgraded, picks $picks_before -> $picks_after, client Envoy's modules '$modules_before' -> '$modules_after', $(first_error "$WORK/upgrade.log")"; fi
else result upgrade "FAIL new module: $(first_error "$WORK/upgrade.log") digest '${NEXT_DIGEST:-}'"; fi

# -- rollback -----------------------------------------------------------------------------------------------
picks_before=$(picks_now)
modules_before=$(module_digests emu-client)
emu_window > "$WORK/rollback.window" &
window_pid=$!
"$HELM" --kubeconfig "$WORK/kubeconfig" rollback tailweight 1 --namespace "$TW_NS" > "$WORK/rollback.log" 2>&1
rolled_back=$?
wait "$window_pid"
read -r slow_share requests failed shares < "$WORK/rollback.window"
wait_until 60 runs_module emu-client "$MODULE_DIGEST"
modules_after=$(module_digests emu-client)
picks_after=$(picks_now)
if [ "$rolled_back" = 0 ] && [ "$picks_after" -gt "$picks_before" ] && [ "$modules_after" = "${MODULE_DIGEST#sha256:}" ]; then
  result rollback "PASS helm rollback to revision 1 under load: $failed failed of $requests requests in ${WINDOW_S} s, slow pod share $slow_share%, picks $picks_before -> $picks_after, client Envoy's module ${modules_before:0:12} -> ${modules_after:0:12}"
else result rollback "FAIL helm rollback exit $rolled_back, picks $picks_before -> $picks_after, client Envoy's modules '$modules_before' -> '$modules_after', $(first_error "$WORK/rollback.log")"; fi

# -- opt-out, opt-in and uninstall (leave.sh) ---------------------------------------------------------------
# shellcheck source=leave.sh
source "$HERE/leave.sh"
