#!/usr/bin/env bash
# Packs the filter as a Wasm OCI image Istio can pull (WasmPlugin url: oci://...), in the "compat"
# variant of the Wasm image spec that Istio's agent reads
# (https://github.com/solo-io/wasm/blob/master/spec/spec-compat.md): an ordinary OCI image whose
# single application/vnd.oci.image.layer.v1.tar+gzip layer holds plugin.wasm, in an OCI image
# layout directory (scripts/oci-lib.sh says how to push it).
# Usage: pack-wasm-oci.sh ORAS WASM LAYOUT_DIR TAG
set -euo pipefail
source "$(dirname "$0")/oci-lib.sh"

oras=$1 wasm=$2 layout=$3 tag=$4
[ -s "$wasm" ] || { echo "pack-wasm-oci.sh: $wasm is missing (make wasm)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/root"
install -m 0444 "$wasm" "$work/root/plugin.wasm"
diff_id=$(oci_layer "$work" plugin "$work/root" plugin.wasm)
printf '{"architecture":"wasm","os":"wasip1","rootfs":{"type":"layers","diff_ids":["%s"]},"config":{}}' \
    "$diff_id" > "$work/config.json"
digest=$(oci_push_layout "$oras" "$layout" "$tag" "$work" plugin tailweight-filter)
echo "$layout:$tag $digest ($(stat -c %s "$wasm") bytes of Wasm)"
