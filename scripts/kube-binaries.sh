#!/usr/bin/env bash
# Builds the Kubernetes control plane the end-to-end tests run, from the
# versions pinned in tools/kube/go.mod: kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy and the kubelet (the
# real node) from k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3.
# The binaries go to a cache directory outside the repository, named by
# those versions; only those it does not hold yet are built. Prints the
# directory on stdout (the tests read it from GHOSTWATCH_KUBE_BIN).
#
# Usage: scripts/kube-binaries.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version set is made.
# A cold build takes about 10 minutes on 2 cores (the kubelet about 2 more:
# 95 s with the rest built) and needs ~1 GB of module
# cache and ~4 GB of build cache.
set -euo pipefail
cd "$(dirname "$0")/../tools/kube"

k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/kube-$k8s-etcd-$etcd-$goversion"
kube=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet)

missing=()
for b in "${kube[@]}" etcd; do [ -x "$dir/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} = 0 ]; then
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
for b in "${missing[@]}"; do
  start=$SECONDS
  if [ "$b" = etcd ]; then
    echo "kube-binaries: building etcd $etcd ..." >&2
    go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  else
    echo "kube-binaries: building $b $k8s ..." >&2
    go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b"
  fi
  echo "kube-binaries: $b built in $((SECONDS - start))s" >&2
done
for b in "${missing[@]}"; do mv "$tmp/$b" "$dir/$b"; done
echo "$dir"
