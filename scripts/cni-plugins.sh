#!/usr/bin/env bash
# Builds the CNI plugins the lab runs, from the version of
# github.com/containernetworking/plugins pinned in tools/cni/go.mod: the
# host-local IPAM plugin the lab/cni tests run, and the plugins a kind node
# chains for its pods (bridge, ptp, loopback, portmap) that the real node's
# container runtime calls. The binaries go to a cache directory outside the
# repository, named by that version and the Go toolchain; only those it
# does not hold yet are built. Prints the directory on stdout (the tests read
# it from GHOSTWATCH_CNI_BIN).
#
# Usage: scripts/cni-plugins.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version is made.
# From empty module and build caches it takes ~15 seconds on 2 cores (the
# module download included) and leaves ~20 MB of modules and ~80 MB of
# build cache.
set -euo pipefail
cd "$(dirname "$0")/../tools/cni"

plugins=$(go list -m -f '{{.Version}}' github.com/containernetworking/plugins)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/cni-$plugins-$goversion"
# Each plugin's package, under the module.
declare -A pkgs=([host-local]=ipam/host-local [bridge]=main/bridge [ptp]=main/ptp [loopback]=main/loopback [portmap]=meta/portmap)

missing=()
for b in host-local bridge ptp loopback portmap; do [ -x "$dir/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} = 0 ]; then
  echo "cni-plugins: $dir holds the CNI plugins $plugins already" >&2
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$plugins"
export CGO_ENABLED=0
for b in "${missing[@]}"; do
  start=$SECONDS
  echo "cni-plugins: building $b $plugins ..." >&2
  go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "github.com/containernetworking/plugins/plugins/${pkgs[$b]}"
  echo "cni-plugins: $b built in $((SECONDS - start))s" >&2
done
for b in "${missing[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
