#!/usr/bin/env bash
# Runs every test ghostwatch has: unit, golden, fuzz seeds and, as root, the
# kernel tests that build network namespaces and the end-to-end tests against
# a real kube-apiserver, EndpointSlice controller and kube-proxy. Installs
# the Debian packages they use (conntrack, iproute2, iptables, nftables,
# prometheus for promtool, and containerd and runc for the real node) when
# missing, and builds the Kubernetes binaries, the kubelet among them
# (scripts/kube-binaries.sh: ~10 minutes cold, the kubelet ~2 more), the CNI plugins
# (scripts/cni-plugins.sh: ~1 minute cold), crictl (scripts/crictl-binary.sh:
# ~2 minutes cold), Calico's binaries (scripts/calico-binaries.sh: ~8 minutes cold),
# Prometheus with its Kubernetes discovery (scripts/prometheus-binary.sh: ~6
# minutes cold) and the Consul agent of seed 000 (scripts/consul-binary.sh:
# ~4-10 minutes cold) once into a cache outside the repository, nothing after.
# GHOSTWATCH_E2E=0 skips the builds and the tests that run those binaries.
# Under CI=true nothing may skip: the script fails when it is not root, when
# it cannot install those packages, or when GHOSTWATCH_E2E=0, and the tests
# that cannot run fail (internal/testenv).
# Extra arguments go to `go test` (e.g. -run, -v).
set -euo pipefail
cd "$(dirname "$0")/.."

# ci is true when CI is, read as internal/testenv reads it (strconv.ParseBool).
ci=false
case "${CI:-}" in 1 | t | T | true | TRUE | True) ci=true ;; esac
# cannot reports what cannot run: a warning, or under CI an error (later exit).
failed=false
cannot() {
  if [ "$ci" = true ]; then
    echo "error: $1 (CI=true: nothing may skip)" >&2
    failed=true
  else
    echo "warning: $1" >&2
  fi
}

need=()
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables-restore >/dev/null 2>&1 || need+=(iptables)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v promtool >/dev/null 2>&1 || need+=(prometheus) # promtool, for the alerting rules' tests
command -v containerd >/dev/null 2>&1 || need+=(containerd) # the real node's runtime (lab/realnode)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need[*]} for the kernel tests" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    cannot "${need[*]} missing and cannot be installed here; the tests that compare against them will skip"
  fi
fi
if [ "$(id -u)" != 0 ]; then
  cannot "not root: the kernel tests (network namespaces, conntrack) will skip"
fi
if [ "${GHOSTWATCH_E2E:-1}" = 0 ]; then
  cannot "GHOSTWATCH_E2E=0: the end-to-end tests will skip"
fi
if [ "$failed" = true ]; then
  exit 1
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_KUBE_BIN:-}" ]; then
  GHOSTWATCH_KUBE_BIN=$(./scripts/kube-binaries.sh)
  export GHOSTWATCH_KUBE_BIN
fi
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_CNI_BIN:-}" ]; then
  GHOSTWATCH_CNI_BIN=$(./scripts/cni-plugins.sh)
  export GHOSTWATCH_CNI_BIN
fi
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_CALICO_BIN:-}" ]; then
  GHOSTWATCH_CALICO_BIN=$(./scripts/calico-binaries.sh)
  export GHOSTWATCH_CALICO_BIN
fi
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_CRICTL_BIN:-}" ]; then
  GHOSTWATCH_CRICTL_BIN=$(./scripts/crictl-binary.sh)
  export GHOSTWATCH_CRICTL_BIN
fi
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_PROMETHEUS_BIN:-}" ]; then
  GHOSTWATCH_PROMETHEUS_BIN=$(./scripts/prometheus-binary.sh)
  export GHOSTWATCH_PROMETHEUS_BIN
fi
if [ "${GHOSTWATCH_E2E:-1}" != 0 ] && [ "$(id -u)" = 0 ] && [ -z "${GHOSTWATCH_CONSUL_BIN:-}" ]; then
  GHOSTWATCH_CONSUL_BIN=$(./scripts/consul-binary.sh)
  export GHOSTWATCH_CONSUL_BIN
fi
# The lab package plays the fault matrix (TestRealFaults, about 12 minutes)
# beside the seeds: the bound is for a hang, not for a slow machine.
go test -count=1 -timeout 70m "$@" ./...
# The lab's benchmarks assert what they measure (flows seen, stale flows
# found, flows cleared): run each once on small tables, so that one which no
# longer measures what it says fails here rather than when someone reads its
# figures. Skipped when arguments narrow the run.
if [ "$#" = 0 ] && [ "$(id -u)" = 0 ]; then
  GHOSTWATCH_BENCH_FLOWS=2000 GHOSTWATCH_BENCH_GHOST_FLOWS=2000 GHOSTWATCH_BENCH_WINDOW=2s \
    GHOSTWATCH_BENCH_DEAD_FLOWS=2000 GHOSTWATCH_BENCH_DEAD_BACKENDS=200 \
    go test -count=1 -timeout 10m -run '^$' -bench . -benchtime 1x ./lab
fi
# scripts/bench.sh's report writer, a module of its own (its plotting
# library stays out of ghostwatch's go.mod).
if [ "$#" = 0 ]; then
  (cd tools/benchreport && go vet ./... && go test -count=1 ./...)
fi
