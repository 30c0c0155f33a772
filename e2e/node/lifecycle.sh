# Upgrade and rollback under load on the real node (issue 40, item 2), sourced by chart.sh once
# steered ran; Fortio keeps sending through all of it:
#   upgrade    a new module (the same Wasm with one custom section appended: a new digest) packed
#              with scripts/pack-wasm-oci.sh, pushed to the registry, and `helm upgrade` to that
#              digest with a new pod annotation (the aggregator's Deployment rolls: new pods, one
#              at a time); the failed requests of the window around it (until the roll and the
#              module swap are done), the client's picks still grow, the client's Envoy runs the
#              module of the new digest and no other, and the aggregator's pods are all new
#   rollback   `helm rollback` to the first revision likewise: its failed requests, the picks
#              still growing, the client's Envoy back on the first digest, the aggregator rolled
#              back (new pods again)
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

# aggregator_rolled: the Deployment rolled out and none of its Ready pods is one of AGG_PODS_BEFORE
# (tw_aggregator_ready sets AGG_PODS to the new ones).
aggregator_rolled() {
  tw_aggregator_ready &&
    [ -z "$(comm -12 <(printf '%s\n' "${AGG_PODS[@]}" | sort) <(printf '%s\n' "${AGG_PODS_BEFORE[@]}" | sort))" ]
}
# swap_under_load STEP DIGEST COMMAND...: COMMAND (its output appended to $WORK/STEP.log) in a load
# window ($WORK/STEP.window) that lasts until the aggregator rolled (180 s at most) and the client's
# Envoy runs the module of DIGEST (60 s at most). Sets step_exit (COMMAND's), rolled, the window's
# slow_share, requests and failed, the client's picks_before/after and modules_before/after, and
# AGG_PODS_BEFORE/AGG_PODS.
swap_under_load() {
  local step=$1 digest=$2
  shift 2
  picks_before=$(picks_now)
  modules_before=$(module_digests emu-client)
  AGG_PODS_BEFORE=("${AGG_PODS[@]}")
  window_open
  "$@" >> "$WORK/$step.log" 2>&1
  step_exit=$?
  rolled=no; wait_until 180 aggregator_rolled && rolled=yes
  wait_until 60 runs_module emu-client "$digest"
  window_close > "$WORK/$step.window"
  read -r slow_share requests failed _ < "$WORK/$step.window"
  modules_after=$(module_digests emu-client)
  picks_after=$(picks_now)
}
# swapped DIGEST: the step exited 0, the aggregator rolled, the picks kept growing and the client runs
# DIGEST's module only.
swapped() {
  [ "$step_exit" = 0 ] && [ "$rolled" = yes ] && [ "$picks_after" -gt "$picks_before" ] && [ "$modules_after" = "${1#sha256:}" ]
}
swap_figures() {
  echo "$failed failed of $requests requests in $WINDOW_LENGTH_S s, slow pod share $slow_share%, picks $picks_before -> $picks_after, client Envoy's module ${modules_before:0:12} -> ${modules_after:0:12}, aggregator rolled through its Deployment: pods ${AGG_PODS_BEFORE[*]} -> ${AGG_PODS[*]}"
}
swap_failure() {
  echo "exit $step_exit, aggregator rolled: $rolled (pods ${AGG_PODS_BEFORE[*]} -> $(ready_pods "$TW_NS" "$AGG_SELECTOR" | awk '{print $1}' | paste -sd' ')), picks $picks_before -> $picks_after, client Envoy's modules '$modules_before' -> '$modules_after', $(first_error "$WORK/$1.log")"
}

# -- upgrade ------------------------------------------------------------------------------------------------
if NEXT_DIGEST=$(module_next 2> "$WORK/upgrade.log") && [ "$NEXT_DIGEST" != "$MODULE_DIGEST" ]; then
  swap_under_load upgrade "$NEXT_DIGEST" "$HELM" --kubeconfig "$WORK/kubeconfig" upgrade tailweight "$CHART_TGZ" \
    --namespace "$TW_NS" --values "$WORK/tw-values.yaml" --set "module.oci.digest=$NEXT_DIGEST" \
    --set aggregator.podAnnotations.tailweight-e2e-upgrade=next
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
