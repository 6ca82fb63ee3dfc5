#!/usr/bin/env bash
# Builds Prometheus for the real node's tests (lab/realnode), from the
# release of github.com/prometheus/prometheus pinned in
# tools/prometheus/go.mod, with its Kubernetes service discovery alone
# (Debian's prometheus is built without it). The binary goes to a cache
# directory outside the repository, named by that version and the Go
# toolchain; when it already holds it, nothing is built. Prints the
# directory on stdout (the tests read it from GHOSTWATCH_PROMETHEUS_BIN).
#
# Usage: scripts/prometheus-binary.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version is made.
# A cold build takes about 6 minutes on 2 cores; the binary is ~76 MB.
set -euo pipefail
cd "$(dirname "$0")/../tools/prometheus"

version=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/prometheus-$version-$goversion"
if [ -x "$dir/prometheus" ]; then
  echo "prometheus-binary: $dir holds prometheus $version already" >&2
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "prometheus-binary: building prometheus $version (Kubernetes discovery only) ..." >&2
# remove_all_sd leaves out every service discovery but those enabled:
# Prometheus's plugins/ files say which tag keeps which.
CGO_ENABLED=0 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
  -o "$tmp/prometheus" github.com/prometheus/prometheus/cmd/prometheus
echo "prometheus-binary: prometheus built in $((SECONDS - start))s" >&2
mv "$tmp/prometheus" "$dir/prometheus"
echo "$dir"
