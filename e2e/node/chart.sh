# The chart on the real node (issue 40, item 2), sourced by backends.sh once its baseline ran (it uses
# probe.sh's, mesh.sh's and backends.sh's names):
#   helm-install  go-containerregistry's registry on the bridge's own address (pods reach it there),
#                 the filter module (make oci-wasm's layout) copied into it with oras, then
#                 `helm install` of the packaged chart (make chart-package) into namespace tailweight
#                 with services [emu.tw-mesh:8080], the module by digest from that registry and the
#                 aggregator image the probe imported (pull policy Never), two replicas, and the
#                 filter's per-endpoint metrics on (what the CLI reads); the aggregator pods are
#                 created from the chart's Deployment template (no controller-manager), its Service's
#                 EndpointSlice written here; PASS once both are Ready and the client sidecar runs
#                 the module (its tailweight stats appear)
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
client_runs_module() { tw_stats emu-client | grep -q .; }
# picks_now: the client sidecar's tailweight picks, its total counter (with per-endpoint metrics on
# there is also one counter per endpoint, which starts again from 0 when a module swap drops the
# scope that held it).
picks_now() { tw_stats emu-client | awk -F': ' '$1 == "wasmcustom.tailweight.picks" {n += $2} END {print n + 0}'; }

# tw_aggregator_pod I: the Deployment's pod template as pod tailweight-aggregator-node-I bound to the
# node, as its ReplicaSet would make it.
tw_aggregator_pod() {
  kc -n "$TW_NS" get deployment tailweight-aggregator -o json | python3 -c '
import json, sys
d = json.load(sys.stdin); t = d["spec"]["template"]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "tailweight-aggregator-node-" + sys.argv[2], "namespace": d["metadata"]["namespace"],
                    "labels": t["metadata"].get("labels", {}), "annotations": t["metadata"].get("annotations", {})},
       "spec": dict(t["spec"], nodeName=sys.argv[1])}
print(json.dumps(pod))' "$NODE" "$1"
}
# tw_aggregator_slice: the aggregator Service's EndpointSlice, one endpoint a replica (the container
# ports by name).
tw_aggregator_slice() {
  kc -n "$TW_NS" get pods -o json | python3 -c '
import json, sys
pods = [p for p in json.load(sys.stdin)["items"] if p["metadata"]["name"].startswith("tailweight-aggregator-node-")]
ports = [c for c in pods[0]["spec"]["containers"] if c["name"] != "istio-proxy"][0]["ports"]
print(json.dumps({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
  "metadata": {"name": "tailweight-aggregator-node", "namespace": pods[0]["metadata"]["namespace"],
               "labels": {"kubernetes.io/service-name": "tailweight-aggregator"}},
  "addressType": "IPv4",
  "endpoints": [{"addresses": [p["status"]["podIP"]], "conditions": {"ready": True}, "nodeName": p["spec"]["nodeName"],
                 "targetRef": {"kind": "Pod", "name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]}}
                for p in pods],
  "ports": [{"name": x["name"], "port": x["containerPort"], "protocol": "TCP"} for x in ports if "name" in x]}))'
}
tw_replica_ready() {
  kc -n "$TW_NS" get pod "tailweight-aggregator-node-$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}
# tw_aggregator_slice_applied: the EndpointSlice written (retried by the caller: the apiserver may
# answer a loaded machine's first attempt with an error).
tw_aggregator_slice_applied() { { tw_aggregator_slice | kc apply -f -; } >> "$WORK/helm-install.log" 2>&1; }
tw_aggregator_ready() {
  local i
  for ((i = 0; i < AGG_REPLICAS; i++)); do tw_replica_ready "$i" || return 1; done
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
  kc create namespace "$TW_NS" &&
  "$HELM" --kubeconfig "$WORK/kubeconfig" install tailweight "$CHART_TGZ" --namespace "$TW_NS" \
    --values "$WORK/tw-values.yaml" &&
  local i
  for ((i = 0; i < AGG_REPLICAS; i++)); do
    tw_aggregator_pod "$i" > "$WORK/tw-aggregator-pod-$i.json" &&
    api -f -X POST -H 'Content-Type: application/json' --data @"$WORK/tw-aggregator-pod-$i.json" \
      "$SERVER/api/v1/namespaces/$TW_NS/pods" > /dev/null || return 1
    PODS_CREATED+=("$TW_NS/tailweight-aggregator-node-$i")
  done
}

# -- helm-install ------------------------------------------------------------------------------------------
if tw_install > "$WORK/helm-install.log" 2>&1; then
  if wait_until 120 tw_aggregator_ready && wait_until 30 tw_aggregator_slice_applied &&
     wait_until 60 client_runs_module; then
    result helm-install "PASS $(basename "$CHART_TGZ") installed, $AGG_REPLICAS aggregator pods Ready, module $REG_ADDR/tailweight-filter@${MODULE_DIGEST:0:19}... running in the client sidecar"
  else result helm-install "FAIL aggregator pods Ready: $(tw_aggregator_ready && echo yes || echo no), slice: $(tail -1 "$WORK/helm-install.log" | cut -c1-200), client tailweight stats: $(tw_stats emu-client | wc -l), $(cat "$WORK/pod-logs/${MESH_NS}_emu-client_"*/istio-proxy/*.log 2>/dev/null | grep -m1 -iE 'wasm.*(error|fail)' | cut -c1-300)"; return 0; fi
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
