#!/usr/bin/env bash
# Builds the Calico components the Calico IPAM tests run against the real
# control plane, from the monorepo commit pinned in tools/calico/go.mod:
# calico-kube-controllers (kube-controllers/cmd/kube-controllers), calicoctl
# (calicoctl/calicoctl) and calico-ipam (cni-plugin/cmd/calico, which runs
# as the IPAM plugin when its file is named calico-ipam). The binaries go
# to a cache directory outside the repository, named by the Calico release
# and the Go version; when it already holds them, nothing is built. Prints
# the directory on stdout (the tests read it from GHOSTWATCH_CALICO_BIN).
#
# Usage: scripts/calico-binaries.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version set is made.
# From empty module and build caches it takes ~8 minutes on 2 shared cores
# (calico-kube-controllers 455 s with the module download, then calicoctl
# and calico-ipam ~20 s each) and leaves ~540 MB of modules and ~1.1 GB of
# build cache.
set -euo pipefail
cd "$(dirname "$0")/../tools/calico"

# The release is the comment on the require line: the module proxy knows
# the commit only by its pseudo-version.
release=$(awk '$1 == "require" && $2 == "github.com/projectcalico/calico" { print $NF }' go.mod)
case "$release" in
v3.*) ;;
*)
  echo "calico-binaries: no Calico release named on tools/calico/go.mod's require line" >&2
  exit 1
  ;;
esac
version=$(go list -m -f '{{.Version}}' github.com/projectcalico/calico)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/calico-$release-$goversion"
bins=(calico-kube-controllers calicoctl calico-ipam)

have=1
for b in "${bins[@]}"; do [ -x "$dir/$b" ] || have=0; done
if [ "$have" = 1 ]; then
  echo "calico-binaries: $dir holds calico $release already" >&2
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0
rev=${version##*-}
m=github.com/projectcalico/calico

start=$SECONDS
echo "calico-binaries: building calico-kube-controllers $release ($version) ..." >&2
go build -trimpath -ldflags "-s -w -X main.VERSION=$release" \
  -o "$tmp/calico-kube-controllers" "$m/kube-controllers/cmd/kube-controllers"
echo "calico-binaries: calico-kube-controllers built in $((SECONDS - start))s" >&2

start=$SECONDS
echo "calico-binaries: building calicoctl $release ..." >&2
go build -trimpath -ldflags "-s -w -X $m/calicoctl/calicoctl/commands.VERSION=$release \
  -X $m/calicoctl/calicoctl/commands.GIT_REVISION=$rev \
  -X $m/calicoctl/calicoctl/commands/common.VERSION=$release -X main.VERSION=$release" \
  -o "$tmp/calicoctl" "$m/calicoctl/calicoctl"
echo "calico-binaries: calicoctl built in $((SECONDS - start))s" >&2

start=$SECONDS
echo "calico-binaries: building calico-ipam $release ..." >&2
go build -trimpath -ldflags "-s -w -X main.VERSION=$release" \
  -o "$tmp/calico-ipam" "$m/cni-plugin/cmd/calico"
echo "calico-binaries: calico-ipam built in $((SECONDS - start))s" >&2

for b in "${bins[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
