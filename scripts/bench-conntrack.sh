#!/usr/bin/env bash
# Compares reading the conntrack table with ghostwatch's netlink reader
# against `conntrack -L`, on the same table in a network namespace of its
# own (the host's table is not touched; nf_conntrack_max and
# nf_conntrack_buckets are raised for the run if too small, then restored).
#
# Usage: scripts/bench-conntrack.sh [COUNT]   (default 5 runs of each)
# Environment: GHOSTWATCH_BENCH_FLOWS (default 100000), BENCHTIME (go test
# -benchtime, default 1s). Needs root, conntrack(8) and iproute2; GNU time
# for the peak-RSS figures (installed with apt-get when missing and root).
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-5}
flows=${GHOSTWATCH_BENCH_FLOWS:-100000}
export GHOSTWATCH_BENCH_FLOWS=$flows

if [ "$(id -u)" != 0 ]; then
  echo "bench-conntrack: needs root (network namespaces, conntrack table)" >&2
  exit 1
fi
need=()
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench '^BenchmarkDumpTable$' -benchtime "${BENCHTIME:-1s}" \
  -count "$count" ./source/conntrack/ | tee "$out"

if command -v benchstat >/dev/null 2>&1; then
  benchstat "$out" || true
fi

# Means over the runs of each sub-benchmark, then the ratios. Go prints
# "BenchmarkDumpTable/NAME-P  N  V ns/op  V flows  V maxrss-KiB ...".
awk -v flows="$flows" '
  $1 ~ /^BenchmarkDumpTable\// {
    name = $1; sub(/^BenchmarkDumpTable\//, "", name); sub(/-[0-9]+$/, "", name)
    runs[name]++
    for (i = 3; i < NF; i += 2) { sum[name, $(i+1)] += $i; seen[$(i+1)] = 1 }
  }
  function mean(name, unit) { return runs[name] ? sum[name, unit] / runs[name] : 0 }
  END {
    g = mean("ghostwatch", "ns/op"); c = mean("conntrack-L", "ns/op"); e = mean("exec-baseline", "ns/op")
    if (!g || !c) { print "bench-conntrack: missing results" > "/dev/stderr"; exit 1 }
    printf "\n%d flows, mean of %d runs\n", flows, runs["ghostwatch"]
    printf "  ghostwatch     %10.1f ms/op  %7.1f MB allocated/op  peak RSS %6.1f MiB (idle test binary %.1f MiB)\n",
      g / 1e6, mean("ghostwatch", "B/op") / 1e6, mean("ghostwatch", "maxrss-KiB") / 1024, mean("ghostwatch", "idle-maxrss-KiB") / 1024
    printf "  conntrack -L   %10.1f ms/op                            peak RSS %6.1f MiB\n",
      c / 1e6, mean("conntrack-L", "maxrss-KiB") / 1024
    printf "  exec baseline  %10.1f ms/op (ip netns exec true)\n", e / 1e6
    printf "  dump only      %10.1f ms/op (kernel dump and parsing, nothing kept)\n", mean("dump-only", "ns/op") / 1e6
    printf "ratio ghostwatch / conntrack -L:                     %.3f\n", g / c
    if (c > e) printf "ratio ghostwatch / (conntrack -L - exec baseline):  %.3f\n", g / (c - e)
  }
' "$out"
