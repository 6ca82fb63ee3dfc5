package realnode

import (
	"errors"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// Prometheus is the executable of the Prometheus the real node's tests
// check the chart's alerts in, built with its Kubernetes service discovery
// (Debian's prometheus is built without it): PrometheusScript builds it
// into the cache, or PrometheusEnv names its directory.
const (
	Prometheus       = "prometheus"
	PrometheusEnv    = "GHOSTWATCH_PROMETHEUS_BIN"
	PrometheusScript = "scripts/prometheus-binary.sh"
)

// ErrNoPrometheus is FindPrometheus's error when PrometheusEnv is unset and
// the cache holds none.
var ErrNoPrometheus = errors.New("Prometheus is not built: run " + PrometheusScript + " and set " + PrometheusEnv + " to the directory it prints")

// FindPrometheus is the directory holding Prometheus: PrometheusEnv's,
// else the cache's.
func FindPrometheus() (string, error) {
	return testenv.BinDir(PrometheusEnv, PrometheusScript, ErrNoPrometheus, Prometheus)
}
