#!/usr/bin/env bash
# Gathers one release's artifacts into OUT_DIR, after checking that each carries VERSION, and writes
# their SHA256SUMS:
#   tailweight-filter-VERSION.oci.tar       the filter as a Wasm OCI image (layout tar; make oci-wasm)
#   tailweight-aggregator-VERSION.oci.tar   the aggregator's image (layout tar; make image-aggregator)
#   tailweight-VERSION.tgz                  the Helm chart (make chart-package)
#   tailweight-VERSION-TARGET               the CLI, static (TARGET: its Rust target triple)
# Push an image with `oras cp --from-oci-layout`, after `tar -xf` of its archive into a directory.
# Usage: release.sh VERSION OUT_DIR FILTER_LAYOUT AGGREGATOR_LAYOUT CHART_TGZ CLI_BINARY TARGET
set -euo pipefail
source "$(dirname "$0")/oci-lib.sh"

version=$1 out=$2 filter_layout=$3 aggregator_layout=$4 chart=$5 cli=$6 target=$7
fail() { echo "release.sh: $*" >&2; exit 1; }

# The tag an OCI layout's only image is named by (index.json's ref.name annotation).
layout_tag() {
  sed -n 's/.*"org.opencontainers.image.ref.name":"\([^"]*\)".*/\1/p' "$1/index.json"
}
for layout in "$filter_layout" "$aggregator_layout"; do
  [ -s "$layout/index.json" ] || fail "$layout/index.json is missing"
  [ "$(layout_tag "$layout")" = "$version" ] || fail "$layout: tagged '$(layout_tag "$layout")', not $version"
done
[ -s "$chart" ] || fail "$chart is missing"
chart_yaml=$(tar -xzOf "$chart" tailweight/Chart.yaml)
for key in version appVersion; do
  got=$(sed -n "s/^$key: \"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" <<< "$chart_yaml")
  [ "$got" = "$version" ] || fail "$chart: $key is '$got', not $version"
done
[ -x "$cli" ] || fail "$cli is missing"
[ "$("$cli" --version)" = "tailweight $version" ] || fail "$cli --version: '$("$cli" --version)', not tailweight $version"
if ldd "$cli" 2>&1 | grep -q '=>'; then fail "$cli is dynamically linked"; fi

artifacts=("tailweight-filter-$version.oci.tar" "tailweight-aggregator-$version.oci.tar"
           "tailweight-$version.tgz" "tailweight-$version-$target")
rm -rf "$out"
mkdir -p "$out"
oci_layout_archive "$filter_layout" "$out/${artifacts[0]}"
oci_layout_archive "$aggregator_layout" "$out/${artifacts[1]}"
cp "$chart" "$out/${artifacts[2]}"
install -m 0755 "$cli" "$out/${artifacts[3]}"
(cd "$out" && sha256sum -- "${artifacts[@]}" > SHA256SUMS && cat SHA256SUMS)
echo "$out: ${#artifacts[@]} artifacts of tailweight $version and SHA256SUMS"
