# Shared by the OCI image packers (pack-wasm-oci.sh, pack-aggregator-oci.sh); source it.
# Images are reproducible: fixed file owners and timestamps, so a digest depends on the bytes and
# modes of the files packed only. oras assembles an OCI image layout directory (no registry, no
# Docker engine); push one with
#   oras cp --from-oci-layout <layout>:<tag> <registry>/<repository>:<tag>

# oci_layer WORK LAYER DIR MEMBER...: the MEMBERs of DIR (modes as on disk) as WORK/LAYER.tar and
# WORK/LAYER.tar.gz; prints the layer's diff_id (the digest of the uncompressed tar, which the
# image config names).
oci_layer() {
  local work=$1 layer=$2 dir=$3
  shift 3
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      -C "$dir" -cf "$work/$layer.tar" "$@"
  gzip -9n < "$work/$layer.tar" > "$work/$layer.tar.gz"
  echo "sha256:$(sha256sum "$work/$layer.tar" | cut -d' ' -f1)"
}

# oci_push_layout ORAS LAYOUT TAG WORK LAYER TITLE: the image of config WORK/config.json and the
# single layer WORK/LAYER.tar.gz (its file name becomes the layer's title annotation) into the OCI
# image layout directory LAYOUT (replaced) as TAG; prints the manifest digest.
oci_push_layout() {
  local oras=$1 layout=$2 tag=$3 work=$4 layer=$5 title=$6
  rm -rf "$layout"
  mkdir -p "$(dirname "$layout")"
  layout=$(cd "$(dirname "$layout")" && pwd)/$(basename "$layout")
  (cd "$work" && "$oras" push --no-tty --oci-layout "$layout:$tag" \
      --config config.json:application/vnd.oci.image.config.v1+json \
      --annotation org.opencontainers.image.created=1970-01-01T00:00:00Z \
      --annotation "org.opencontainers.image.title=$title" \
      "$layer.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip" >/dev/null)
  rmdir "$layout/ingest" 2>/dev/null || true  # oras's empty scratch dir
  "$oras" resolve --oci-layout "$layout:$tag"
}

# oci_layout_archive LAYOUT ARCHIVE: the layout directory as one tar (reproducible): an OCI
# archive, what `docker load` (Docker 25+), `podman load` and `ctr images import` take.
oci_layout_archive() {
  mkdir -p "$(dirname "$2")"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$2" .
}
