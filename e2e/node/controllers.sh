# The control plane's controllers on the real node (issue 40), sourced by probe.sh once the apiserver
# is ready (it uses probe.sh's WORK, SERVER, BIN, K8S_VERSION, api, kc, start, result, wait_until,
# free_port):
#   controllers  kube-controller-manager and kube-scheduler, both built from the pinned
#                k8s.io/kubernetes module (e2e/istio/build/build.sh), beside the apiserver on
#                127.0.0.1 with the probe's kubeconfig, leader election off. The controller-manager
#                runs only the controllers the e2e needs (CONTROLLERS: the node's not-ready taint,
#                which the apiserver's TaintNodesByCondition admission puts on every new Node, taken
#                off once it is Ready; Deployments make ReplicaSets make pods, Services get
#                EndpointSlices, namespaces their `default` ServiceAccount and kube-root-ca.crt,
#                deletions cascade by garbage collection), signing service account tokens with the
#                apiserver's key; the scheduler binds pods to the node. PASS
#                once both answer /healthz and the controller made the ServiceAccount default/default
#                (the apiserver's ServiceAccount admission needs it for every pod).
# shellcheck shell=bash

CONTROLLER_MANAGER="$BIN/kube-controller-manager-$K8S_VERSION"
SCHEDULER="$BIN/kube-scheduler-$K8S_VERSION"
CONTROLLERS=node-lifecycle-controller,deployment-controller,replicaset-controller,endpointslice-controller,endpointslice-mirroring-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,root-ca-certificate-publisher-controller

# healthy PORT: the component serving on 127.0.0.1:PORT (its own self-signed certificate) answers
# /healthz with ok (an always-allowed path: no credentials).
healthy() { [ "$(curl -sk --max-time 3 "https://127.0.0.1:$1/healthz")" = ok ]; }
default_service_account() { api -f "$SERVER/api/v1/namespaces/default/serviceaccounts/default"; }

for b in "$CONTROLLER_MANAGER" "$SCHEDULER"; do
  [ -x "$b" ] || { result controllers "SKIP $b not built (make node-bins)"; exit 0; }
done
KCM_PORT=$(free_port); SCHEDULER_PORT=$(free_port)
start kube-controller-manager "$CONTROLLER_MANAGER" "--kubeconfig=$WORK/kubeconfig" \
  "--controllers=$CONTROLLERS" --leader-elect=false --use-service-account-credentials=false \
  "--service-account-private-key-file=$WORK/pki/sa.key" "--root-ca-file=$WORK/pki/ca.crt" \
  --bind-address=127.0.0.1 "--secure-port=$KCM_PORT" "--cert-dir=$WORK/kcm-pki" --profiling=false --v=2
cat > "$WORK/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$WORK/kubeconfig"}
leaderElection: {leaderElect: false}
EOF
start kube-scheduler "$SCHEDULER" "--config=$WORK/scheduler.yaml" --bind-address=127.0.0.1 \
  "--secure-port=$SCHEDULER_PORT" "--cert-dir=$WORK/scheduler-pki" --profiling=false --v=2
if wait_until 90 healthy "$KCM_PORT" && wait_until 30 default_service_account; then
  if wait_until 60 healthy "$SCHEDULER_PORT"; then
    result controllers "PASS kube-controller-manager $K8S_VERSION (${CONTROLLERS//-controller/}), ServiceAccount default/default made by it; kube-scheduler $K8S_VERSION healthy"
  else result controllers "FAIL kube-scheduler: $(first_error "$WORK/kube-scheduler.log")"; exit 1; fi
else result controllers "FAIL kube-controller-manager: healthz $(curl -sk --max-time 3 "https://127.0.0.1:$KCM_PORT/healthz" 2>&1 | cut -c1-100), $(first_error "$WORK/kube-controller-manager.log")"; exit 1; fi
