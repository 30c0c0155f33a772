# The user's path on the real node (issue 40, item 2), sourced by mesh.sh once its traffic piece ran
# (it uses probe.sh's and mesh.sh's WORK, SERVER, NODE, MESH_NS, api, kc, ctr_, result, wait_until,
# mesh_create_pod, mesh_pod_ready, mesh_pod_field, mesh_pod_pid, envoy_stat):
#   backends  the project's emulator image imported, and two Deployments of injected emulator pods,
#             emu-fast (EMU_FAST replicas) and emu-slow (one replica, its service time x SLOW_SPEED),
#             both behind the Service emu (app=emu); their ReplicaSets make the pods, the scheduler
#             binds them, the endpointslice controller writes the Service's EndpointSlice; a Sidecar
#             points their inbound port at the emulator, which listens on 127.0.0.1. EMU_NAMES: the
#             pods' names, the slow one last
#   baseline  an injected Fortio pod sends to the Service through its sidecar (Istio's default
#             balancing, no tailweight): each pod's share of the requests of one window, read from
#             the emulators' own counters (admin /metrics in each pod's netns), and the requests
#             that failed (the client Envoy's completed minus its 200s over the window)
# shellcheck shell=bash

EMU_FAST=2
EMU_PODS=$((EMU_FAST + 1))
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
  nsenter -t "$(mesh_pod_pid "$1" emulator)" -n curl -s --max-time 3 "http://127.0.0.1:9000/metrics" |
    awk '$1 ~ /^emulator_requests_total/ {n += $2} END {print n + 0}'
}

# emu_deployment NAME REPLICAS SPEED: a Deployment of emulator pods labelled app=emu, role=NAME.
emu_deployment() {
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: emu-$1, namespace: $MESH_NS}
spec:
  replicas: $2
  selector: {matchLabels: {app: emu, role: $1}}
  template:
    metadata:
      labels: {app: emu, role: $1}
      annotations: $MESH_POD_ANNOTATIONS
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - name: emulator
        image: $EMU_IMAGE
        imagePullPolicy: Never
        args: [--admin-port, "9000", --backend, "port=$EMU_PORT,workers=4,base_ms=$EMU_BASE_MS,speed=$3,jitter=0.1"]
---
YAML
}
# emu_service: the two Deployments, the Service emu selecting both, and the Sidecar that sends the
# pods' inbound port to 127.0.0.1, where the emulator listens.
emu_service() {
  { emu_deployment fast "$EMU_FAST" 1; emu_deployment slow 1 "$SLOW_SPEED"; cat <<YAML; } | kc apply -f -
apiVersion: v1
kind: Service
metadata: {name: emu, namespace: $MESH_NS}
spec: {selector: {app: emu}, ports: [{name: http, port: $EMU_PORT, targetPort: $EMU_PORT}]}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: emu, namespace: $MESH_NS}
spec:
  workloadSelector: {labels: {app: emu}}
  ingress: [{port: {number: $EMU_PORT, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:$EMU_PORT"}]
YAML
}
# ready_pods NAMESPACE SELECTOR: "<name> <IP>" of each Ready pod matching SELECTOR that is not being
# deleted, by name.
ready_pods() {
  kc -n "$1" get pods -l "$2" -o json | python3 -c '
import json, sys
for p in sorted(json.load(sys.stdin)["items"], key=lambda p: p["metadata"]["name"]):
    ready = [c for c in p["status"].get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"]
    if ready and not p["metadata"].get("deletionTimestamp"):
        print(p["metadata"]["name"], p["status"]["podIP"])'
}
# rolled_out NAMESPACE DEPLOYMENT: the Deployment's controller finished (every replica updated,
# available, and no old one left).
rolled_out() { kc -n "$1" rollout status "deployment/$2" --timeout=5s > /dev/null; }
# emu_pods_ready: both Deployments rolled out with EMU_PODS Ready pods, and the Service's EndpointSlice
# (the controller's) names exactly their addresses; sets EMU_NAMES (the slow pod last) and EMU_IPS.
emu_pods_ready() {
  local fast slow
  rolled_out "$MESH_NS" emu-fast && rolled_out "$MESH_NS" emu-slow || return 1
  fast=$(ready_pods "$MESH_NS" app=emu,role=fast); slow=$(ready_pods "$MESH_NS" app=emu,role=slow)
  [ "$(printf '%s\n%s\n' "$fast" "$slow" | grep -c .)" = "$EMU_PODS" ] || return 1
  mapfile -t EMU_NAMES < <(printf '%s\n%s\n' "$fast" "$slow" | awk 'NF {print $1}')
  mapfile -t EMU_IPS < <(printf '%s\n%s\n' "$fast" "$slow" | awk 'NF {print $2}')
  [ "$(slice_ready_ips "$MESH_NS" emu)" = "$(printf '%s\n' "${EMU_IPS[@]}" | sort | paste -sd' ')" ]
}

# -- backends -------------------------------------------------------------------------------------------
if ctr_ images import --base-name tailweight.local/emulator "$EMULATOR_TAR" > "$WORK/backends.log" 2>&1 &&
   EMU_IMAGE=$(ctr_ images ls -q | grep '^tailweight.local/emulator:' | head -1) &&
   emu_service >> "$WORK/backends.log" 2>&1; then
  if wait_until 120 emu_pods_ready; then
    result backends "PASS $EMU_PODS emulator pods Ready (${EMU_IPS[*]}) of Deployments emu-fast ($EMU_FAST) and emu-slow (1), ${EMU_NAMES[-1]} slow (x$SLOW_SPEED of ${EMU_BASE_MS} ms), EndpointSlice by the controller"
  else
    result backends "FAIL $(kc -n "$MESH_NS" get deployments,pods -o wide 2>&1 | tail -n +2 | tr -s ' ' | paste -sd';' | cut -c1-300)"
    return 0
  fi
else result backends "FAIL $(first_error "$WORK/backends.log")"; return 0; fi

# -- baseline: Fortio to the Service, Istio's balancing alone ---------------------------------------------
# client_counts: "<answered> <2xx>" of emu-client's requests, from Fortio's own access log (one JSON
# line per request: "ok" is a 2xx; /dev/shm is the pod's writable tmpfs, read through the container's
# root). The client Envoy's cluster counters are not a failure count across the chart's steps: over
# `helm uninstall` its `upstream_rq_2xx` of the `emu` cluster started again (13,094 -> 594) while
# `upstream_rq_completed` carried on. A line still being written (no closing brace) is not counted.
client_counts() {
  local log
  log="/proc/$(mesh_pod_pid emu-client emu-client)/root$EMU_CLIENT_LOG"
  if [ -r "$log" ]; then
    awk '/}$/ {answered++; if (index($0, "\"ok\":true")) good++} END {print answered + 0, good + 0}' "$log"
  else echo "0 0"; fi
}
EMU_CLIENT_LOG=/dev/shm/requests.json
# emu_counts: the emulators' counters, then client_counts, one line.
emu_counts() {
  local i line=""
  for ((i = 0; i < EMU_PODS; i++)); do line+="$(emu_served "${EMU_NAMES[i]}") "; done
  echo "$line$(client_counts)"
}
# emu_window: counts over WINDOW_S seconds -> emu_delta's line.
emu_window() {
  local before
  before=$(emu_counts); sleep "$WINDOW_S"; emu_delta "$before" "$(emu_counts)"
}
# window_open, then window_close: a window around a step, as long as the step and at least WINDOW_S;
# window_close prints emu_delta's line and sets WINDOW_LENGTH_S (call it in this shell, not in $()).
window_open() { WINDOW_BEFORE=$(emu_counts); WINDOW_START=$SECONDS; }
window_close() {
  local left=$((WINDOW_START + WINDOW_S - SECONDS))
  [ "$left" -gt 0 ] && sleep "$left"
  WINDOW_LENGTH_S=$((SECONDS - WINDOW_START))
  local after
  after=$(emu_counts)
  say "window counts (each pod's served, emu-client's answered, its 2xx): before $WINDOW_BEFORE, after $after"
  emu_delta "$WINDOW_BEFORE" "$after"
}
# emu_delta BEFORE AFTER: two emu_counts -> "<slow share %> <requests> <failed> <share of each pod>".
emu_delta() {
  python3 - "$EMU_PODS" "$1" "$2" <<'PY'
import sys
n = int(sys.argv[1]); b = [int(x or 0) for x in sys.argv[2].split()]; a = [int(x or 0) for x in sys.argv[3].split()]
d = [y - x for x, y in zip(b, a)]
served, answered, ok = d[:n], d[n], d[n + 1]
total = sum(served) or 1
print(f"{100 * served[-1] / total:.1f} {sum(served)} {answered - ok} " + " ".join(f"{100 * s / total:.1f}" for s in served))
PY
}
emu_client_sent() { [ "$(client_counts | cut -d' ' -f2)" -gt 0 ]; }
EMU_SERVICE_IP=$(kc -n "$MESH_NS" get service emu -o jsonpath='{.spec.clusterIP}')
if mesh_create_pod emu-client "$(ctr_ images ls -q | grep '^tailweight.local/fortio:' | head -1)" \
     "[\"load\", \"-access-log-file\", \"$EMU_CLIENT_LOG\", \"-qps\", \"$EMU_QPS\", \"-t\", \"0\", \"-c\", \"$EMU_CONNECTIONS\", \"http://$EMU_SERVICE_IP:$EMU_PORT/\"]" 2>> "$WORK/backends.log" &&
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
