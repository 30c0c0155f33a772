# Upgrade and uninstall under load on the real node (issue 40, item 2), sourced by chart.sh once
# steered ran; Fortio keeps sending through all of it:
#   upgrade    a new module (the same Wasm with one custom section appended: a new digest) packed
#              with scripts/pack-wasm-oci.sh, pushed to the registry, and `helm upgrade` to that
#              digest; the failed requests of the window around it, and the client's picks still grow
#   uninstall  `helm uninstall`, the aggregator pod deleted as its ReplicaSet would be; the failed
#              requests of the window around it; then a new emulator pod and a new Fortio pod of the
#              opted-in namespace start and reach Ready
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
picks_now() { tw_stats emu-client | awk -F': ' '$1 ~ /picks$/ {n += $2} END {print n + 0}'; }

# -- upgrade ------------------------------------------------------------------------------------------------
if NEXT_DIGEST=$(module_next 2> "$WORK/upgrade.log") && [ "$NEXT_DIGEST" != "$MODULE_DIGEST" ]; then
  picks_before=$(picks_now)
  emu_window > "$WORK/upgrade.window" &
  window_pid=$!
  "$HELM" --kubeconfig "$WORK/kubeconfig" upgrade tailweight "$CHART_TGZ" --namespace "$TW_NS" \
    --values "$WORK/tw-values.yaml" --set "module.oci.digest=$NEXT_DIGEST" >> "$WORK/upgrade.log" 2>&1
  upgraded=$?
  wait "$window_pid"
  read -r slow_share requests failed shares < "$WORK/upgrade.window"
  picks_after=$(picks_now)
  if [ "$upgraded" = 0 ] && [ "$picks_after" -gt "$picks_before" ]; then
    result upgrade "PASS helm upgrade to module @${NEXT_DIGEST:0:19}... under load: $failed failed of $requests requests in ${WINDOW_S} s, slow pod share $slow_share%, picks $picks_before -> $picks_after"
  else result upgrade "FAIL helm upgrade exit $upgraded, picks $picks_before -> $picks_after, $(first_error "$WORK/upgrade.log")"; fi
else result upgrade "FAIL new module: $(first_error "$WORK/upgrade.log") digest '${NEXT_DIGEST:-}'"; fi

# -- uninstall ----------------------------------------------------------------------------------------------
emu_window > "$WORK/uninstall.window" &
window_pid=$!
"$HELM" --kubeconfig "$WORK/kubeconfig" uninstall tailweight --namespace "$TW_NS" > "$WORK/uninstall.log" 2>&1
uninstalled=$?
api -X DELETE "$SERVER/api/v1/namespaces/$TW_NS/pods/tailweight-aggregator-node-0" >/dev/null
wait "$window_pid"
read -r slow_share requests failed shares < "$WORK/uninstall.window"
# Pods of the opted-in namespace start again once the chart is gone.
if [ "$uninstalled" = 0 ] &&
   mesh_create_pod emu-3 "$EMU_IMAGE" "[\"--admin-port\", \"9000\", \"--backend\", \"port=$EMU_PORT,workers=4,base_ms=$EMU_BASE_MS\"]" emu 2>> "$WORK/uninstall.log" &&
   mesh_create_pod emu-client-2 "$(ctr_ images ls -q | grep '^tailweight.local/fortio:' | head -1)" \
     "[\"load\", \"-qps\", \"5\", \"-t\", \"0\", \"http://$EMU_SERVICE_IP:$EMU_PORT/\"]" 2>> "$WORK/uninstall.log" &&
   wait_until 120 mesh_pod_ready emu-3 && wait_until 120 mesh_pod_ready emu-client-2; then
  result uninstall "PASS helm uninstall under load: $failed failed of $requests requests in ${WINDOW_S} s (slow pod share $slow_share%); new pods emu-3, emu-client-2 Ready afterwards"
else result uninstall "FAIL helm uninstall exit $uninstalled, $(first_error "$WORK/uninstall.log"), emu-3 Ready: $(mesh_pod_ready emu-3 && echo yes || echo no)"; fi
