# The user's path on the real node (issue 40, item 2), sourced by mesh.sh once its traffic piece ran
# (it uses probe.sh's and mesh.sh's WORK, SERVER, NODE, MESH_NS, api, kc, ctr_, result, wait_until,
# mesh_create_pod, mesh_pod_ready, mesh_pod_field, mesh_pod_pid, envoy_stat):
#   backends  the project's emulator image imported, and a Deployment's worth of injected emulator
#             pods (created directly: no controller-manager), emu-0 .. emu-(N-1), the last one slow
#             (its service time x SLOW_SPEED), behind the Service emu whose EndpointSlice is written
#             here; a Sidecar points their inbound port at the emulator, which listens on 127.0.0.1
#   baseline  an injected Fortio pod sends to the Service through its sidecar (Istio's default
#             balancing, no tailweight): each pod's share of the requests of one window, read from
#             the emulators' own counters (admin /metrics in each pod's netns), and the requests
#             that failed (the client Envoy's completed minus its 200s over the window)
# shellcheck shell=bash

EMU_PODS=3
EMU_PORT=8080
EMU_BASE_MS=5
SLOW_SPEED=10       # the slow pod's service time multiplier (50 ms against 5 ms)
EMU_QPS=40
EMU_CONNECTIONS=4
WINDOW_S=15         # the measurement window, after the first requests went through
EMU_OUTBOUND="cluster.outbound|$EMU_PORT||emu.$MESH_NS.svc.cluster.local;"

# emu_served NAME: requests the emulator of pod NAME received so far (its admin port 9000 listens on
# the pod's loopback).
emu_served() {
  nsenter -t "$(mesh_pod_pid "$1" "$1")" -n curl -s --max-time 3 "http://127.0.0.1:9000/metrics" |
    awk '$1 ~ /^emulator_requests_total/ {n += $2} END {print n + 0}'
}

# emu_service IPS...: the Service emu, its EndpointSlice (one endpoint a pod, as the controller would
# write it) and the Sidecar that sends the pods' inbound port to 127.0.0.1, where the emulator listens.
emu_service() {
  local i=0 endpoints="" ip
  for ip in "$@"; do
    endpoints+="{addresses: [\"$ip\"], conditions: {ready: true}, nodeName: \"$NODE\", targetRef: {kind: Pod, name: emu-$i, namespace: $MESH_NS}},"
    i=$((i + 1))
  done
  kc apply -f - <<YAML
apiVersion: v1
kind: Service
metadata: {name: emu, namespace: $MESH_NS}
spec: {selector: {app: emu}, ports: [{name: http, port: $EMU_PORT, targetPort: $EMU_PORT}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: emu-node, namespace: $MESH_NS, labels: {kubernetes.io/service-name: emu}}
addressType: IPv4
endpoints: [${endpoints%,}]
ports: [{name: http, port: $EMU_PORT, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: emu, namespace: $MESH_NS}
spec:
  workloadSelector: {labels: {app: emu}}
  ingress: [{port: {number: $EMU_PORT, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:$EMU_PORT"}]
YAML
}

# -- backends -------------------------------------------------------------------------------------------
emu_pods_ready() {
  local i
  for ((i = 0; i < EMU_PODS; i++)); do mesh_pod_ready "emu-$i" || return 1; done
}
emu_create_pods() {
  local i speed
  for ((i = 0; i < EMU_PODS; i++)); do
    speed=1; [ "$i" = $((EMU_PODS - 1)) ] && speed=$SLOW_SPEED
    mesh_create_pod "emu-$i" "$EMU_IMAGE" "[\"--admin-port\", \"9000\", \"--backend\",
      \"port=$EMU_PORT,workers=4,base_ms=$EMU_BASE_MS,speed=$speed,jitter=0.1\"]" emu || return 1
  done
}
if ctr_ images import --base-name tailweight.local/emulator "$EMULATOR_TAR" > "$WORK/backends.log" 2>&1 &&
   EMU_IMAGE=$(ctr_ images ls -q | grep '^tailweight.local/emulator:' | head -1) &&
   emu_create_pods 2>> "$WORK/backends.log"; then
  if wait_until 120 emu_pods_ready; then
    EMU_IPS=()
    for ((i = 0; i < EMU_PODS; i++)); do EMU_IPS+=("$(mesh_pod_field "emu-$i" 'p["status"]["podIP"]')"); done
    if emu_service "${EMU_IPS[@]}" >> "$WORK/backends.log" 2>&1; then
      result backends "PASS $EMU_PODS emulator pods Ready (${EMU_IPS[*]}), emu-$((EMU_PODS - 1)) slow (x$SLOW_SPEED of ${EMU_BASE_MS} ms)"
    else result backends "FAIL $(first_error "$WORK/backends.log")"; return 0; fi
  else
    result backends "FAIL $(mesh_pod_field "emu-$((EMU_PODS - 1))" '[(c["name"], c.get("state")) for c in p["status"].get("initContainerStatuses", []) + p["status"].get("containerStatuses", [])]' 2>&1 | cut -c1-300)"
    return 0
  fi
else result backends "FAIL $(first_error "$WORK/backends.log")"; return 0; fi

# -- baseline: Fortio to the Service, Istio's balancing alone ---------------------------------------------
# emu_counts: the emulators' counters, then the client Envoy's completed requests and 200s, one line.
# Both Envoy counters come from one /stats read (two reads would count requests completed between them).
emu_counts() {
  local i line=""
  for ((i = 0; i < EMU_PODS; i++)); do line+="$(emu_served "emu-$i") "; done
  echo "$line$(nsenter -t "$(mesh_pod_pid emu-client istio-proxy)" -n curl -s --max-time 3 "http://127.0.0.1:15000/stats" |
    awk -F': ' -v c="$EMU_OUTBOUND.upstream_rq_completed" -v ok="$EMU_OUTBOUND.upstream_rq_2xx" \
      '$1 == c {completed = $2} $1 == ok {good = $2} END {print completed + 0, good + 0}')"
}
# emu_window LABEL: counts over WINDOW_S seconds -> "<slow share %> <requests> <failed> <share of each pod>".
emu_window() {
  local before after
  before=$(emu_counts); sleep "$WINDOW_S"; after=$(emu_counts)
  python3 - "$EMU_PODS" "$before" "$after" <<'PY'
import sys
n = int(sys.argv[1]); b = [int(x or 0) for x in sys.argv[2].split()]; a = [int(x or 0) for x in sys.argv[3].split()]
d = [y - x for x, y in zip(b, a)]
served, completed, ok = d[:n], d[n], d[n + 1]
total = sum(served) or 1
print(f"{100 * served[-1] / total:.1f} {sum(served)} {completed - ok} " + " ".join(f"{100 * s / total:.1f}" for s in served))
PY
}
emu_client_sent() { [ "$(envoy_stat emu-client "$EMU_OUTBOUND.upstream_rq_200")" -gt 0 ] 2>/dev/null; }
EMU_SERVICE_IP=$(kc -n "$MESH_NS" get service emu -o jsonpath='{.spec.clusterIP}')
if mesh_create_pod emu-client "$(ctr_ images ls -q | grep '^tailweight.local/fortio:' | head -1)" \
     "[\"load\", \"-qps\", \"$EMU_QPS\", \"-t\", \"0\", \"-c\", \"$EMU_CONNECTIONS\", \"http://$EMU_SERVICE_IP:$EMU_PORT/\"]" 2>> "$WORK/backends.log" &&
   wait_until 120 mesh_pod_ready emu-client && wait_until 30 emu_client_sent; then
  read -r slow_share requests failed shares <<< "$(emu_window)"
  if [ "${requests:-0}" -gt 0 ]; then
    result baseline "PASS slow pod share $slow_share% of $requests requests in ${WINDOW_S} s (each pod: $shares %), $failed failed"
  else result baseline "FAIL the emulators counted no request in ${WINDOW_S} s ($(emu_counts))"; fi
else result baseline "FAIL $(first_error "$WORK/backends.log") client: $(mesh_pod_field emu-client '[(c["name"], c.get("state")) for c in p["status"].get("containerStatuses", [])]' 2>&1 | cut -c1-300)"; fi

# -- the chart installed on the node (chart.sh) ------------------------------------------------------------
if [ -n "${CHART_TGZ:-}" ] && [ -n "${MODULE_LAYOUT:-}" ]; then
  # shellcheck source=chart.sh
  source "$HERE/chart.sh"
fi
