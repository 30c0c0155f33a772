#!/usr/bin/env bash
# Packs the static aggregator binary (make aggregator-static) as a container image without a Docker
# engine: one layer holding /usr/local/bin/tailweight-aggregator and nothing else (no shell, no libc:
# the binary is static, speaks plain HTTP and needs no CA certificates), run as the non-root user
# 65532:65532 (the uid the chart's Deployment and aggregator/Dockerfile's distroless base use). The
# image goes into an OCI image layout directory (scripts/oci-lib.sh says how to push it) and, as a
# tar of that directory, into ARCHIVE (an OCI archive: what `docker load` (Docker 25+),
# `podman load` and `ctr images import` take).
# Usage: pack-aggregator-oci.sh ORAS BINARY LAYOUT_DIR TAG ARCHIVE
set -euo pipefail
source "$(dirname "$0")/oci-lib.sh"

oras=$1 binary=$2 layout=$3 tag=$4 archive=$5
[ -s "$binary" ] || { echo "pack-aggregator-oci.sh: $binary is missing (make aggregator-static)" >&2; exit 1; }
if ldd "$binary" 2>&1 | grep -q '=>'; then
  echo "pack-aggregator-oci.sh: $binary is dynamically linked; the image has no libc" >&2; exit 1
fi
# The image's architecture, from the ELF header's e_machine (bytes 18-19, little-endian).
case $(od -An -tx1 -j18 -N2 "$binary" | tr -d ' \n') in
  3e00) arch=amd64 ;;
  b700) arch=arm64 ;;
  *) echo "pack-aggregator-oci.sh: $binary: not an x86-64 or AArch64 ELF executable" >&2; exit 1 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
install -d -m 0755 "$work/root/usr/local/bin"
install -m 0755 "$binary" "$work/root/usr/local/bin/tailweight-aggregator"
diff_id=$(oci_layer "$work" aggregator "$work/root" usr)
# The same user, entrypoint, default arguments and port as aggregator/Dockerfile.
cat > "$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"User":"65532:65532","Entrypoint":["/usr/local/bin/tailweight-aggregator"],
  "Cmd":["--listen=0.0.0.0:8080"],"ExposedPorts":{"8080/tcp":{}},"Env":["PATH=/usr/local/bin"],
  "Labels":{"org.opencontainers.image.title":"tailweight-aggregator","org.opencontainers.image.version":"$tag",
   "org.opencontainers.image.licenses":"Apache-2.0"}},
 "rootfs":{"type":"layers","diff_ids":["$diff_id"]}}
JSON
digest=$(oci_push_layout "$oras" "$layout" "$tag" "$work" aggregator tailweight-aggregator)
oci_layout_archive "$layout" "$archive"
echo "$layout:$tag $digest ($arch; $archive, $(stat -c %s "$archive") bytes)"
