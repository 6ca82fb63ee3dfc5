#!/usr/bin/env bash
# Measures what ghostwatch's agent costs the API server, beside a real
# kube-proxy on the same node (lab/apicost, lab/cmd/apicost): a real
# kube-apiserver, etcd and EndpointSlice controller hold
# GHOSTWATCH_APICOST_PODS pods on GHOSTWATCH_APICOST_NODES Nodes behind
# GHOSTWATCH_APICOST_SERVICES Services; kube-proxy and `ghostwatch agent`
# run in the first node's network namespace, each through a counting
# forwarder of its own. Prints, per client, for the start (until both have
# synced and been idle 5s) and the churn (GHOSTWATCH_APICOST_REPLACEMENTS
# pod replacements and 5s idle after): requests (the API server's audit
# log), objects and bytes received, resident memory; then key=value lines.
# See docs/api-cost.md.
#
# Usage: scripts/bench-apicost.sh [-o json] [more flags of lab/cmd/apicost]
# Environment: GHOSTWATCH_APICOST_PODS (default 15000), _NODES (100),
# _SERVICES (500), _REPLACEMENTS (1000), _RATE (20 a second),
# GHOSTWATCH_APICOST_AGENT_BIN (default: ./cmd/ghostwatch built from this
# tree), GHOSTWATCH_KUBE_BIN (default: scripts/kube-binaries.sh builds them).
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "bench-apicost: needs root (a node network namespace, kube-proxy's iptables rules)" >&2
  exit 1
fi
if [ -z "${GHOSTWATCH_KUBE_BIN:-}" ]; then
  GHOSTWATCH_KUBE_BIN=$(./scripts/kube-binaries.sh)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
agent=${GHOSTWATCH_APICOST_AGENT_BIN:-}
if [ -z "$agent" ]; then
  echo "bench-apicost: building ./cmd/ghostwatch" >&2
  CGO_ENABLED=0 go build -o "$tmp/ghostwatch" ./cmd/ghostwatch
  agent=$tmp/ghostwatch
fi
go build -o "$tmp/apicost" ./lab/cmd/apicost
args=(--kube-bin "$GHOSTWATCH_KUBE_BIN" --agent-bin "$agent")
[ -z "${GHOSTWATCH_APICOST_PODS:-}" ] || args+=(--pods "$GHOSTWATCH_APICOST_PODS")
[ -z "${GHOSTWATCH_APICOST_NODES:-}" ] || args+=(--nodes "$GHOSTWATCH_APICOST_NODES")
[ -z "${GHOSTWATCH_APICOST_SERVICES:-}" ] || args+=(--services "$GHOSTWATCH_APICOST_SERVICES")
[ -z "${GHOSTWATCH_APICOST_REPLACEMENTS:-}" ] || args+=(--replacements "$GHOSTWATCH_APICOST_REPLACEMENTS")
[ -z "${GHOSTWATCH_APICOST_RATE:-}" ] || args+=(--rate "$GHOSTWATCH_APICOST_RATE")
"$tmp/apicost" "${args[@]}" "$@"
