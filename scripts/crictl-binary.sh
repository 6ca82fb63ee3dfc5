#!/usr/bin/env bash
# Builds crictl, the CRI client the real node's tests (lab/realnode) tear
# their pods down with, from the release of sigs.k8s.io/cri-tools pinned in
# tools/crictl/go.mod. The binary goes to a cache directory outside the
# repository, named by that version and the Go toolchain; when it already
# holds it, nothing is built. Prints the directory on stdout (the tests
# read it from GHOSTWATCH_CRICTL_BIN).
#
# Usage: scripts/crictl-binary.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version is made.
# A cold build takes about 2 minutes on 2 cores; the binary is ~30 MB.
set -euo pipefail
cd "$(dirname "$0")/../tools/crictl"

crictl=$(go list -m -f '{{.Version}}' sigs.k8s.io/cri-tools)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/crictl-$crictl-$goversion"
if [ -x "$dir/crictl" ]; then
  echo "crictl-binary: $dir holds crictl $crictl already" >&2
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "crictl-binary: building crictl $crictl ..." >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl" \
  -o "$tmp/crictl" sigs.k8s.io/cri-tools/cmd/crictl
echo "crictl-binary: crictl built in $((SECONDS - start))s" >&2
mv "$tmp/crictl" "$dir/crictl"
echo "$dir"
