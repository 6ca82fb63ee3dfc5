#!/usr/bin/env bash
# Times a whole `scan` of one node (cluster objects through the informers,
# the conntrack dump over netlink, every rule) against `conntrack -L` on the
# same table, in one run, and prints the ratio. The table lives in a network
# namespace of the benchmark's own; nf_conntrack_max is raised for the run
# if too small and restored after.
#
# Usage: scripts/bench-scan.sh [COUNT]   (default 5 runs of each)
# Environment: GHOSTWATCH_BENCH_FLOWS (default 100000). Needs root and
# conntrack(8) (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
export GHOSTWATCH_BENCH_FLOWS=${GHOSTWATCH_BENCH_FLOWS:-100000}
if [ "$(id -u)" != 0 ]; then
  echo "bench-scan: needs root (network namespaces, conntrack table)" >&2
  exit 1
fi
if ! command -v conntrack >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq conntrack >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench '^BenchmarkScan$' -benchtime 5x -count "$count" ./lab/ | tee "$out"
awk '
  $1 ~ /^BenchmarkScan\// {
    name = $1; sub(/^BenchmarkScan\//, "", name); sub(/-[0-9]+$/, "", name)
    runs[name]++; sum[name] += $3
  }
  END {
    g = sum["ghostwatch-scan"] / runs["ghostwatch-scan"]; c = sum["conntrack-L"] / runs["conntrack-L"]
    printf "\nflows: %s\nghostwatch scan: %.0f ms\nconntrack -L:    %.0f ms\nratio scan / conntrack -L: %.2f\n", ENVIRON["GHOSTWATCH_BENCH_FLOWS"], g / 1e6, c / 1e6, g / c
  }' "$out"
