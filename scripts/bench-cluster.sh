#!/usr/bin/env bash
# Measures the cluster-wide rules on 150,000 pods.
#
# The pod rules alone: a full pass of duplicate-pod-ip over every pod (the
# anchor), and the index a long-running watcher keeps instead: building it,
# one pod event, reading the duplicates, and the heap it keeps per pod (B/pod,
# its record of the pod included; B/pod+addr adds the pod's one address).
#
# The controller's leader (BenchmarkControllerPass) on 150,000 pods, 2,500
# nodes and 2,500 Calico blocks of 64 addresses, 60 of each allocated to pods
# (a handle each), ten misbooked and ten leaked: one full pass (its sources
# collected into a snapshot and every cluster rule it runs), wall and CPU
# time; and all its sources keep per pod, informer caches, the pod index and
# Calico's converted ledger included. Its pod informer
# (BenchmarkClusterWatch): one pod event, and the heap its index keeps per pod
# beyond the informer cache.
#
# The gossip rules over a Consul cluster of 5,000 members among those pods,
# ten of them ghosts (BenchmarkGossipRules), against the anchor of
# duplicate-pod-ip's full pass over the same pods.
#
# Prints each benchmark's median of COUNT runs.
#
# Usage: scripts/bench-cluster.sh [COUNT]   (default 5 runs of each)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test ./rule -run '^$' -bench '^(BenchmarkDuplicatePodIP|BenchmarkPodIndex)$' -count "$count" | tee "$out" >&2
go test ./rule -run '^$' -bench '^BenchmarkGossipRules$' -benchtime 20x -count "$count" | tee -a "$out" >&2
# A pass takes about half a second and the index's build as long: a few of
# each per run; an event is timed over a second of them.
go test ./controller -run '^$' -bench '^BenchmarkControllerPass$' -benchtime 5x -count "$count" | tee -a "$out" >&2
go test ./source/kube/live -run '^$' -bench '^BenchmarkClusterWatch$/^index$' -benchtime 5x -count "$count" | tee -a "$out" >&2
go test ./source/kube/live -run '^$' -bench '^BenchmarkClusterWatch$/^event$' -count "$count" | tee -a "$out" >&2
awk '
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name)
    n[name]++; t[name, n[name]] = $3
    for (i = 4; i < NF; i++) v[name, $(i+1), n[name]] = $i
  }
  function median(name, unit,   k, j, tmp, m, a) {
    m = n[name]
    for (k = 1; k <= m; k++) a[k] = (unit == "" ? t[name, k] : v[name, unit, k])
    for (k = 1; k <= m; k++) for (j = k + 1; j <= m; j++) if (a[j] + 0 < a[k] + 0) { tmp = a[k]; a[k] = a[j]; a[j] = tmp }
    return a[int((m + 1) / 2)]
  }
  END {
    full = median("BenchmarkDuplicatePodIP"); ev = median("BenchmarkPodIndex/event")
    printf "full pass of duplicate-pod-ip, 150,000 pods: %.1f ms\n", full / 1e6
    printf "index build, 150,000 pods:                  %.1f ms\n", median("BenchmarkPodIndex/build") / 1e6
    printf "one pod event:                              %.0f ns (a full pass costs %.0fx that)\n", ev, full / ev
    printf "reading the duplicates:                     %.1f us\n", median("BenchmarkPodIndex/duplicates") / 1e3
    printf "heap kept per pod:                          %s B, its record included (%s B with its address)\n", median("BenchmarkPodIndex/build", "B/pod"), median("BenchmarkPodIndex/build", "B/pod+addr")
    g = median("BenchmarkGossipRules/gossip-ghost-member")
    printf "gossip-ghost-member, 5,000 members:         %.1f ms, %.1f MB (%.2fx the duplicate-pod-ip pass)\n", g / 1e6, median("BenchmarkGossipRules/gossip-ghost-member", "B/op") / 1e6, g / full
    printf "gossip-ip-identity, 5,000 members:          %.1f ms\n", median("BenchmarkGossipRules/gossip-ip-identity") / 1e6
    p = "BenchmarkControllerPass"; w = "BenchmarkClusterWatch/"
    printf "\ncontroller, 150,000 pods and 2,500 Calico blocks:\n"
    printf "one full pass:                              %.0f ms (%.0f ms CPU), %.1f MB and %s allocations\n", median(p) / 1e6, median(p, "cpu-ns/op") / 1e6, median(p, "B/op") / 1e6, median(p, "allocs/op")
    printf "one pod event:                              %.0f ns, %s B\n", median(w "event"), median(w "event", "B/op")
    printf "index kept per pod, beyond the informers:   %.0f B\n", median(w "index", "B/pod")
    printf "heap kept per pod, everything:              %.0f B (Calico ledger converted: %.0f B)\n", median(p, "heap-B/pod"), median(p, "calico-B/pod")
  }' "$out"
