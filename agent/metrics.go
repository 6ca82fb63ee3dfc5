package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
)

// Metrics are the agent's Prometheus series: the findings, sources and
// remedy series every ghostwatch process exports (sink.Metrics), and the
// agent's own.
type Metrics struct {
	*sink.Metrics
	Audits   *prometheus.CounterVec
	Degraded *prometheus.GaugeVec
}

// NewMetrics creates the series for the agent's rules and registers them
// with reg.
func NewMetrics(reg prometheus.Registerer, rules []rule.Rule) *Metrics {
	ns := sink.Namespace
	m := &Metrics{
		Metrics: sink.NewMetrics(reg, rules),
		Audits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "audits_total",
			Help: "Audits run, by what triggered them (start, timer, grace, retry, or what changed: cluster, holders, new-flow, events-lost) and outcome (complete, degraded)."},
			[]string{"trigger", "outcome"}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "degraded",
			Help: "1 while the agent refuses to act, by reason (cache-stale, source-error, budget-exceeded, cap-exceeded)."}, []string{"reason"}),
	}
	reg.MustRegister(m.Audits, m.Degraded)
	for _, r := range degradedReasons {
		m.Degraded.WithLabelValues(r).Set(0)
	}
	return m
}

// Reasons for the degraded metric.
const (
	reasonCacheStale     = "cache-stale"
	reasonSourceError    = "source-error"
	reasonBudgetExceeded = "budget-exceeded"
	reasonCapExceeded    = "cap-exceeded"
)

var degradedReasons = []string{reasonCacheStale, reasonSourceError, reasonBudgetExceeded, reasonCapExceeded}

// setDegraded sets the degraded gauge: 1 for the reasons given, 0 for the
// others.
func (m *Metrics) setDegraded(reasons ...string) {
	for _, r := range degradedReasons {
		v := 0.0
		for _, on := range reasons {
			if on == r {
				v = 1
			}
		}
		m.Degraded.WithLabelValues(r).Set(v)
	}
}
