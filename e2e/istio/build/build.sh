#!/usr/bin/env bash
# Builds the Istio e2e control plane (etcd, kube-apiserver, pilot-discovery, pilot-agent), and istioctl
# (for `istioctl analyze` of wasmplugin/), from the pinned wrapper modules beside this script, through the Go module proxy only, into
# $TW_CACHE/istio/bin/<name>-<version>. Binaries already there are skipped, so reruns are instant and
# a version bump in versions.env (+ go.mod/go.sum) rebuilds just that binary. Also extracts the Istio
# CRDs (istio.io/api) and pilot-agent's Envoy bootstrap template (istio.io/istio) to $TW_CACHE/istio/.
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

# build NAME VERSION DIR PACKAGE: go build PACKAGE in wrapper module DIR to $BIN/NAME-VERSION.
build() {
  local name=$1 version=$2 dir=$3 pkg=$4 out="$BIN/$1-$2"
  if [ -x "$out" ]; then log "$name $version: cached ($out)"; return; fi
  log "$name $version: building $pkg (cold: several minutes) ..."
  local start=$SECONDS
  (cd "$HERE/$dir" && go build -trimpath -ldflags='-s -w' -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"   # atomic: an interrupted build never leaves a half binary under the final name
  log "$name $version: built in $((SECONDS - start)) s, $(($(stat -c %s "$out") / 1048576)) MB"
}

# extract NAME MODULE VERSION PATH OUT: copy PATH from the pinned module's source to OUT (cached).
extract() {
  local name=$1 module=$2 version=$3 path=$4 out=$5 dir
  if [ -s "$out" ]; then log "$name $version: cached ($out)"; return; fi
  dir=$(cd "$HERE/istio" && go mod download -json "$module@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp "$dir/$path" "$out.tmp"
  mv "$out.tmp" "$out"
  log "$name $version: $out"
}

targets=${*:-etcd kube-apiserver pilot-discovery pilot-agent istioctl crds bootstrap registry}
total=$SECONDS
for t in $targets; do
  case $t in
    etcd)
      require_version etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
      build etcd "$ETCD_VERSION" etcd go.etcd.io/etcd/server/v3 ;;
    kube-apiserver)
      require_version kube-apiserver k8s.io/kubernetes "$K8S_VERSION"
      build kube-apiserver "$K8S_VERSION" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver ;;
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
      extract "istio CRDs" istio.io/api "$ISTIO_API_VERSION" \
        kubernetes/customresourcedefinitions.gen.yaml "$TW_CACHE/istio/crds-$ISTIO_API_VERSION.yaml" ;;
    bootstrap)  # pilot-agent's Envoy bootstrap template (istio-proxy images ship it; pip Envoy doesn't)
      require_version istio istio.io/istio "$ISTIO_VERSION"
      extract "envoy bootstrap template" istio.io/istio "$ISTIO_VERSION" \
        tools/packaging/common/envoy_bootstrap.json "$TW_CACHE/istio/envoy_bootstrap-$ISTIO_VERSION.json" ;;
    registry)  # a loopback OCI registry (go-containerregistry) for the oci:// WasmPlugin test
      require_version registry github.com/google/go-containerregistry "$GGCR_VERSION"
      build registry "$GGCR_VERSION" registry tailweight.local/e2e/istio/build/registry ;;
    *) log "unknown target $t (etcd kube-apiserver pilot-discovery pilot-agent istioctl crds bootstrap registry)"; exit 2 ;;
  esac
done
log "done in $((SECONDS - total)) s: $BIN"
