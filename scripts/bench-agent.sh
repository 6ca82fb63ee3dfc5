#!/usr/bin/env bash
# Measures the agent on the real kernel, in a network namespace of the
# benchmark's own:
#   - BenchmarkBackendDeath: from a backend pod's deletion in the API to the
#     last of its flows deleted from the table (p50, p99), judged from the
#     agent's index of flows by backend, without a dump, and its parts (the
#     API write, the agent's reaction, the deletes);
#   - BenchmarkAgentSteadyState: CPU (percent of one core) and memory of a
#     process running the agent alone, idle after its first full audit,
#     full audit every 2m.
# The test binary is built as the release binary is: static, stripped.
#
# Usage: scripts/bench-agent.sh
# Environment: GHOSTWATCH_BENCH_FLOWS (default 100000),
# GHOSTWATCH_BENCH_AUDIT_INTERVAL (default 2m), GHOSTWATCH_BENCH_IDLE (the
# steady-state window, default 20s). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
export GHOSTWATCH_BENCH_FLOWS=${GHOSTWATCH_BENCH_FLOWS:-100000}
if [ "$(id -u)" != 0 ]; then
  echo "bench-agent: needs root (network namespaces, conntrack table)" >&2
  exit 1
fi
export CGO_ENABLED=0
go test -ldflags='-s -w' -run '^$' -bench '^BenchmarkBackendDeath$' -benchtime 100x -count 3 ./lab/
go test -ldflags='-s -w' -run '^$' -bench '^BenchmarkAgentSteadyState$' -benchtime 1x -count 3 ./lab/
