#!/usr/bin/env bash
# Builds the Kubernetes control plane the end-to-end tests run, from the
# versions pinned in tools/kube/go.mod: kube-apiserver,
# kube-controller-manager and kube-proxy from k8s.io/kubernetes, and etcd
# from go.etcd.io/etcd/server/v3. The binaries go to a cache directory
# outside the repository, named by those versions; when it already holds
# them, nothing is built. Prints the directory on stdout (the tests read it
# from GHOSTWATCH_KUBE_BIN).
#
# Usage: scripts/kube-binaries.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version set is made.
# A cold build takes about 10 minutes on 2 cores and needs ~1 GB of module
# cache and ~4 GB of build cache.
set -euo pipefail
cd "$(dirname "$0")/../tools/kube"

k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/kube-$k8s-etcd-$etcd-$goversion"
bins=(kube-apiserver kube-controller-manager kube-proxy etcd)

have=1
for b in "${bins[@]}"; do [ -x "$dir/$b" ] || have=0; done
if [ "$have" = 1 ]; then
  echo "kube-binaries: $dir holds kubernetes $k8s and etcd $etcd already" >&2
  echo "$dir"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
minor=${k8s#v1.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
export CGO_ENABLED=0
for b in kube-apiserver kube-controller-manager kube-proxy; do
  start=$SECONDS
  echo "kube-binaries: building $b $k8s ..." >&2
  go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b"
  echo "kube-binaries: $b built in $((SECONDS - start))s" >&2
done
start=$SECONDS
echo "kube-binaries: building etcd $etcd ..." >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
echo "kube-binaries: etcd built in $((SECONDS - start))s" >&2
for b in "${bins[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
