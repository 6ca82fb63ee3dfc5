#!/usr/bin/env bash
# Measures seed 004's error window on a real node with the chart as it
# ships (stale-nat-flow on): the figures behind the shipped grace period
# (docs/agent.md, "How the grace period was chosen"). Lanes of a
# one-replica Deployment behind a NodePort, each with a keep-alive client
# outside the node, are replaced again and again, the old pod's FIN and RST
# dropped by the node so that its client's connection is left translated
# to it; the agent's delete of that flow is what lets the client through
# to the new replica. Every flow the agent deleted is then judged against
# the pods' lives: one whose backend a pod held at that moment was healthy.
#
# Usage (root): scripts/measure-window.sh [REPLACEMENTS]   (default 1000)
#   MODES   kube-proxy's modes, one run each (default iptables,nftables)
#   GRACE   the agent's --grace (default: the chart's, the agent's 5s; at
#           least 1s)
#   LANES   Deployments replaced side by side (default 3: some 16 ghosts a
#           minute at a grace of 5s, under the shipped budget of 20; with a
#           shorter grace use 1, or raise BUDGET, or the budget is what is
#           measured)
#   BUDGET  the agent's --budget, ghost IPs a minute (default: the chart's)
# Prints one "window-sweep row:" line per run and keeps it in
# docs/window-sweep.txt (NO_DOC=1: not), in place of an earlier row of the
# same mode and grace; scripts/bench.sh shows those rows in
# docs/performance.md. The full log goes to
# ${LOG:-/tmp/ghostwatch-window.log}. 1000 replacements take about an hour
# a mode on 2 cores at the shipped budget, some 45 minutes with a budget
# that never holds a delete back.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
case $n in '' | *[!0-9]*) echo "measure-window: $n is not a count" >&2; exit 2 ;; esac
log=${LOG:-/tmp/ghostwatch-window.log}
: >"$log"
for v in KUBE:kube-binaries CNI:cni-plugins CRICTL:crictl-binary; do
  var=GHOSTWATCH_${v%%:*}_BIN
  if [ -z "${!var:-}" ]; then
    export "$var=$(./scripts/${v#*:}.sh)"
  fi
done
modes=${MODES:-iptables,nftables}
for m in ${modes//,/ }; do
  GHOSTWATCH_REAL_SWEEP=$n GHOSTWATCH_REAL_SWEEP_MODE=$m GHOSTWATCH_REAL_SWEEP_GRACE=${GRACE:-} \
  GHOSTWATCH_REAL_SWEEP_LANES=${LANES:-3} GHOSTWATCH_REAL_SWEEP_BUDGET=${BUDGET:-} \
    go test -count=1 -timeout 8h -run '^TestErrorWindowSweep$' -v ./lab/realnode/ >>"$log" 2>&1 || { tail -50 "$log" >&2; exit 1; }
done
rows=$(grep 'window-sweep row:' "$log" | sed 's/^.*window-sweep row: //')
echo "$rows" | sed 's/^/window-sweep row: /'
if [ "${NO_DOC:-}" != 1 ]; then
  kept=docs/window-sweep.txt
  commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+')"
  [ -e "$kept" ] || printf '# scripts/measure-window.sh: the latest row of each kube-proxy mode and grace\n' >"$kept"
  while read -r row; do
    key=$(echo "$row" | grep -o 'mode=[^ ]* grace="[^"]*"')
    grep -vF "$key" "$kept" >"$kept.new" || true
    echo "window-sweep row: commit=$commit date=$(date -u +%Y-%m-%d) $row" >>"$kept.new"
    mv "$kept.new" "$kept"
  done <<<"$rows"
fi
