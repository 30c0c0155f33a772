#!/usr/bin/env bash
# How far a real Kubernetes node gets on this machine (issue 40, "a real node in the e2e"): tries each
# piece in order and prints one line per piece (PASS / FAIL <first error line> / SKIP <reason>).
#   kernel      network namespace, bridge, veth pair, iptables nat REDIRECT/owner in a netns
#   containerd  Debian's containerd with its own config/root/state under a temp dir
#   image       the project's images imported with `ctr images import` (nothing is pulled)
#   ctr-run     the aggregator image run by runc (overlayfs, then native snapshotter, with seccomp)
#   cni         Debian's bridge + host-local plugins give a netns an address on a private bridge
#   apiserver   etcd + kube-apiserver built by e2e/istio/build/build.sh (as the Istio e2e runs them)
#   controllers kube-controller-manager and kube-scheduler built from the same module (controllers.sh):
#               Deployments, ReplicaSets, EndpointSlices, ServiceAccounts, garbage collection, binding
#   kubelet     the kubelet built from the same k8s.io/kubernetes module (cgroupfs, containerd's CRI)
#   node-ready  the kubelet registers its Node and it turns Ready
#   pod         a pod bound to that node (spec.nodeName) reaches Running with the aggregator image,
#               and its /healthz answers on the pod IP
#   streaming   `kubectl port-forward` to that pod, `kubectl logs` and `exec`: the apiserver reaches the
#               kubelet at the Node's InternalIP (the bridge's address) with a client certificate
# Everything it starts runs in its own process group and is stopped by PID; the bridge, netns,
# cgroups, mounts and iptables rules it or the kubelet created are removed at exit. Needs root.
# Usage: probe.sh AGGREGATOR_IMAGE_TAR PAUSE_IMAGE_TAR [PROXY_IMAGE_TAR [FORTIO_IMAGE_TAR
#          [EMULATOR_IMAGE_TAR [CHART_TGZ MODULE_OCI_LAYOUT ORAS [CLI]]]]]
# (make node-probe builds them all). With the proxy image the mesh pieces of mesh.sh follow the pod
# (proxy-image, istiod, inject, sidecar), with the Fortio image also traffic, with the emulator
# image the user's path of backends.sh (backends, baseline), and with the chart archive, the filter
# module's OCI layout and oras, chart.sh (helm-install, steered), with the tailweight CLI cli.sh
# (cli, replicas), then lifecycle.sh (upgrade, rollback) and leave.sh (bootstrap, opt-out, opt-in,
# uninstall).
# Exit status: 1 when a piece FAILs (a SKIP, for a binary not built, is not a failure), else 0.
# Env: TW_CACHE (binaries, as build.sh), TW_NODE_KEEP=1 keeps the temp dir (logs).
set -uo pipefail
set -m   # background jobs get their own process group: each daemon is stopped with its whole group

AGG_TAR=${1:?aggregator image archive}
PAUSE_TAR=${2:?pause image archive}
PROXY_TAR=${3:-}   # with it, the mesh pieces (mesh.sh) follow the pod
FORTIO_TAR=${4:-}  # and with it, Fortio's pod sends through both sidecars (traffic)
EMULATOR_TAR=${5:-}  # and with it, emulated backends with a slow pod (backends.sh)
CHART_TGZ=${6:-} MODULE_LAYOUT=${7:-} ORAS=${8:-}   # and the chart installed (chart.sh)
TW_CLI=${9:-}      # and the CLI against the node's pods and both aggregator replicas (cli.sh)
HERE=$(cd "$(dirname "$0")" && pwd)
TW_CACHE=${TW_CACHE:-$HOME/.cache/tailweight}
# shellcheck source=../istio/build/versions.env
source "$HERE/../istio/build/versions.env"
BIN="$TW_CACHE/istio/bin"
KUBELET="$BIN/kubelet-$K8S_VERSION"
APISERVER="$BIN/kube-apiserver-$K8S_VERSION"
ETCD="$BIN/etcd-$ETCD_VERSION"
TOKEN=tailweight-node-probe-token
WORK=$(mktemp -d /tmp/tw-node.XXXXXX)
TAG=$(basename "$WORK" | tr -dc 'a-z0-9' | tail -c 6)
BRIDGE="twn${TAG}"               # <= 15 characters
NETNS="tw-node-$TAG"
SUBNET="10.$((200 + RANDOM % 50)).$((RANDOM % 250)).0/24"
GATEWAY="${SUBNET%.0/24}.1"   # the bridge's own address (host-local's gateway, set by the cni piece)
NODE="tw-node-$TAG"
CTR_SOCK="$WORK/state/containerd.sock"
PIDS=()           # process-group leaders we started, stopped newest first
PODS_CREATED=()   # NAMESPACE/NAME of the pods we created, deleted first at exit
NAMESPACES_CREATED=()   # namespaces whose Deployments and pods are deleted first at exit
RESULTS=()

say() { printf '[node-probe] %s\n' "$*" >&2; }
result() { RESULTS+=("$(printf '%-11s %s' "$1" "$2")"); say "$1: $2"; }
# first_error LOG: the first line of LOG that reads like an error, for the result table.
first_error() { grep -m1 -iE 'error|fail|denied|not permitted|invalid|cannot' "$1" | cut -c1-300; }
ctr_() { ctr -a "$CTR_SOCK" -n k8s.io "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
api() { curl -sS --max-time 10 --cacert "$WORK/pki/ca.crt" -H "Authorization: Bearer $TOKEN" "$@"; }

# start NAME CMD...: CMD in the background, its own process group, output in $WORK/NAME.log.
start() {
  local name=$1; shift
  "$@" > "$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  say "started $name (pid $!)"
  disown "$!"   # stopped by its process group in cleanup; no job-control notices
}

# wait_until SECONDS CMD...: polls CMD once a second until it succeeds (bounded).
wait_until() {
  local n=$1 try; shift
  for ((try = 0; try < n; try++)); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}

# iptables_snapshot: every rule of the host's filter/nat/mangle tables (IPv4 and IPv6), one a line.
iptables_snapshot() {
  local cmd t
  for cmd in iptables ip6tables; do
    for t in filter nat mangle; do
      "$cmd" -t "$t" -S 2>/dev/null | sed "s/^/$cmd $t /"
    done
  done
}

# iptables_restore_snapshot BEFORE: deletes the rules, then the chains, added since BEFORE.
iptables_restore_snapshot() {
  local cmd t op rest
  iptables_snapshot | grep -vxFf "$1" | grep ' -A ' | while read -r cmd t op rest; do
    eval "$cmd -t $t -D $rest" 2>/dev/null
  done
  iptables_snapshot | grep -vxFf "$1" | grep ' -N ' | while read -r cmd t op rest; do
    "$cmd" -t "$t" -F "$rest" 2>/dev/null; "$cmd" -t "$t" -X "$rest" 2>/dev/null
  done
}

# pod_gone NAMESPACE/NAME: the kubelet finished the pod (containers killed, sandbox stopped, CNI DEL)
# and deleted it.
pod_gone() { [ "$(api -o /dev/null -w '%{http_code}' "$SERVER/api/v1/namespaces/${1%/*}/pods/${1#*/}")" = 404 ]; }
group_gone() { ! kill -0 -- "-$1"; }
namespace_has_no_pods() { [ -z "$(kc -n "$1" get pods -o name)" ]; }

cleanup() {
  set +e
  say "cleaning up"
  local i c p d ns
  for ns in "${NAMESPACES_CREATED[@]}"; do   # no controller makes a pod again: Deployments first
    kc -n "$ns" scale deployment --all --replicas=0 >/dev/null 2>&1
    kc -n "$ns" delete deployments,replicasets --all --wait=false >/dev/null 2>&1
    kc -n "$ns" delete pods --all --wait=false >/dev/null 2>&1
  done
  for p in "${PODS_CREATED[@]}"; do   # the kubelet tears each sandbox down (CNI DEL) before it goes
    api -X DELETE "$SERVER/api/v1/namespaces/${p%/*}/pods/${p#*/}" >/dev/null
  done
  for p in "${PODS_CREATED[@]}"; do
    wait_until 60 pod_gone "$p" || say "pod $p was not gone within 60 s; removing its containers with ctr"
  done
  for ns in "${NAMESPACES_CREATED[@]}"; do
    wait_until 60 namespace_has_no_pods "$ns" || say "pods of $ns left after 60 s; removing their containers with ctr"
  done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    # The kubelet goes before containerd's leftovers are removed; containerd last but the control plane.
    if [ "${PIDS[i]}" = "${CTD_PID:-}" ] && [ -S "$CTR_SOCK" ]; then
      for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$c" 2>/dev/null; done
      for c in $(ctr_ containers ls -q 2>/dev/null); do
        ctr_ tasks rm -f "$c" >/dev/null 2>&1; ctr_ containers rm "$c" 2>/dev/null
      done
    fi
    kill -TERM -- "-${PIDS[i]}" 2>/dev/null
    wait_until 15 group_gone "${PIDS[i]}" || kill -KILL -- "-${PIDS[i]}" 2>/dev/null
  done
  # Shims are their own session (containerd-shim-runc-v2 setsid()s): stop those of our state dir.
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTR_SOCK"); do kill -KILL "$p"; done
  # Mounts under the work dir (rootfs, netns, kubelet volumes), deepest first.
  awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
  ip link del "$BRIDGE" 2>/dev/null
  ip netns del "$NETNS" 2>/dev/null
  [ -f "$WORK/iptables.before" ] && iptables_restore_snapshot "$WORK/iptables.before"
  # cgroups the kubelet and containerd made (only those absent before; rmdir only removes empty ones).
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$d" ] && ! grep -qxF "$d" "$WORK/cgroups.before" 2>/dev/null && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  for d in "${FIXED_DIRS[@]}"; do  # those absent before the run, if nothing but directories and sockets
    [ -d "$d" ] && ! grep -qxF "$d" "$WORK/fixed-dirs.before" && find "$d" -depth \( -type s -o -type d -empty \) -delete
    [ -e "$d" ] && ! grep -qxF "$d" "$WORK/fixed-dirs.before" && say "left behind (not empty): $d"
  done
  if [ "${TW_NODE_KEEP:-}" = 1 ]; then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
  printf '\n== real node on this machine (%s) ==\n' "$(uname -r)"
  printf '%s\n' "${RESULTS[@]}"
  if printf '%s\n' "${RESULTS[@]}" | grep -q '^[a-z-]* *FAIL'; then exit 1; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { result root "FAIL not root: containerd, netns and cgroups need root"; exit 1; }
ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io 2>/dev/null > "$WORK/cgroups.before"
# Directories the kubelet, containerd and libcni create at fixed paths whatever their config says.
FIXED_DIRS=(/var/lib/kubelet /var/log/containers /run/containerd /var/lib/cni)
ls -d "${FIXED_DIRS[@]}" 2>/dev/null > "$WORK/fixed-dirs.before"
iptables_snapshot > "$WORK/iptables.before"
say "work dir $WORK, bridge $BRIDGE, netns $NETNS"
say "$(containerd --version | cut -d' ' -f3) / runc $(runc --version | sed -n 1p | cut -d' ' -f3) / $(iptables --version)"
say "PID 1: $(cat /proc/1/comm); cgroup controllers: $(ls /sys/fs/cgroup | tr '\n' ' ')"

# -- kernel: netns, bridge, veth, iptables nat in a netns ----------------------------------------------
kernel_probe() {
  ip netns add "$NETNS" &&
  ip link add "$BRIDGE" type bridge &&
  ip link add "${BRIDGE}a" type veth peer name "${BRIDGE}b" &&
  ip link set "${BRIDGE}b" netns "$NETNS" &&
  ip link set "${BRIDGE}a" master "$BRIDGE" &&
  ip netns exec "$NETNS" iptables -t nat -N TW_PROBE &&
  ip netns exec "$NETNS" iptables -t nat -A OUTPUT -p tcp -m owner ! --uid-owner 1337 -j TW_PROBE &&
  ip netns exec "$NETNS" iptables -t nat -A TW_PROBE -p tcp -j REDIRECT --to-ports 15001
}
if kernel_probe > "$WORK/kernel.log" 2>&1; then result kernel PASS; else result kernel "FAIL $(first_error "$WORK/kernel.log")"; fi
ip link del "${BRIDGE}a" 2>/dev/null; ip link del "$BRIDGE" 2>/dev/null; ip netns del "$NETNS" 2>/dev/null

# -- containerd ---------------------------------------------------------------------------------------
mkdir -p "$WORK"/{root,state,cni-conf,cni-ipam}
cat > "$WORK/containerd.toml" <<EOF
version = 2
root = "$WORK/root"
state = "$WORK/state"
[grpc]
  address = "$CTR_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "tailweight.local/pause:probe"
  netns_mounts_under_state_dir = true
  # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj (the sandbox's -998 fails with
  # "failed to update /proc/self/oom_score_adj: Permission denied"); clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$WORK/cni-conf"
EOF
# Pods route the Service range (--service-cluster-ip-range) to the bridge, and nothing else beyond
# it: connect() to a Service IP needs a route before a sidecar's nat REDIRECT can take the packet.
cat > "$WORK/cni-conf/10-tw.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "tw-node", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$WORK/cni-ipam",
            "routes": [{"dst": "10.96.0.0/16"}]}}]}
EOF
start containerd containerd --config "$WORK/containerd.toml"
CTD_PID=${PIDS[-1]}
if wait_until 30 ctr -a "$CTR_SOCK" version; then result containerd PASS
else result containerd "FAIL $(first_error "$WORK/containerd.log")"; exit 1; fi

# -- images -------------------------------------------------------------------------------------------
if ctr_ images import --base-name tailweight.local/pause "$PAUSE_TAR" > "$WORK/image.log" 2>&1 &&
   ctr_ images import --base-name tailweight.local/aggregator "$AGG_TAR" >> "$WORK/image.log" 2>&1; then
  AGG_IMAGE=$(ctr_ images ls -q | grep '^tailweight.local/aggregator:' | head -1)
  result image "PASS tailweight.local/pause:probe, $AGG_IMAGE"
else result image "FAIL $(first_error "$WORK/image.log")"; exit 1; fi

# -- ctr run (runc) -----------------------------------------------------------------------------------
ctr_run() {  # ctr_run SNAPSHOTTER: the aggregator's --help through runc, with the default seccomp profile
  ctr_ run --rm --seccomp --snapshotter "$1" "$AGG_IMAGE" "tw-probe-$1" \
    /usr/local/bin/tailweight-aggregator --help > "$WORK/ctr-run-$1.log" 2>&1 &&
  grep -qi usage "$WORK/ctr-run-$1.log"
}
for snap in overlayfs native; do
  if ctr_run "$snap"; then result "ctr-run" "PASS $snap snapshotter, seccomp, cgroupfs (v1), runc"
  else result "ctr-run" "FAIL ($snap) $(first_error "$WORK/ctr-run-$snap.log")"; fi
done

# -- CNI ----------------------------------------------------------------------------------------------
cni() {  # cni ADD|DEL: Debian's bridge plugin on a netns of ours, as containerd's CRI calls it
  ip netns exec "$NETNS" true 2>/dev/null || ip netns add "$NETNS"
  CNI_COMMAND=$1 CNI_CONTAINERID=probe CNI_NETNS="/var/run/netns/$NETNS" CNI_IFNAME=eth0 \
    CNI_PATH=/usr/lib/cni /usr/lib/cni/bridge < <(python3 -c '
import json,sys; c=json.load(open(sys.argv[1])); p=c["plugins"][0]; p.update(cniVersion=c["cniVersion"], name=c["name"]); print(json.dumps(p))' "$WORK/cni-conf/10-tw.conflist")
}
if cni ADD > "$WORK/cni.log" 2>&1 && ip netns exec "$NETNS" ip -4 addr show eth0 | grep -q inet; then
  result cni "PASS $(ip netns exec "$NETNS" ip -4 -o addr show eth0 | awk '{print $4}') on bridge $BRIDGE"
else result cni "FAIL $(first_error "$WORK/cni.log")"; fi
cni DEL >> "$WORK/cni.log" 2>&1; ip netns del "$NETNS" 2>/dev/null

# -- etcd + kube-apiserver ----------------------------------------------------------------------------
for b in "$ETCD" "$APISERVER"; do
  [ -x "$b" ] || { result apiserver "SKIP $b not built (make istio-bins)"; exit 0; }
done
mkdir -p "$WORK/pki" && (
  cd "$WORK/pki" &&
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1) &&
  openssl req -x509 "${ec[@]}" -nodes -days 2 -subj /CN=tw-node-ca -keyout ca.key -out ca.crt &&
  openssl req "${ec[@]}" -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr &&
  echo "subjectAltName=IP:127.0.0.1,DNS:localhost" > san.ext &&
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out apiserver.crt &&
  openssl ecparam -name prime256v1 -genkey -noout -out sa.key && openssl ec -in sa.key -pubout -out sa.pub &&
  # The kubelet's serving certificate, for the address the apiserver dials (the Node's InternalIP,
  # on the bridge), and the apiserver's client certificate to the kubelet (port-forward, exec, logs).
  openssl req "${ec[@]}" -nodes -subj "/CN=system:node:$NODE/O=system:nodes" -keyout kubelet.key -out kubelet.csr &&
  echo "subjectAltName=IP:$GATEWAY,DNS:$NODE" > kubelet.ext &&
  openssl x509 -req -in kubelet.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile kubelet.ext -out kubelet.crt &&
  openssl req "${ec[@]}" -nodes -subj "/CN=kube-apiserver-kubelet-client/O=system:masters" \
    -keyout kubelet-client.key -out kubelet-client.csr &&
  echo "extendedKeyUsage=clientAuth" > client.ext &&
  openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out kubelet-client.crt &&
  echo "$TOKEN,admin,admin,\"system:masters\"" > tokens.csv
) > "$WORK/pki.log" 2>&1
ETCD_PORT=$(free_port); PEER_PORT=$(free_port); API_PORT=$(free_port)
start etcd "$ETCD" --name tw --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-cluster "tw=http://127.0.0.1:$PEER_PORT" \
  --unsafe-no-fsync --log-level warn
SERVER="https://127.0.0.1:$API_PORT"
# The probe's kubeconfig (its CA, the admin token): kubectl, helm, the CLI, the kubelet, the
# controller-manager and the scheduler use it.
cat > "$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
current-context: tw
clusters: [{name: tw, cluster: {server: "$SERVER", certificate-authority: "$WORK/pki/ca.crt"}}]
users: [{name: admin, user: {token: $TOKEN}}]
contexts: [{name: tw, context: {cluster: tw, user: admin}}]
EOF
kc() { kubectl --kubeconfig "$WORK/kubeconfig" --request-timeout=30s "$@"; }
start kube-apiserver "$APISERVER" "--etcd-servers=http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 "--secure-port=$API_PORT" \
  "--tls-cert-file=$WORK/pki/apiserver.crt" "--tls-private-key-file=$WORK/pki/apiserver.key" \
  "--token-auth-file=$WORK/pki/tokens.csv" --authorization-mode=AlwaysAllow \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  "--service-account-key-file=$WORK/pki/sa.pub" "--service-account-signing-key-file=$WORK/pki/sa.key" \
  --api-audiences=https://kubernetes.default.svc.cluster.local,istio-ca --enable-aggregator-routing=true \
  --service-cluster-ip-range=10.96.0.0/16 \
  --endpoint-reconciler-type=none --enable-priority-and-fairness=false --profiling=false \
  "--kubelet-client-certificate=$WORK/pki/kubelet-client.crt" "--kubelet-client-key=$WORK/pki/kubelet-client.key" \
  "--kubelet-certificate-authority=$WORK/pki/ca.crt" --kubelet-preferred-address-types=InternalIP
if wait_until 90 api -f "$SERVER/readyz"; then result apiserver "PASS $K8S_VERSION on $SERVER"
else result apiserver "FAIL $(first_error "$WORK/kube-apiserver.log")"; exit 1; fi

# -- controllers: kube-controller-manager and kube-scheduler (controllers.sh) ---------------------------
# shellcheck source=controllers.sh
source "$HERE/controllers.sh"

# -- kubelet ------------------------------------------------------------------------------------------
[ -x "$KUBELET" ] || { result kubelet "SKIP $KUBELET not built (bash e2e/istio/build/build.sh kubelet)"; exit 0; }
mkdir -p "$WORK/manifests" "$WORK/kubelet" "$WORK/pod-logs"
cat > "$WORK/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The apiserver reaches the kubelet (port-forward, exec, logs) at the Node's InternalIP (--node-ip):
# the bridge's own address, with a certificate of the probe's CA; callers authenticate by a client
# certificate of that CA (the apiserver's), nobody anonymously.
address: $GATEWAY
port: $(free_port)
tlsCertFile: $WORK/pki/kubelet.crt
tlsPrivateKeyFile: $WORK/pki/kubelet.key
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$CTR_SOCK
staticPodPath: $WORK/manifests
podLogsDir: $WORK/pod-logs
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $WORK/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
EOF
# The kubelet serves on the bridge's address: the cni piece made the bridge and gave it that address.
ip -4 addr show dev "$BRIDGE" 2>/dev/null | grep -q "inet $GATEWAY/" ||
  { result kubelet "FAIL the bridge $BRIDGE has no address $GATEWAY to serve on (see the cni piece)"; exit 1; }
start kubelet "$KUBELET" --config "$WORK/kubelet.yaml" --kubeconfig "$WORK/kubeconfig" \
  --root-dir "$WORK/kubelet" --cert-dir "$WORK/kubelet/pki" --hostname-override "$NODE" --node-ip "$GATEWAY" --v=2
node_ready() {
  api "$SERVER/api/v1/nodes/$NODE" | python3 -c '
import json,sys; c={x["type"]: x["status"] for x in json.load(sys.stdin)["status"]["conditions"]}; sys.exit(c.get("Ready") != "True")'
}
KUBELET_PID=${PIDS[-1]}
registered_or_exited() { api -f "$SERVER/api/v1/nodes/$NODE" || ! kill -0 "$KUBELET_PID"; }
wait_until 60 registered_or_exited
if api -f "$SERVER/api/v1/nodes/$NODE" >/dev/null 2>&1; then result kubelet "PASS registered Node $NODE"
else result kubelet "FAIL $(grep -m1 -E '^E[0-9]|[Ff]ailed to|command failed' "$WORK/kubelet.log" | cut -c1-300)"; exit 1; fi
if wait_until 60 node_ready; then result node-ready PASS
else result node-ready "FAIL $(api "$SERVER/api/v1/nodes/$NODE" | python3 -c '
import json,sys; print([x.get("message") for x in json.load(sys.stdin)["status"]["conditions"] if x["type"]=="Ready"])')"; fi

# -- a pod bound to the node --------------------------------------------------------------------------
cat > "$WORK/pod.json" <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tw-node-probe", "namespace": "default"},
 "spec": {"nodeName": "$NODE", "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 2,
  "tolerations": [{"operator": "Exists"}],
  "containers": [{"name": "aggregator", "image": "$AGG_IMAGE", "imagePullPolicy": "Never",
    "args": ["--listen=0.0.0.0:8080", "--identity=report"]}]}}
EOF
api -f -X POST -H 'Content-Type: application/json' --data @"$WORK/pod.json" \
  "$SERVER/api/v1/namespaces/default/pods" > "$WORK/pod-create.log" 2>&1 && PODS_CREATED+=(default/tw-node-probe)
pod_field() {
  api "$SERVER/api/v1/namespaces/default/pods/tw-node-probe" | python3 -c "import json,sys; s=json.load(sys.stdin)['status']; print($1)"
}
pod_running() { [ "$(pod_field 's.get("phase")')" = Running ]; }
if wait_until 90 pod_running; then
  POD_IP=$(pod_field 's.get("podIP", "")')
  if wait_until 20 curl -sf --max-time 2 -o "$WORK/healthz.log" "http://$POD_IP:8080/healthz"; then
    result pod "PASS Running, IP $POD_IP, /healthz answered"
  else result pod "FAIL Running at $POD_IP but /healthz did not answer: $(curl -sS --max-time 2 "http://$POD_IP:8080/healthz" 2>&1)"; fi
else
  result pod "FAIL $(pod_field 's.get("phase"), [c.get("state") for c in s.get("containerStatuses", [])], s.get("conditions")' 2>&1 | cut -c1-400)"
fi

# -- streaming: the apiserver reaches the kubelet (port-forward, logs) --------------------------------
# port_forward NAME NAMESPACE POD PORT: `kubectl port-forward` in the background as NAME (apiserver ->
# the kubelet at the Node's InternalIP -> containerd's stream server -> the pod's netns); sets PF_ADDR
# to its local address and PF_PID to its process group.
port_forward() {
  start "$1" kc -n "$2" port-forward --address 127.0.0.1 "pod/$3" ":$4"
  PF_PID=${PIDS[-1]}
  wait_until 20 grep -q '^Forwarding from 127.0.0.1:' "$WORK/$1.log" || return 1
  PF_ADDR=$(sed -n 's/^Forwarding from \(127\.0\.0\.1:[0-9]*\) .*/\1/p' "$WORK/$1.log" | head -1)
}
stop_group() { [ "${1:-0}" -gt 1 ] || return 0; kill -TERM -- "-$1" 2>/dev/null; wait_until 10 group_gone "$1"; }
if port_forward pf-probe default tw-node-probe 8080 && curl -sf --max-time 5 -o /dev/null "http://$PF_ADDR/healthz" &&
   kc -n default logs tw-node-probe > "$WORK/logs-probe.log" 2>&1 &&
   kc -n default exec tw-node-probe -- /usr/local/bin/tailweight-aggregator --help > "$WORK/exec-probe.log" 2>&1 &&
   grep -qi usage "$WORK/exec-probe.log"; then
  result streaming "PASS kubectl port-forward pod/tw-node-probe :8080 -> $PF_ADDR, /healthz answered; kubectl logs read; kubectl exec ran the aggregator's --help"
else result streaming "FAIL $(first_error "$WORK/pf-probe.log") $(first_error "$WORK/logs-probe.log" 2>/dev/null) $(first_error "$WORK/exec-probe.log" 2>/dev/null)"; fi
stop_group "$PF_PID"

# -- the mesh: istiod's injection on pods of this node (mesh.sh) --------------------------------------
if [ -n "$PROXY_TAR" ]; then
  # shellcheck source=mesh.sh
  source "$HERE/mesh.sh"
fi
