# The chart on the real node (issue 40, item 2), sourced by backends.sh once its baseline ran (it uses
# probe.sh's, mesh.sh's and backends.sh's names):
#   helm-install  go-containerregistry's registry on the bridge's own address (pods reach it there),
#                 the filter module (make oci-wasm's layout) copied into it with oras, then
#                 `helm install` of the packaged chart (make chart-package) into namespace tailweight
#                 with services [emu.tw-mesh:8080], the module by digest from that registry and the
#                 aggregator image the probe imported (pull policy Never), two replicas, and the
#                 filter's per-endpoint metrics on (what the CLI reads); the chart's Deployment
#                 makes the aggregator pods through its ReplicaSet, the scheduler binds them, the
#                 endpointslice controller writes its Service's EndpointSlice; PASS once the
#                 Deployment rolled out, the slice names both pods and the client sidecar runs the
#                 module (its tailweight stats appear)
#   steered       the baseline's window again with tailweight steering: the slow pod's share, the
#                 failed requests, and the client sidecar's tailweight counters
# Then, given the CLI, cli.sh (cli, replicas), and lifecycle.sh.
# shellcheck shell=bash

REGISTRY="$BIN/registry-$GGCR_VERSION"
TW_NS=tailweight
AGG_REPLICAS=2      # the chart's aggregator.replicas: reports shard over them by destination cluster
TW_VERSION_CHART=$(tar -xzOf "$CHART_TGZ" tailweight/Chart.yaml | sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')

# tw_stats NAME: the tailweight lines of pod NAME's sidecar /stats.
tw_stats() {
  nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 3 "http://127.0.0.1:15000/stats" | grep -i tailweight
}
# client_runs_module: the client sidecar has the filter's stats. (`grep -c` reads all of its input: under
# pipefail a `grep -q` that quits at the first line fails the pipeline once the writer, with hundreds
# of per-endpoint lines still to write, takes SIGPIPE.)
client_runs_module() { [ "$(tw_stats emu-client | grep -c .)" -gt 0 ]; }
# picks_now: the client sidecar's tailweight picks, its total counter (with per-endpoint metrics on
# there is also one counter per endpoint, which starts again from 0 when a module swap drops the
# scope that held it).
picks_now() { tw_stats emu-client | awk -F': ' '$1 == "wasmcustom.tailweight.picks" {n += $2} END {print n + 0}'; }

AGG_SELECTOR=app.kubernetes.io/name=tailweight-aggregator,app.kubernetes.io/instance=tailweight
# tw_aggregator_ready: the chart's Deployment rolled out with AGG_REPLICAS Ready pods, and its
# Service's EndpointSlice (the controller's) names exactly their addresses; sets AGG_PODS (by name).
tw_aggregator_ready() {
  local pods
  rolled_out "$TW_NS" tailweight-aggregator || return 1
  pods=$(ready_pods "$TW_NS" "$AGG_SELECTOR")
  [ "$(echo "$pods" | grep -c .)" = "$AGG_REPLICAS" ] || return 1
  mapfile -t AGG_PODS < <(echo "$pods" | awk '{print $1}')
  [ "$(slice_ready_ips "$TW_NS" tailweight-aggregator)" = "$(echo "$pods" | awk '{print $2}' | sort | paste -sd' ')" ]
}

tw_install() {
  REG_ADDR="$GATEWAY:$(free_port)"
  start oci-registry "$REGISTRY" "--listen=$REG_ADDR"
  wait_until 15 curl -sf --max-time 2 "http://$REG_ADDR/v2/" || { echo "registry: no /v2/ on $REG_ADDR"; return 1; }
  "$ORAS" cp --no-tty --to-plain-http --from-oci-layout "$MODULE_LAYOUT:$TW_VERSION_CHART" \
    "$REG_ADDR/tailweight-filter:$TW_VERSION_CHART" || return 1
  MODULE_DIGEST=$("$ORAS" resolve --plain-http "$REG_ADDR/tailweight-filter:$TW_VERSION_CHART") || return 1
  cat > "$WORK/tw-values.yaml" <<YAML
services: [{name: emu, namespace: $MESH_NS, port: $EMU_PORT}]
module: {oci: {repository: "$REG_ADDR/tailweight-filter", digest: "$MODULE_DIGEST"}}
filter: {perEndpointMetrics: true}
aggregator:
  replicas: $AGG_REPLICAS
  image: {repository: "${AGG_IMAGE%:*}", tag: "${AGG_IMAGE##*:}", pullPolicy: Never}
YAML
  kc create namespace "$TW_NS" && NAMESPACES_CREATED+=("$TW_NS") &&
  "$HELM" --kubeconfig "$WORK/kubeconfig" install tailweight "$CHART_TGZ" --namespace "$TW_NS" \
    --values "$WORK/tw-values.yaml"
}

# -- helm-install ------------------------------------------------------------------------------------------
if tw_install > "$WORK/helm-install.log" 2>&1; then
  if wait_until 180 tw_aggregator_ready && wait_until 120 client_runs_module; then
    result helm-install "PASS $(basename "$CHART_TGZ") installed, $AGG_REPLICAS aggregator pods Ready (${AGG_PODS[*]}, Deployment rolled out, EndpointSlice by the controller), module $REG_ADDR/tailweight-filter@${MODULE_DIGEST:0:19}... running in the client sidecar"
  else result helm-install "FAIL aggregator ready: $(tw_aggregator_ready && echo yes || echo no) (pods $(ready_pods "$TW_NS" "$AGG_SELECTOR" | paste -sd' '), slice $(slice_ready_ips "$TW_NS" tailweight-aggregator)), client tailweight stats: $(tw_stats emu-client | wc -l), $(cat "$WORK/pod-logs/${MESH_NS}_emu-client_"*/istio-proxy/*.log 2>/dev/null | grep -m1 -iE 'wasm.*(error|fail)' | cut -c1-300)"; return 0; fi
else result helm-install "FAIL $(first_error "$WORK/helm-install.log")"; return 0; fi

# -- steered: the same window with tailweight ---------------------------------------------------------------
sleep "$WINDOW_S"   # the aggregator's first views reach the client (report interval 1 s)
read -r slow_share requests failed shares <<< "$(emu_window)"
picks=$(picks_now)
if [ "${requests:-0}" -gt 0 ]; then
  result steered "PASS slow pod share $slow_share% of $requests requests in ${WINDOW_S} s (each pod: $shares %), $failed failed, client sidecar tailweight picks $picks"
else result steered "FAIL the emulators counted no request in ${WINDOW_S} s"; fi

# -- the CLI against the node's pods and both replicas (cli.sh) ---------------------------------------------
if [ -n "${TW_CLI:-}" ]; then
  # shellcheck source=cli.sh
  source "$HERE/cli.sh"
fi

# -- helm upgrade and uninstall under load (lifecycle.sh) ---------------------------------------------------
# shellcheck source=lifecycle.sh
source "$HERE/lifecycle.sh"
