#!/usr/bin/env bash
# Measures how many healthy flows the agent deletes during rolling updates
# on the real control plane, for each grace period given: the figures
# behind remedy.DefaultGrace and remedy.MinGrace (docs/agent.md, "How the
# grace period was chosen"). Each grace period runs REPLACEMENTS rolling
# replacements (default 200) of a 4-pod Service spread over EndpointSlices
# of 2 endpoints, with freed pod IPs handed straight to the next pod, under
# keep-alive and new-connection traffic; the agent runs with every remedy
# on and the shipped settings except the budget, raised so that it never
# hides a delete. CACHE_ONLY=1 adds, for comparison, a run per grace period
# with the agent's last re-check against the API server turned off.
#
# LOAD=N keeps N busy loops running beside it (a node whose CPUs are
# taken): the agent's caches then lag behind kube-proxy, which is what the
# grace period and the re-check are for.
#
# Usage (root): scripts/measure-grace.sh [GRACES]   e.g. 0s,100ms,1s,5s
# Prints one "grace-sweep row:" line per run; the full log goes to
# ${LOG:-/tmp/ghostwatch-grace.log}.
set -euo pipefail
cd "$(dirname "$0")/.."
graces=${1:-0s,100ms,1s,5s}
log=${LOG:-/tmp/ghostwatch-grace.log}
if [ -z "${GHOSTWATCH_KUBE_BIN:-}" ]; then
  GHOSTWATCH_KUBE_BIN=$(./scripts/kube-binaries.sh)
  export GHOSTWATCH_KUBE_BIN
fi
load=()
trap 'for p in "${load[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for ((i = 0; i < ${LOAD:-0}; i++)); do
  sh -c 'while :; do :; done' &
  load+=($!)
done
GHOSTWATCH_GRACE_SWEEP=$graces \
GHOSTWATCH_GRACE_REPLACEMENTS=${REPLACEMENTS:-200} \
GHOSTWATCH_GRACE_CACHE_ONLY=${CACHE_ONLY:-0} \
  go test -count=1 -timeout 4h -run '^TestGraceSweep$' -v ./lab/ >"$log" 2>&1 || { tail -50 "$log" >&2; exit 1; }
grep 'grace-sweep row:' "$log" | sed 's/^ *//'
