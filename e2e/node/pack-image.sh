#!/usr/bin/env bash
# Packs one static binary as a container image without a Docker engine (as
# scripts/pack-aggregator-oci.sh does for the aggregator): one layer holding /usr/local/bin/NAME and
# nothing else, run as the non-root user 65532:65532 with that binary as the entrypoint. Writes the
# OCI archive ARCHIVE (what `ctr images import` takes). The real-node probe (e2e/node/probe.sh) packs
# its pod sandbox process (e2e/node/pause) this way.
# Usage: pack-image.sh ORAS BINARY NAME TAG ARCHIVE
set -euo pipefail
source "$(dirname "$0")/../../scripts/oci-lib.sh"

oras=$1 binary=$2 name=$3 tag=$4 archive=$5
if ldd "$binary" 2>&1 | grep -q '=>'; then
  echo "pack-image.sh: $binary is dynamically linked; the image has no libc" >&2; exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
install -d -m 0755 "$work/root/usr/local/bin"
install -m 0755 "$binary" "$work/root/usr/local/bin/$name"
diff_id=$(oci_layer "$work" "$name" "$work/root" usr)
cat > "$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"User":"65532:65532","Entrypoint":["/usr/local/bin/$name"],"Env":["PATH=/usr/local/bin"]},
 "rootfs":{"type":"layers","diff_ids":["$diff_id"]}}
JSON
oci_push_layout "$oras" "$work/layout" "$tag" "$work" "$name" "$name" >/dev/null
oci_layout_archive "$work/layout" "$archive"
