#!/usr/bin/env bash
# Times a whole `scan` of one node (cluster objects through the informers,
# the conntrack dump over netlink, every rule) against `conntrack -L` on the
# same table, in one run, and prints the ratio. The table lives in a network
# namespace of the benchmark's own; nf_conntrack_max is raised for the run
# if too small and restored after.
#
# It also runs the scan in a process of its own (ghostwatch-scan-process),
# to report the peak resident set of a scan and nothing else, against that
# of `conntrack -L` (GNU time). The test binary is built as the release
# binary is: static (CGO_ENABLED=0) and stripped.
#
# Usage: scripts/bench-scan.sh [COUNT]   (default 5 runs of each)
# Environment: GHOSTWATCH_BENCH_FLOWS (default 100000). Needs root,
# conntrack(8) and GNU time (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
export GHOSTWATCH_BENCH_FLOWS=${GHOSTWATCH_BENCH_FLOWS:-100000}
if [ "$(id -u)" != 0 ]; then
  echo "bench-scan: needs root (network namespaces, conntrack table)" >&2
  exit 1
fi
need=()
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
CGO_ENABLED=0 go test -ldflags='-s -w' -run '^$' -bench '^BenchmarkScan$' -benchtime 5x -count "$count" ./lab/ | tee "$out"
awk '
  $1 ~ /^BenchmarkScan\// {
    name = $1; sub(/^BenchmarkScan\//, "", name); sub(/-[0-9]+$/, "", name)
    runs[name]++; sum[name] += $3
    for (i = 4; i < NF; i++) if ($(i+1) == "peak-rss-MiB" && $i > rss[name]) rss[name] = $i
  }
  END {
    g = sum["ghostwatch-scan"] / runs["ghostwatch-scan"]; c = sum["conntrack-L"] / runs["conntrack-L"]
    printf "\nflows: %s\nghostwatch scan: %.0f ms\nconntrack -L:    %.0f ms\nratio scan / conntrack -L: %.2f\n", ENVIRON["GHOSTWATCH_BENCH_FLOWS"], g / 1e6, c / 1e6, g / c
    printf "peak RSS, scan in its own process: %.1f MiB\npeak RSS, conntrack -L:            %.1f MiB\n", rss["ghostwatch-scan-process"], rss["conntrack-L"]
  }' "$out"
