#!/usr/bin/env bash
# Packs the filter as a Wasm OCI image Istio can pull (WasmPlugin url: oci://...), in the "compat"
# variant of the Wasm image spec that Istio's agent reads
# (https://github.com/solo-io/wasm/blob/master/spec/spec-compat.md): an ordinary OCI image whose
# single application/vnd.oci.image.layer.v1.tar+gzip layer holds plugin.wasm. oras assembles the
# image into an OCI image layout directory (no registry needed); push it with
#   oras cp --from-oci-layout <layout>:<tag> <registry>/<repository>:<tag>
# Reproducible: fixed file metadata and timestamps, so the digest depends on the module bytes only.
# Usage: pack.sh ORAS WASM LAYOUT_DIR TAG
set -euo pipefail

oras=$1 wasm=$2 layout=$3 tag=$4
[ -s "$wasm" ] || { echo "pack.sh: $wasm is missing (make wasm)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$wasm" "$work/plugin.wasm"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=0444 \
    -C "$work" -cf "$work/plugin.tar" plugin.wasm
gzip -9n < "$work/plugin.tar" > "$work/plugin.tar.gz"
# The image config names the uncompressed layer (diff_id), as every OCI image's does.
diff_id="sha256:$(sha256sum "$work/plugin.tar" | cut -d' ' -f1)"
printf '{"architecture":"wasm","os":"wasip1","rootfs":{"type":"layers","diff_ids":["%s"]},"config":{}}' \
    "$diff_id" > "$work/config.json"

rm -rf "$layout"
mkdir -p "$(dirname "$layout")"
layout=$(cd "$(dirname "$layout")" && pwd)/$(basename "$layout")
(cd "$work" && "$oras" push --no-tty --oci-layout "$layout:$tag" \
    --config config.json:application/vnd.oci.image.config.v1+json \
    --annotation org.opencontainers.image.created=1970-01-01T00:00:00Z \
    --annotation org.opencontainers.image.title=tailweight-filter \
    plugin.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip >/dev/null)
rmdir "$layout/ingest" 2>/dev/null || true  # oras's empty scratch dir
digest=$("$oras" resolve --oci-layout "$layout:$tag")
echo "$layout:$tag $digest ($(stat -c %s "$wasm") bytes of Wasm)"
