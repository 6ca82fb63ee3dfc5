package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/finding"
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
	// NotJudged is 1 for each rule the last complete audit left out, by
	// why: nothing reads as clean on this node that was not looked at.
	NotJudged *prometheus.GaugeVec
}

// NewMetrics creates the series for the agent's rules and registers them
// with reg.
func NewMetrics(reg prometheus.Registerer, rules []rule.Rule) *Metrics {
	ns := sink.Namespace
	m := &Metrics{
		Metrics: sink.NewMetrics(reg, rules),
		Audits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "audits_total",
			Help: "Audits run, by what triggered them (start, timer, grace, retry, or what changed: cluster, holders, new-flow, events-lost, hostlocal) and outcome (complete, degraded)."},
			[]string{"trigger", "outcome"}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "degraded",
			Help: "1 while the agent refuses to act, by reason (cache-stale, source-error, budget-exceeded, cap-exceeded)."}, []string{"reason"}),
		NotJudged: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "rules_not_judged",
			Help: "1 for each rule the last complete audit did not judge, by reason: blind (its ledger does not show on this node: Service NAT outside conntrack), source-error (a ledger it reads could not be read), not-applicable (no such ledger on this node)."},
			[]string{"rule", "reason"}),
	}
	reg.MustRegister(m.Audits, m.Degraded, m.NotJudged)
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

// Reasons for the rules_not_judged metric.
const (
	notJudgedBlind         = "blind"
	notJudgedSourceError   = "source-error"
	notJudgedNotApplicable = "not-applicable"
)

// notJudgedReason says why a rule was skipped, as the metric says it.
func notJudgedReason(sk finding.Skipped) string {
	switch {
	case sk.Blind:
		return notJudgedBlind
	case sk.NotApplicable:
		return notJudgedNotApplicable
	}
	return notJudgedSourceError
}

// setNotJudged sets the rules_not_judged gauge from a complete audit's
// skipped rules: 1 for each, none for a rule judged.
func (m *Metrics) setNotJudged(skipped []finding.Skipped) {
	m.NotJudged.Reset()
	for _, sk := range skipped {
		m.NotJudged.WithLabelValues(sk.Rule, notJudgedReason(sk)).Set(1)
	}
}
