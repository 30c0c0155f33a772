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

# swap_under_load STEP DIGEST COMMAND...: COMMAND (its output appended to $WORK/STEP.log) in a load
# window ($WORK/STEP.window), then until the client's Envoy runs the module of DIGEST (60 s at most).
# Sets step_exit (COMMAND's), the window's slow_share, requests and failed, and the client's
# picks_before/after and modules_before/after.
swap_under_load() {
  local step=$1 digest=$2 window_pid
  shift 2
  picks_before=$(picks_now)
  modules_before=$(module_digests emu-client)
  emu_window > "$WORK/$step.window" &
  window_pid=$!
  "$@" >> "$WORK/$step.log" 2>&1
  step_exit=$?
  wait "$window_pid"
  read -r slow_share requests failed _ < "$WORK/$step.window"
  wait_until 60 runs_module emu-client "$digest"
  modules_after=$(module_digests emu-client)
  picks_after=$(picks_now)
}
# swapped DIGEST: the step exited 0, the picks kept growing and the client runs DIGEST's module only.
swapped() { [ "$step_exit" = 0 ] && [ "$picks_after" -gt "$picks_before" ] && [ "$modules_after" = "${1#sha256:}" ]; }
swap_figures() {
  echo "$failed failed of $requests requests in ${WINDOW_S} s, slow pod share $slow_share%, picks $picks_before -> $picks_after, client Envoy's module ${modules_before:0:12} -> ${modules_after:0:12}"
}
swap_failure() {
  echo "exit $step_exit, picks $picks_before -> $picks_after, client Envoy's modules '$modules_before' -> '$modules_after', $(first_error "$WORK/$1.log")"
}

# -- upgrade ------------------------------------------------------------------------------------------------
if NEXT_DIGEST=$(module_next 2> "$WORK/upgrade.log") && [ "$NEXT_DIGEST" != "$MODULE_DIGEST" ]; then
  swap_under_load upgrade "$NEXT_DIGEST" "$HELM" --kubeconfig "$WORK/kubeconfig" upgrade tailweight "$CHART_TGZ" \
    --namespace "$TW_NS" --values "$WORK/tw-values.yaml" --set "module.oci.digest=$NEXT_DIGEST"
  if swapped "$NEXT_DIGEST"; then
    result upgrade "PASS helm upgrade to module @${NEXT_DIGEST:0:19}... under load: $(swap_figures)"
  else result upgrade "FAIL helm upgrade $(swap_failure upgrade)"; fi
else result upgrade "FAIL new module: $(first_error "$WORK/upgrade.log") digest '${NEXT_DIGEST:-}'"; fi

# -- rollback -----------------------------------------------------------------------------------------------
swap_under_load rollback "$MODULE_DIGEST" "$HELM" --kubeconfig "$WORK/kubeconfig" rollback tailweight 1 --namespace "$TW_NS"
if swapped "$MODULE_DIGEST"; then
  result rollback "PASS helm rollback to revision 1 under load: $(swap_figures)"
else result rollback "FAIL helm rollback $(swap_failure rollback)"; fi

# -- opt-out, opt-in and uninstall (leave.sh) ---------------------------------------------------------------
# shellcheck source=leave.sh
source "$HERE/leave.sh"
