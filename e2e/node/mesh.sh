# The mesh pieces of the real-node probe (issue 40), sourced by probe.sh once its pod ran (it uses
# probe.sh's WORK, SERVER, NODE, SUBNET, BRIDGE, GATEWAY, api, kc, ctr_, start, result, wait_until, free_port):
#   proxy-image  the project's proxy image (pack-proxy-image.sh) imported, and Envoy, pilot-agent and
#                iptables-nft run from it by runc
#   istiod       istiod (pilot-discovery, as the Istio e2e runs it) beside the apiserver, with the
#                injector ConfigMap and MutatingWebhookConfiguration of its own Helm chart (images:
#                the proxy image, pull policy Never); the apiserver reaches the webhook through the
#                istiod Service's EndpointSlice (the bridge's gateway address; --enable-aggregator-routing)
#   inject       a pod created in a namespace labelled istio-injection=enabled comes back from the
#                webhook with istio-init and istio-proxy
#   sidecar      that pod runs: istio-init wrote its nat rules in the pod's netns, pilot-agent got its
#                certificate and config from istiod over the bridge, Envoy answers 15021/healthz/ready
#   traffic      (with a Fortio image) an injected Fortio pod sends to the first pod's Service IP;
#                its iptables hand the requests to its Envoy, which sends them over mTLS to the
#                server's Envoy (inbound 15006): both Envoys' counters show them
# istiod listens on 127.0.0.1 and on the bridge's gateway address only.
# Pods from here on are bound to the node by the scheduler; the Services' EndpointSlices are the
# endpointslice controller's, but for istiod's Service (no selector: istiod is a process, not a pod).
# shellcheck shell=bash

ISTIOD="$BIN/pilot-discovery-$ISTIO_VERSION"
ISTIO_CRDS="$TW_CACHE/istio/crds-$ISTIO_API_VERSION.yaml"
ISTIOD_CHART="$TW_CACHE/istio/istiod-chart-$ISTIO_VERSION"
HELM="$BIN/helm-$HELM_VERSION"
MESH_NS=tw-mesh

# Both pods: Envoy keeps every stat (Istio's bootstrap keeps a few by default), and the app starts
# once its sidecar is ready (the client's first requests would otherwise find no Envoy).
MESH_POD_ANNOTATIONS='{"proxy.istio.io/config": "{\"proxyStatsMatcher\": {\"inclusionRegexps\": [\".*\"]}, \"holdApplicationUntilProxyStarts\": true}"}'

# mesh_pod_json NAME IMAGE ARGS_JSON [APP]: a pod of MESH_NS labelled app=APP (default NAME); the
# scheduler binds it to the node.
mesh_pod_json() {
  cat <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "$MESH_NS", "labels": {"app": "${4:-$1}"},
  "annotations": $MESH_POD_ANNOTATIONS},
 "spec": {"serviceAccountName": "default", "automountServiceAccountToken": false,
  "terminationGracePeriodSeconds": 2, "tolerations": [{"operator": "Exists"}],
  "containers": [{"name": "$1", "image": "$2", "imagePullPolicy": "Never", "args": $3}]}}
EOF
}

# mesh_pod_field NAME EXPR: a Python expression over the pod `p` (its JSON).
mesh_pod_field() {
  api "$SERVER/api/v1/namespaces/$MESH_NS/pods/$1" | python3 -c "import json,sys; p=json.load(sys.stdin); print($2)"
}
mesh_pod_ready() {
  [ "$(mesh_pod_field "$1" '[c["type"] for c in p["status"].get("conditions", []) if c["status"] == "True"].count("Ready")')" = 1 ]
}
# mesh_pod_pid NAME CONTAINER: the host PID of CONTAINER's process (its netns is the pod's).
mesh_pod_pid() {
  local id
  id=$(mesh_pod_field "$1" "[c['containerID'] for c in p['status'].get('containerStatuses', []) if c['name'] == '$2'][0]")
  ctr_ tasks ls | awk -v id="${id#containerd://}" '$1 == id {print $2}'
}

# mesh_create_pod NAME IMAGE ARGS_JSON [APP]: creates it (PODS_CREATED: deleted at exit); the pod as the
# apiserver stored it (after the webhook) in $WORK/NAME-pod.created.json.
mesh_create_pod() {
  mesh_pod_json "$@" > "$WORK/$1-pod.json"
  api -f -X POST -H 'Content-Type: application/json' --data @"$WORK/$1-pod.json" \
    "$SERVER/api/v1/namespaces/$MESH_NS/pods" > "$WORK/$1-pod.created.json" || return 1
  PODS_CREATED+=("$MESH_NS/$1")
}

# envoy_stat NAME STAT: the value of one of Envoy's counters in pod NAME (its admin port 15000
# listens on the pod's loopback: curl runs in the pod's netns).
envoy_stat() {
  nsenter -t "$(mesh_pod_pid "$1" istio-proxy)" -n curl -s --max-time 3 "http://127.0.0.1:15000/stats" |
    awk -F': ' -v name="$2" '$1 == name {print $2}'
}

# -- proxy-image ----------------------------------------------------------------------------------------
if ctr_ images import --base-name tailweight.local/proxy "$PROXY_TAR" > "$WORK/proxy-image.log" 2>&1; then
  PROXY_IMAGE=$(ctr_ images ls -q | grep '^tailweight.local/proxy:' | head -1)
  proxy_run() { ctr_ run --rm --seccomp "$PROXY_IMAGE" "tw-probe-proxy-$1" "${@:2}"; }
  envoy_v=$(proxy_run envoy /usr/local/bin/envoy --version 2>&1 | grep -oE 'version: [^ ]+' | cut -d/ -f2)
  agent_help=$(proxy_run agent /usr/local/bin/pilot-agent istio-iptables --help 2>&1 | grep -c -- '--proxy-uid')
  ipt_v=$(proxy_run ipt /usr/sbin/iptables-nft-save --version 2>&1 | tail -1)
  if [ -n "$envoy_v" ] && [ "$agent_help" -ge 1 ] && [[ $ipt_v == *nf_tables* ]]; then
    result proxy-image "PASS $PROXY_IMAGE: envoy $envoy_v, pilot-agent istio-iptables, $ipt_v"
  else result proxy-image "FAIL envoy '$envoy_v', pilot-agent istio-iptables --help: $agent_help, iptables '$ipt_v'"; return 0; fi
else result proxy-image "FAIL $(first_error "$WORK/proxy-image.log")"; return 0; fi

# -- istiod with its injector -----------------------------------------------------------------------------
for b in "$ISTIOD" "$HELM" "$ISTIO_CRDS" "$ISTIOD_CHART"; do
  [ -e "$b" ] || { result istiod "SKIP $b not built (make istio-bins; build.sh istiod-chart)"; return 0; }
done
P_HTTP=$(free_port); P_GRPC=$(free_port); P_XDS=$(free_port); P_WEBHOOK=$(free_port); P_MON=$(free_port); P_CTRLZ=$(free_port)
mkdir -p "$WORK/istiod"
echo "networks: {}" > "$WORK/istiod/networks.yaml"
cat > "$WORK/istiod/mesh.yaml" <<EOF
rootNamespace: istio-system
trustDomain: cluster.local
# Istio's default: the injector points the pods' prometheus.io annotations at the agent's 15020,
# which serves Envoy's stats with the application's metrics (the aggregator's, for its ServiceMonitor).
enablePrometheusMerge: true
accessLogFile: ""
defaultConfig:
  discoveryAddress: "$GATEWAY:$P_XDS"
  # istiod's serving certificate names istiod.istio-system.svc; the sidecars dial it by address.
  proxyMetadata: {ISTIOD_SAN: istiod.istio-system.svc}
EOF
istiod_setup() {
  kc apply --server-side -f "$ISTIO_CRDS" >/dev/null &&
  kc wait --for=condition=Established crd --all --timeout=60s >/dev/null &&
  kc create namespace istio-system &&
  "$HELM" template istiod "$ISTIOD_CHART" -n istio-system \
    --show-only templates/istiod-injector-configmap.yaml --show-only templates/mutatingwebhook.yaml \
    --set "global.proxy.image=$PROXY_IMAGE" --set "global.proxy_init.image=$PROXY_IMAGE" \
    --set global.imagePullPolicy=Never --set "global.caAddress=$GATEWAY:$P_XDS" > "$WORK/istiod/injector.yaml" &&
  kc apply -f "$WORK/istiod/injector.yaml" &&
  # The webhook's Service, its endpoint istiod on the bridge (the apiserver routes to endpoints).
  kc apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: istiod, namespace: istio-system}
spec: {ports: [{name: https-webhook, port: 443, targetPort: $P_WEBHOOK}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: istiod-node, namespace: istio-system, labels: {kubernetes.io/service-name: istiod}}
addressType: IPv4
endpoints: [{addresses: ["$GATEWAY"], conditions: {ready: true}}]
ports: [{name: https-webhook, port: $P_WEBHOOK, protocol: TCP}]
EOF
}
webhook_patched() {
  kc get mutatingwebhookconfiguration istio-sidecar-injector -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | grep -q .
}
if istiod_setup > "$WORK/istiod-setup.log" 2>&1; then
  # As e2e/istio/cluster.py runs it (upstream Envoy: no Istio ALPN / metadata-exchange filters), plus
  # the injector and its caBundle patcher; gRPC (xDS, CA) and the webhook on the bridge.
  pushd "$WORK/istiod" >/dev/null   # istiod writes ./var/run/secrets relative to its working dir
  start istiod env PILOT_ENABLE_ALPN_FILTER=false PILOT_ENABLE_METADATA_EXCHANGE=false \
    POD_NAME=istiod-tw POD_NAMESPACE=istio-system REVISION=default CLUSTER_ID=Kubernetes \
    INJECTION_WEBHOOK_CONFIG_NAME=istio-sidecar-injector VALIDATION_WEBHOOK_CONFIG_NAME= \
    PILOT_ENABLE_GATEWAY_API=false PILOT_ENABLE_GATEWAY_API_STATUS=false \
    PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER=false PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER=false \
    "$ISTIOD" discovery "--kubeconfig=$WORK/kubeconfig" "--meshConfig=$WORK/istiod/mesh.yaml" \
    "--networksConfig=$WORK/istiod/networks.yaml" "--httpAddr=127.0.0.1:$P_HTTP" "--grpcAddr=127.0.0.1:$P_GRPC" \
    "--secureGRPCAddr=$GATEWAY:$P_XDS" "--httpsAddr=$GATEWAY:$P_WEBHOOK" "--monitoringAddr=127.0.0.1:$P_MON" \
    --ctrlz_address=127.0.0.1 "--ctrlz_port=$P_CTRLZ" --domain=cluster.local --log_output_level=default:info
  popd >/dev/null
  if wait_until 90 curl -sf --max-time 2 "http://127.0.0.1:$P_HTTP/ready" && wait_until 30 webhook_patched; then
    result istiod "PASS ready; webhook istio-sidecar-injector -> $GATEWAY:$P_WEBHOOK, caBundle patched"
  else result istiod "FAIL $(first_error "$WORK/istiod.log")"; return 0; fi
else result istiod "FAIL $(first_error "$WORK/istiod-setup.log")"; return 0; fi

# -- inject: a pod in an opted-in namespace -------------------------------------------------------------
# The namespace's ServiceAccount default, made by the controller-manager's serviceaccount controller.
mesh_service_account() { api -f "$SERVER/api/v1/namespaces/$MESH_NS/serviceaccounts/default"; }
mesh_setup() {
  kc create namespace "$MESH_NS" && NAMESPACES_CREATED+=("$MESH_NS") &&
  kc label namespace "$MESH_NS" istio-injection=enabled &&
  wait_until 30 mesh_service_account
}
if mesh_setup > "$WORK/inject.log" 2>&1 &&
   mesh_create_pod server "$AGG_IMAGE" '["--listen=0.0.0.0:8080", "--identity=report"]' 2>> "$WORK/inject.log"; then
  injected=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["spec"]
print(" ".join([c["name"] for c in s.get("initContainers", [])] + [c["name"] for c in s["containers"]]))' "$WORK/server-pod.created.json")
  if [[ " $injected " == *" istio-init "* && " $injected " == *" istio-proxy "* ]]; then
    result inject "PASS containers after the webhook: $injected"
  else result inject "FAIL not injected: $injected"; return 0; fi
else result inject "FAIL $(first_error "$WORK/inject.log")"; return 0; fi

# -- sidecar: the injected pod runs -----------------------------------------------------------------------
if wait_until 120 mesh_pod_ready server; then
  SERVER_IP=$(mesh_pod_field server 'p["status"]["podIP"]')
  pid=$(mesh_pod_pid server server)
  nsenter -t "$pid" -n iptables-save -t nat > "$WORK/server-nat.rules" 2>&1
  redirects=$(grep -cE 'ISTIO_(REDIRECT|IN_REDIRECT) .*REDIRECT --to-ports 150(01|06)' "$WORK/server-nat.rules")
  ready=$(curl -s --max-time 3 -o /dev/null -w '%{http_code}' "http://$SERVER_IP:15021/healthz/ready")
  if [ "$redirects" -ge 2 ] && [ "$ready" = 200 ]; then
    result sidecar "PASS Ready at $SERVER_IP: istio-init's nat REDIRECT rules in the pod netns, Envoy 15021/healthz/ready 200"
  else result sidecar "FAIL REDIRECT rules in the pod netns: $redirects, 15021/healthz/ready: $ready"; return 0; fi
else
  result sidecar "FAIL $(mesh_pod_field server '[(c["name"], c.get("state")) for c in p["status"].get("initContainerStatuses", []) + p["status"].get("containerStatuses", [])]' 2>&1 | cut -c1-400)"
  return 0
fi

# -- traffic: Fortio in a second injected pod sends to the server's Service --------------------------
[ -n "$FORTIO_TAR" ] || { result traffic "SKIP no Fortio image given"; return 0; }
# slice_ready_ips NAMESPACE SERVICE: the ready addresses of the Service's EndpointSlices (the
# controller's), sorted, one line.
slice_ready_ips() {
  kc -n "$1" get endpointslices -l "kubernetes.io/service-name=$2" -o json | python3 -c '
import json, sys
print(" ".join(sorted(a for s in json.load(sys.stdin)["items"] for e in s.get("endpoints") or []
                      if (e.get("conditions") or {}).get("ready") for a in e["addresses"])))'
}
# The Service; its EndpointSlice is the endpointslice controller's, with the server pod's address.
server_service() {
  kc apply -f - <<EOF &&
apiVersion: v1
kind: Service
metadata: {name: server, namespace: $MESH_NS}
spec: {selector: {app: server}, ports: [{name: http, port: 8080, targetPort: 8080}]}
EOF
  wait_until 30 server_sliced
}
server_sliced() { [ "$(slice_ready_ips "$MESH_NS" server)" = "$SERVER_IP" ]; }
# Istio names its clusters' stat prefixes with a closing ';'.
OUTBOUND="cluster.outbound|8080||server.$MESH_NS.svc.cluster.local;"
INBOUND="cluster.inbound|8080||;"
client_sent() { [ "$(envoy_stat client "$OUTBOUND.upstream_rq_200")" -gt 0 ] 2>/dev/null; }
if ctr_ images import --base-name tailweight.local/fortio "$FORTIO_TAR" > "$WORK/fortio-image.log" 2>&1 &&
   server_service > "$WORK/traffic.log" 2>&1 &&
   SERVICE_IP=$(kc -n "$MESH_NS" get service server -o jsonpath='{.spec.clusterIP}') &&
   mesh_create_pod client "$(ctr_ images ls -q | grep '^tailweight.local/fortio:' | head -1)" \
     "[\"load\", \"-qps\", \"5\", \"-t\", \"0\", \"-c\", \"1\", \"http://$SERVICE_IP:8080/healthz\"]" 2>> "$WORK/traffic.log"; then
  if wait_until 120 mesh_pod_ready client && wait_until 30 client_sent; then
    sent=$(envoy_stat client "$OUTBOUND.upstream_rq_200")
    received=$(envoy_stat server "$INBOUND.upstream_rq_200")
    mtls=$(envoy_stat server listener.0.0.0.0_15006.ssl.handshake)   # the server's Envoy terminated TLS
    if [ "${received:-0}" -gt 0 ]; then
      result traffic "PASS Fortio -> $SERVICE_IP:8080 through both sidecars: client Envoy $sent x 200, server Envoy inbound $received x 200, $mtls TLS handshake(s) on its 15006"
    else result traffic "FAIL client Envoy $sent x 200 but the server's inbound cluster counted ${received:-nothing}"; fi
  else
    result traffic "FAIL $(mesh_pod_field client '[(c["name"], c.get("state")) for c in p["status"].get("initContainerStatuses", []) + p["status"].get("containerStatuses", [])]' 2>&1 | cut -c1-300); client Envoy 200s: $(envoy_stat client "$OUTBOUND.upstream_rq_200" 2>&1)"
  fi
else result traffic "FAIL $(first_error "$WORK/traffic.log")"; fi

# -- emulated backends with a slow pod, and Fortio's share to each (backends.sh) ---------------------
if [ -n "${EMULATOR_TAR:-}" ] && [ -n "$FORTIO_TAR" ]; then
  # shellcheck source=backends.sh
  source "$HERE/backends.sh"
fi
