#!/usr/bin/env bash
# Builds the Istio e2e control plane (etcd, kube-apiserver, pilot-discovery, pilot-agent), istioctl
# (for `istioctl analyze` of the chart), Helm (charts/tailweight) and a loopback OCI registry, from the
# pinned wrapper modules beside this script, through the Go module proxy only, into
# $TW_CACHE/istio/bin/<name>-<version>. Binaries already there are skipped, so reruns are instant and
# a version bump in versions.env (+ go.mod/go.sum) rebuilds just that binary. Also extracts the Istio
# CRDs (istio.io/api), pilot-agent's Envoy bootstrap template (istio.io/istio) and the Prometheus
# Operator's PodMonitor/ServiceMonitor CRDs to $TW_CACHE/istio/.
# Usage: build.sh [target...]   (default: all targets, in order)
# Cold: ~20 min on 2 cores with ~7 GB of Go module + build cache (see README.md for measured times).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TW_CACHE=${TW_CACHE:-$HOME/.cache/tailweight}
BIN="$TW_CACHE/istio/bin"
# shellcheck source=versions.env
source "$HERE/versions.env"
# 2 cores: two compile jobs at a time; the modules must come from go.sum exactly (no edits).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=2 -mod=readonly"
export CGO_ENABLED=0
mkdir -p "$BIN"

log() { printf '[istio-build] %s\n' "$*" >&2; }

# require_version DIR MODULE VERSION: fail early when a wrapper go.mod and versions.env disagree.
require_version() {
  local have
  have=$(cd "$HERE/$1" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2")
  [ "$have" = "$3" ] || { log "ERROR: $1/go.mod has $2 $have, versions.env says $3"; exit 1; }
}

# build NAME VERSION DIR PACKAGE [LDFLAGS]: go build PACKAGE in wrapper module DIR to $BIN/NAME-VERSION.
build() {
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-} out="$BIN/$1-$2"
  if [ -x "$out" ]; then log "$name $version: cached ($out)"; return; fi
  log "$name $version: building $pkg (cold: several minutes) ..."
  local start=$SECONDS
  (cd "$HERE/$dir" && go build -trimpath -ldflags="-s -w $ldflags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"   # atomic: an interrupted build never leaves a half binary under the final name
  log "$name $version: built in $((SECONDS - start)) s, $(($(stat -c %s "$out") / 1048576)) MB"
}

# extract NAME WRAPPER MODULE VERSION OUT PATH...: the files PATH... of the pinned module's source
# (downloaded in wrapper module WRAPPER, which checks it against that go.sum), concatenated to OUT
# (cached).
extract() {
  local name=$1 wrapper=$2 module=$3 version=$4 out=$5 dir path
  shift 5
  if [ -s "$out" ]; then log "$name $version: cached ($out)"; return; fi
  dir=$(cd "$HERE/$wrapper" && go mod download -json "$module@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  : > "$out.tmp"
  for path in "$@"; do cat "$dir/$path" >> "$out.tmp"; done
  mv "$out.tmp" "$out"
  log "$name $version: $out"
}

# helm_ldflags: Helm's version, and the Kubernetes version it assumes without a cluster (`helm
# template`, `helm lint`), derived from its client-go as Helm's own Makefile does (v0.37 -> 1.37).
helm_ldflags() {
  local client_go minor
  client_go=$(cd "$HERE/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)
  minor=$(echo "$client_go" | cut -d. -f2)
  printf '%s ' "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.metadata=" \
    "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1" "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
    "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1" "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
}

ALL="etcd kube-apiserver pilot-discovery pilot-agent istioctl crds bootstrap previous registry helm monitoring-crds"
targets=${*:-$ALL}
total=$SECONDS
for t in $targets; do
  case $t in
    etcd)
      require_version etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
      build etcd "$ETCD_VERSION" etcd go.etcd.io/etcd/server/v3 ;;
    kube-apiserver)
      require_version kube-apiserver k8s.io/kubernetes "$K8S_VERSION"
      build kube-apiserver "$K8S_VERSION" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver ;;
    kubelet)  # the real node (e2e/node, docs/real-node.md); opt-in, not in ALL: `build.sh kubelet`
      require_version kubelet k8s.io/kubernetes "$K8S_VERSION"
      build kubelet "$K8S_VERSION" kubelet k8s.io/kubernetes/cmd/kubelet ;;
    kube-controller-manager)  # the real node's Deployments, EndpointSlices, ServiceAccounts; opt-in, not in ALL
      require_version kube-controller-manager k8s.io/kubernetes "$K8S_VERSION"
      build kube-controller-manager "$K8S_VERSION" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager ;;
    kube-scheduler)  # binds the real node's Deployment pods to it; opt-in, not in ALL
      require_version kube-scheduler k8s.io/kubernetes "$K8S_VERSION"
      build kube-scheduler "$K8S_VERSION" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler ;;
    pilot-discovery)
      require_version istio istio.io/istio "$ISTIO_VERSION"
      build pilot-discovery "$ISTIO_VERSION" istio istio.io/istio/pilot/cmd/pilot-discovery ;;
    pilot-agent)
      require_version istio istio.io/istio "$ISTIO_VERSION"
      build pilot-agent "$ISTIO_VERSION" istio istio.io/istio/pilot/cmd/pilot-agent ;;
    istioctl)  # same module and version as istiod: its analyzers match the control plane under test
      require_version istio istio.io/istio "$ISTIO_VERSION"
      build istioctl "$ISTIO_VERSION" istio istio.io/istio/istioctl/cmd/istioctl ;;
    crds)  # Istio's CRDs ship inside the istio.io/api module
      require_version istio istio.io/api "$ISTIO_API_VERSION"
      extract "istio CRDs" istio istio.io/api "$ISTIO_API_VERSION" "$TW_CACHE/istio/crds-$ISTIO_API_VERSION.yaml" \
        kubernetes/customresourcedefinitions.gen.yaml ;;
    bootstrap)  # pilot-agent's Envoy bootstrap template (istio-proxy images ship it; pip Envoy doesn't)
      require_version istio istio.io/istio "$ISTIO_VERSION"
      extract "envoy bootstrap template" istio istio.io/istio "$ISTIO_VERSION" \
        "$TW_CACHE/istio/envoy_bootstrap-$ISTIO_VERSION.json" tools/packaging/common/envoy_bootstrap.json ;;
    previous)  # the previous Istio line's istiod, pilot-agent, CRDs and bootstrap (the tested range)
      require_version istio-previous istio.io/istio "$ISTIO_PREVIOUS_VERSION"
      require_version istio-previous istio.io/api "$ISTIO_PREVIOUS_API_VERSION"
      build pilot-discovery "$ISTIO_PREVIOUS_VERSION" istio-previous istio.io/istio/pilot/cmd/pilot-discovery
      build pilot-agent "$ISTIO_PREVIOUS_VERSION" istio-previous istio.io/istio/pilot/cmd/pilot-agent
      extract "istio CRDs" istio-previous istio.io/api "$ISTIO_PREVIOUS_API_VERSION" \
        "$TW_CACHE/istio/crds-$ISTIO_PREVIOUS_API_VERSION.yaml" kubernetes/customresourcedefinitions.gen.yaml
      extract "envoy bootstrap template" istio-previous istio.io/istio "$ISTIO_PREVIOUS_VERSION" \
        "$TW_CACHE/istio/envoy_bootstrap-$ISTIO_PREVIOUS_VERSION.json" tools/packaging/common/envoy_bootstrap.json ;;
    istiod-chart)  # the real node's injector (e2e/node/mesh.sh): istiod's Helm chart, opt-in, not in ALL
      require_version istio istio.io/istio "$ISTIO_VERSION"
      out="$TW_CACHE/istio/istiod-chart-$ISTIO_VERSION"
      if [ -d "$out" ]; then log "istiod chart: cached ($out)"; else
        dir=$(cd "$HERE/istio" && go mod download -json "istio.io/istio@$ISTIO_VERSION" \
              | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
        cp -r "$dir/manifests/charts/istio-control/istio-discovery" "$out.tmp" && chmod -R u+w "$out.tmp"
        mv "$out.tmp" "$out"; log "istiod chart: $out"
      fi ;;
    registry)  # a loopback OCI registry (go-containerregistry) for the oci:// WasmPlugin test
      require_version registry github.com/google/go-containerregistry "$GGCR_VERSION"
      build registry "$GGCR_VERSION" registry tailweight.local/e2e/istio/build/registry ;;
    helm)  # charts/tailweight: lint, template, package, push and install (mk/chart.mk, the e2e)
      require_version helm helm.sh/helm/v3 "$HELM_VERSION"
      build helm "$HELM_VERSION" helm helm.sh/helm/v3/cmd/helm "$(helm_ldflags)" ;;
    monitoring-crds)  # the PodMonitor and ServiceMonitor CRDs the chart's monitors are checked against
      require_version prometheus-operator github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION"
      extract "prometheus-operator CRDs" prometheus-operator github.com/prometheus-operator/prometheus-operator \
        "$PROMETHEUS_OPERATOR_VERSION" "$TW_CACHE/istio/monitoring-crds-$PROMETHEUS_OPERATOR_VERSION.yaml" \
        example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml \
        example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml ;;
    *) log "unknown target $t ($ALL kubelet kube-controller-manager kube-scheduler istiod-chart)"; exit 2 ;;
  esac
done
log "done in $((SECONDS - total)) s: $BIN"
