#!/usr/bin/env bash
# Builds the Consul agent the end-to-end tests of seed 000 run, from the
# release pinned in tools/consul/go.mod (MPL-2.0: v1.14.11, the last release
# whose modules are all served and open source). The binary goes to a cache
# directory outside the repository, named by that version; when it already
# holds it, nothing is built. Prints the directory on stdout (the tests
# read it from GHOSTWATCH_CONSUL_BIN).
#
# Usage: scripts/consul-binary.sh
# Environment: GHOSTWATCH_KUBE_CACHE (default /var/cache/ghostwatch), under
# which a directory per version is made.
# A cold build takes about 10 minutes on 2 cores; the binary is ~160 MB.
set -euo pipefail
cd "$(dirname "$0")/../tools/consul"

consul=$(go list -m -f '{{.Version}}' github.com/hashicorp/consul)
goversion=$(go env GOVERSION)
dir="${GHOSTWATCH_KUBE_CACHE:-/var/cache/ghostwatch}/consul-$consul-$goversion"
if [ -x "$dir/consul" ]; then
  echo "consul-binary: $dir holds consul $consul already" >&2
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "consul-binary: building consul $consul (about 10 minutes cold) ..." >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/hashicorp/consul/version.GitCommit=release -X github.com/hashicorp/consul/version.Version=${consul#v}" \
  -o "$tmp/consul" github.com/hashicorp/consul
echo "consul-binary: consul built in $((SECONDS - start))s" >&2
mv "$tmp/consul" "$dir/consul"
echo "$dir"
