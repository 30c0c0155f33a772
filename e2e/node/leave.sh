# Leaving the mesh on the real node (issue 40, item 2), sourced by lifecycle.sh once rollback ran;
# Fortio (emu-client) keeps sending through all of it:
#   bootstrap  a pod annotated sidecar.istio.io/bootstrapOverride: tailweight-sidecar-bootstrap (the
#              chart's optional ConfigMap; Istio's injector mounts it as a required volume) starts,
#              and its Envoy's bootstrap carries the override
#   dashboard  (dashboard.sh) the dashboard's queries answered by Prometheus scraping these pods
#   opt-out    `helm upgrade` with no service left in the namespace (docs/istio.md: a namespace is
#              opted in by the chart's `services`, as a client or as a service's own namespace) in
#              a window: its failed requests; then emu-client's Envoy runs no module, and new pods
#              (a plain Fortio, and the annotated pod restarted: the ConfigMap is kept) start
#              without the filter, the new Fortio's requests all answered
#   opt-in     `helm upgrade` with the first values again: emu-client and the new Fortio run the
#              first module
#   uninstall  `helm uninstall`: the failed requests of the window around it; the Deployment's
#              ReplicaSets and pods go by garbage collection; then the pods of the namespace start
#              again and reach Ready: the emu-fast Deployment restarted (`kubectl rollout restart`:
#              new pods), a Fortio, and the annotated pod again (helm kept its ConfigMap), while a
#              pod naming a ConfigMap that does not exist cannot start (the trap the kept ConfigMap
#              avoids)
# shellcheck shell=bash

BOOTSTRAP_CONFIGMAP=tailweight-sidecar-bootstrap
FORTIO_IMAGE=$(ctr_ images ls -q | grep '^tailweight.local/fortio:' | head -1)

# annotations_with_bootstrap CONFIGMAP: the mesh pods' annotations plus the bootstrap override.
annotations_with_bootstrap() {
  python3 -c 'import json, sys
a = json.loads(sys.argv[1]); a["sidecar.istio.io/bootstrapOverride"] = sys.argv[2]; print(json.dumps(a))' \
    "$MESH_POD_ANNOTATIONS" "$1"
}
# fortio_pod NAME QPS [BOOTSTRAP_CONFIGMAP]: a Fortio pod sending to the emu Service, annotated with
# the bootstrap override when a ConfigMap is named.
fortio_pod() {
  local annotations=$MESH_POD_ANNOTATIONS
  [ -n "${3:-}" ] && annotations=$(annotations_with_bootstrap "$3")
  MESH_POD_ANNOTATIONS=$annotations mesh_create_pod "$1" "$FORTIO_IMAGE" \
    "[\"load\", \"-qps\", \"$2\", \"-t\", \"0\", \"http://$EMU_SERVICE_IP:$EMU_PORT/\"]"
}
# has_bootstrap_override NAME: pod NAME's Envoy runs with the chart's bootstrap (its memory release,
# in the bootstrap section of /config_dump; counted, not `grep -q`: see client_runs_module).
has_bootstrap_override() {
  [ "$(nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 5 "http://127.0.0.1:15000/config_dump" |
    grep -c '"memory_release_interval"')" -gt 0 ]
}
# filter_stats NAME: how many of the filter's stats pod NAME's Envoy has (the module's are
# wasmcustom.*; Envoy's own stats of the aggregator's cluster also name tailweight).
filter_stats() {
  nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 3 "http://127.0.0.1:15000/stats" | grep -c '^wasmcustom\.'
}
# outbound_counts NAME: "<completed> <2xx>" of pod NAME's emu cluster, from one /stats read.
outbound_counts() {
  nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 3 "http://127.0.0.1:15000/stats" |
    awk -F': ' -v c="$EMU_OUTBOUND.upstream_rq_completed" -v ok="$EMU_OUTBOUND.upstream_rq_2xx" \
      '$1 == c {completed = $2} $1 == ok {good = $2} END {print completed + 0, good + 0}'
}
sent_some() { [ "$(outbound_counts "$1" | cut -d' ' -f2)" -gt 0 ]; }
delete_pod() { api -X DELETE "$SERVER/api/v1/namespaces/$MESH_NS/pods/$1" > /dev/null; wait_until 60 pod_gone "$MESH_NS/$1"; }
configmap_kept() { kc -n "$MESH_NS" get configmap "$BOOTSTRAP_CONFIGMAP" -o name > /dev/null; }
# mount_failed NAME: the kubelet reported a FailedMount for pod NAME.
mount_failed() {
  kc -n "$MESH_NS" get events --field-selector "involvedObject.name=$1,reason=FailedMount" -o name | grep -q .
}
helm_() { "$HELM" --kubeconfig "$WORK/kubeconfig" "$@"; }
# aggregator_collected: the uninstalled Deployment's ReplicaSets and pods are gone (garbage collector).
aggregator_collected() {
  [ -z "$(kc -n "$TW_NS" get replicasets,pods -l "$AGG_SELECTOR" -o name)" ]
}
# emu_fast_restarted: the restarted emu-fast rolled out, its Ready pods all new.
emu_fast_restarted() {
  rolled_out "$MESH_NS" emu-fast || return 1
  EMU_FAST_NEW=$(ready_pods "$MESH_NS" app=emu,role=fast | awk '{print $1}' | paste -sd' ')
  [ "$(echo "$EMU_FAST_NEW" | wc -w)" = "$EMU_FAST" ] &&
    [ -z "$(comm -12 <(echo "$EMU_FAST_NEW" | tr ' ' '\n' | sort) <(printf '%s\n' "${EMU_NAMES[@]}" | sort))" ]
}

# -- bootstrap: an annotated pod while the namespace is opted in ---------------------------------------------
if fortio_pod emu-boot 2 "$BOOTSTRAP_CONFIGMAP" 2> "$WORK/bootstrap.log" &&
   wait_until 120 mesh_pod_ready emu-boot && wait_until 30 has_bootstrap_override emu-boot; then
  result bootstrap "PASS pod emu-boot annotated sidecar.istio.io/bootstrapOverride: $BOOTSTRAP_CONFIGMAP Ready, its Envoy's bootstrap carries the override"
else result bootstrap "FAIL emu-boot Ready: $(mesh_pod_ready emu-boot && echo yes || echo no), $(first_error "$WORK/bootstrap.log")"; fi

# -- dashboard: the dashboard's queries against Prometheus scraping these pods (dashboard.sh) -----------------
# shellcheck source=dashboard.sh
source "$HERE/dashboard.sh"

# -- opt-out: no service of the namespace in the chart's values ---------------------------------------------
sed 's/^services: .*/services: []/' "$WORK/tw-values.yaml" > "$WORK/tw-values-opt-out.yaml"
emu_window > "$WORK/opt-out.window" &
window_pid=$!
helm_ upgrade tailweight "$CHART_TGZ" --namespace "$TW_NS" --values "$WORK/tw-values-opt-out.yaml" > "$WORK/opt-out.log" 2>&1
opted_out=$?
wait "$window_pid"
read -r slow_share requests failed shares < "$WORK/opt-out.window"
runs_no_module() { [ -z "$(module_digests "$1")" ]; }
wait_until 60 runs_no_module emu-client
client_modules=$(module_digests emu-client)
# The pods restart: a new Fortio, and the annotated pod replaced by one of the same spec.
if [ "$opted_out" = 0 ] && delete_pod emu-boot &&
   fortio_pod emu-client-3 5 2>> "$WORK/opt-out.log" && fortio_pod emu-boot-2 2 "$BOOTSTRAP_CONFIGMAP" 2>> "$WORK/opt-out.log" &&
   wait_until 120 mesh_pod_ready emu-client-3 && wait_until 120 mesh_pod_ready emu-boot-2 && wait_until 30 sent_some emu-client-3; then
  read -r new_completed new_ok <<< "$(outbound_counts emu-client-3)"
  new_modules=$(module_digests emu-client-3)
  new_tw_stats=$(filter_stats emu-client-3)
  if [ -z "$client_modules" ] && [ -z "$new_modules" ] && [ "$new_tw_stats" = 0 ] && [ "$new_completed" = "$new_ok" ]; then
    result opt-out "PASS helm upgrade with services: [] under load: $failed failed of $requests requests in ${WINDOW_S} s, slow pod share $slow_share%; emu-client's Envoy runs no module; new pods emu-client-3 (no module, no filter stats, $((new_completed - new_ok)) failed of $new_completed) and emu-boot-2 (annotated, ConfigMap kept) Ready"
  else result opt-out "FAIL modules: emu-client '$client_modules', emu-client-3 '$new_modules'; emu-client-3 filter stats $new_tw_stats, completed $new_completed, 2xx $new_ok"; fi
else result opt-out "FAIL helm upgrade exit $opted_out, emu-client-3 Ready: $(mesh_pod_ready emu-client-3 && echo yes || echo no), emu-boot-2 Ready: $(mesh_pod_ready emu-boot-2 && echo yes || echo no), $(first_error "$WORK/opt-out.log")"; fi

# -- opt-in again: the first values ---------------------------------------------------------------------
if helm_ upgrade tailweight "$CHART_TGZ" --namespace "$TW_NS" --values "$WORK/tw-values.yaml" > "$WORK/opt-in.log" 2>&1 &&
   wait_until 60 runs_module emu-client "$MODULE_DIGEST" && wait_until 60 runs_module emu-client-3 "$MODULE_DIGEST"; then
  result opt-in "PASS helm upgrade with the first values: emu-client and emu-client-3 run module ${MODULE_DIGEST:7:12} again"
else result opt-in "FAIL modules: emu-client '$(module_digests emu-client)', emu-client-3 '$(module_digests emu-client-3)', $(first_error "$WORK/opt-in.log")"; fi

# -- uninstall ----------------------------------------------------------------------------------------------
window_open
helm_ uninstall tailweight --namespace "$TW_NS" > "$WORK/uninstall.log" 2>&1
uninstalled=$?
gc=no; wait_until 60 aggregator_collected && gc=yes
window_close > "$WORK/uninstall.window"
read -r slow_share requests failed shares < "$WORK/uninstall.window"
# Pods of the namespace start again once the chart is gone, the annotated one too (helm kept its
# ConfigMap); one naming a ConfigMap that is not there cannot (Istio mounts it as a required volume).
if [ "$uninstalled" = 0 ] && [ "$gc" = yes ] && configmap_kept && delete_pod emu-boot-2 &&
   kc -n "$MESH_NS" rollout restart deployment/emu-fast >> "$WORK/uninstall.log" 2>&1 &&
   fortio_pod emu-client-2 5 2>> "$WORK/uninstall.log" && fortio_pod emu-boot-3 2 "$BOOTSTRAP_CONFIGMAP" 2>> "$WORK/uninstall.log" &&
   fortio_pod emu-boot-missing 2 tailweight-no-such-bootstrap 2>> "$WORK/uninstall.log" &&
   wait_until 180 emu_fast_restarted && wait_until 120 mesh_pod_ready emu-client-2 && wait_until 120 mesh_pod_ready emu-boot-3 &&
   wait_until 60 mount_failed emu-boot-missing && ! mesh_pod_ready emu-boot-missing; then
  result uninstall "PASS helm uninstall under load: $failed failed of $requests requests in $WINDOW_LENGTH_S s (slow pod share $slow_share%); the aggregator's ReplicaSets and pods garbage-collected; ConfigMap $BOOTSTRAP_CONFIGMAP kept; Deployment emu-fast restarted (new pods $EMU_FAST_NEW), new pods emu-client-2, emu-boot-3 (annotated) Ready afterwards; emu-boot-missing (naming no ConfigMap) not Ready, FailedMount"
else result uninstall "FAIL helm uninstall exit $uninstalled, aggregator garbage-collected: $gc, ConfigMap kept: $(configmap_kept && echo yes || echo no), emu-fast restarted: $(emu_fast_restarted && echo yes || echo no), emu-boot-3 Ready: $(mesh_pod_ready emu-boot-3 && echo yes || echo no), emu-boot-missing FailedMount: $(mount_failed emu-boot-missing && echo yes || echo no), $(first_error "$WORK/uninstall.log")"; fi
delete_pod emu-boot-missing
