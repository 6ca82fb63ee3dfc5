#!/usr/bin/env bash
# Builds the CNI host-local IPAM plugin the lab/cni tests run, from the
# version of github.com/containernetworking/plugins pinned in
# tools/cni/go.mod. The binary goes to a cache directory outside the
# repository, named by that version and the Go toolchain; when it already
# holds it, nothing is built. Prints the directory on stdout (the tests read
# the binary from GHOSTWATCH_CNI_BIN, that directory's host-local).
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
bins=(host-local)

have=1
for b in "${bins[@]}"; do [ -x "$dir/$b" ] || have=0; done
if [ "$have" = 1 ]; then
  echo "cni-plugins: $dir holds the CNI plugins $plugins already" >&2
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$plugins"
export CGO_ENABLED=0
for b in "${bins[@]}"; do
  start=$SECONDS
  echo "cni-plugins: building $b $plugins ..." >&2
  go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "github.com/containernetworking/plugins/plugins/ipam/$b"
  echo "cni-plugins: $b built in $((SECONDS - start))s" >&2
done
for b in "${bins[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
