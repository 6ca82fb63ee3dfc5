#!/usr/bin/env bash
# Measures the cluster-wide pod rules on 150,000 pods: a full pass of
# duplicate-pod-ip over every pod (the anchor), and the index a long-running
# watcher keeps instead: building it, one pod event, reading the duplicates,
# and the heap it keeps per pod (B/pod, its record of the pod included;
# B/pod+addr adds the pod's one address). Prints each benchmark's median of
# COUNT runs and the ratio of a full pass to one event.
#
# Usage: scripts/bench-cluster.sh [COUNT]   (default 5 runs of each)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./rule -run '^$' -bench '^(BenchmarkDuplicatePodIP|BenchmarkPodIPs)$' -count "$count" | tee "$out" >&2
awk '
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name)
    n[name]++; t[name, n[name]] = $3
    for (i = 4; i < NF; i++) if ($(i+1) == "B/pod") bp[name] = $i; else if ($(i+1) == "B/pod+addr") bpr[name] = $i
  }
  function median(name,   k, j, tmp, m) {
    m = n[name]
    for (k = 1; k <= m; k++) a[k] = t[name, k]
    for (k = 1; k <= m; k++) for (j = k + 1; j <= m; j++) if (a[j] < a[k]) { tmp = a[k]; a[k] = a[j]; a[j] = tmp }
    return a[int((m + 1) / 2)]
  }
  END {
    full = median("BenchmarkDuplicatePodIP"); ev = median("BenchmarkPodIPs/event")
    printf "full pass of duplicate-pod-ip, 150,000 pods: %.1f ms\n", full / 1e6
    printf "index build, 150,000 pods:                  %.1f ms\n", median("BenchmarkPodIPs/build") / 1e6
    printf "one pod event:                              %.0f ns (a full pass costs %.0fx that)\n", ev, full / ev
    printf "reading the duplicates:                     %.1f us\n", median("BenchmarkPodIPs/duplicates") / 1e3
    printf "heap kept per pod:                          %s B, its record included (%s B with its address)\n", bp["BenchmarkPodIPs/build"], bpr["BenchmarkPodIPs/build"]
  }' "$out"
