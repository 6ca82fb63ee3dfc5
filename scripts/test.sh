#!/usr/bin/env bash
# Runs every test ghostwatch has: unit, golden, fuzz seeds and, as root, the
# kernel tests that build network namespaces. Installs the few Debian
# packages the kernel tests compare against (conntrack, iproute2) when they
# are missing. Extra arguments go to `go test` (e.g. -run, -v).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need[*]} for the kernel tests" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "warning: ${need[*]} missing and cannot be installed here; the tests that compare against them will skip" >&2
  fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "warning: not root: the kernel tests (network namespaces, conntrack) will skip" >&2
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -count=1 "$@" ./...
