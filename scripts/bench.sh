#!/usr/bin/env bash
# Measures ghostwatch beside what operators run today, in one run, and
# writes docs/performance.md and its plots from what it measured.
#
# For each table size (real conntrack tables in a network namespace of the
# run's own: TCP, UDP and SCTP, IPv4 and IPv6, 1 % stale), lab's
# BenchmarkSideBySide times the agent's full audit against a count-only
# netlink dump (the floor), `conntrack -L`, kube-proxy's way of reading the
# table and the incident reports' shell loop; measures the agent at rest
# and under churn against a cleaner that dumps every second; clears dead
# backends with the agent's shipped settings; and scans a saved listing
# against awk. Then a node whose workloads all died (lab's
# BenchmarkDeadBackends: a table of stale flows to many dead backends, the
# agent's and the scan's peak memory beside the DaemonSet's limit), the
# controller's full pass at each cluster size, and one pod event at
# 150,000 pods. tools/benchreport writes the document and prints the
# headline figures as the last lines (key=value).
#
# Usage (root): scripts/bench.sh [--sizes N,N,...] [--pods N,N,...]
#                                [--window DURATION] [--out DIR] [--no-doc]
#                                [--baseline FILE] [--dead FLOWS,BACKENDS]
#   --sizes   conntrack table sizes (default 10000,20000,100000,1000000)
#   --pods    controller cluster sizes (default 15000,150000; at least 5000)
#   --window  how long the agent and the per-second cleaner are watched
#             (default 10s)
#   --out     directory for the raw results (default: a temporary one)
#   --no-doc  print the figures only; leave docs/ alone
#   --baseline  an earlier run's results (docs/performance-results.txt as
#             it was): its headline figures are shown beside this run's
#   --dead    the table of a node whose workloads all died: its stale flows
#             and their dead backends (default 1000000,100000)
# The raw results are kept in docs/performance-results.txt with the page.
# A full run takes about 5 minutes on 2 cores. Needs root, iproute2,
# conntrack(8) and GNU time (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=10000,20000,100000,1000000
pods=15000,150000
window=10s
out=
doc=true
baseline=
dead=1000000,100000
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=${2:?--sizes needs a list}; shift 2 ;;
    --pods) pods=${2:?--pods needs a list}; shift 2 ;;
    --window) window=${2:?--window needs a duration}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --no-doc) doc=false; shift ;;
    --baseline) baseline=${2:?--baseline needs a file}; shift 2 ;;
    --dead) dead=${2:?--dead needs FLOWS,BACKENDS}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in ${sizes//,/ } ${pods//,/ } ${dead//,/ }; do
  case $n in '' | *[!0-9]*) echo "bench: $n is not a count (see --help)" >&2; exit 2 ;; esac
done
dead_flows=${dead%,*} dead_backends=${dead#*,}
if [ "$dead_flows" = "$dead" ] || [ "$dead_backends" -gt "$dead_flows" ]; then
  echo "bench: --dead $dead: want FLOWS,BACKENDS, at most one backend a flow (see --help)" >&2
  exit 2
fi
for n in ${pods//,/ }; do
  if [ "$n" -lt 5000 ]; then
    echo "bench: --pods $n: the controller's cluster holds a Consul cluster of 5000 pods; give at least 5000" >&2
    exit 2
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "bench: needs root (network namespaces, conntrack tables)" >&2
  exit 1
fi
need=()
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "$baseline" ]; then
  [ -r "$baseline" ] || { echo "bench: cannot read the baseline $baseline" >&2; exit 2; }
  cp "$baseline" "$out/baseline.txt"
fi
results=$out/results.txt
echo "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')" >"$results"

echo "bench: building the benchmarks (static, stripped, as the release)" >&2
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$out/lab.test" ./lab
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$out/controller.test" ./controller
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$out/live.test" ./source/kube/live

{
  echo "date:      $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "cpu:       $(nproc) × $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "memory:    $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel:    $(uname -r)"
  echo "go:        $(go env GOVERSION)"
  echo "conntrack: $(conntrack --version 2>&1 | head -1)"
  echo "awk:       $(readlink -f "$(command -v awk)")"
  echo "command:   scripts/bench.sh --sizes $sizes --pods $pods --window $window --dead $dead"
} >"$out/machine.txt"

step=0
steps=$(($(echo "${sizes//,/ }" | wc -w) + $(echo "${pods//,/ }" | wc -w) + 2))
for n in ${sizes//,/ }; do
  step=$((step + 1))
  echo "bench: [$step/$steps] a table of $n flows, side by side" >&2
  (cd lab && GHOSTWATCH_BENCH_FLOWS=$n GHOSTWATCH_BENCH_WINDOW=$window \
    "$out/lab.test" -test.run '^$' -test.bench '^BenchmarkSideBySide$' -test.benchtime 1x) | tee -a "$results" >&2
done
step=$((step + 1))
echo "bench: [$step/$steps] $dead_flows stale flows to $dead_backends dead backends" >&2
(cd lab && GHOSTWATCH_BENCH_DEAD_FLOWS=$dead_flows GHOSTWATCH_BENCH_DEAD_BACKENDS=$dead_backends \
  "$out/lab.test" -test.run '^$' -test.bench '^BenchmarkDeadBackends$' -test.benchtime 1x) | tee -a "$results" >&2
for p in ${pods//,/ }; do
  step=$((step + 1))
  echo "bench: [$step/$steps] the controller's pass over $p pods" >&2
  (cd controller && GHOSTWATCH_BENCH_PODS=$p \
    "$out/controller.test" -test.run '^$' -test.bench '^BenchmarkControllerPass$' -test.benchtime 5x -test.count 3) | tee -a "$results" >&2
done
step=$((step + 1))
echo "bench: [$step/$steps] one pod event at 150000 pods" >&2
(cd source/kube/live && "$out/live.test" -test.run '^$' -test.bench '^BenchmarkClusterWatch$/^index$' -test.benchtime 5x -test.count 3 &&
  "$out/live.test" -test.run '^$' -test.bench '^BenchmarkClusterWatch$/^event$' -test.count 3) | tee -a "$results" >&2

args=(-results "$results" -machine "$out/machine.txt")
if [ -n "$baseline" ]; then
  args+=(-baseline "$out/baseline.txt")
fi
# The error window on a real node takes an hour a mode: it is measured by
# scripts/measure-window.sh, which keeps its rows for this page.
if [ -r docs/window-sweep.txt ]; then
  args+=(-window "$PWD/docs/window-sweep.txt")
fi
if [ "$doc" = true ]; then
  args+=(-doc "$PWD/docs/performance.md" -plots "$PWD/docs")
  cp "$results" docs/performance-results.txt
fi
(cd tools/benchreport && go run . "${args[@]}")
