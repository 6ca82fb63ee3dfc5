package sink

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Namespace prefixes every metric ghostwatch exports.
const Namespace = "ghostwatch"

// Metrics exports findings, sources and remedy actions as Prometheus
// series. What is rule-specific (an extra gauge, a counter of targets acted
// on) comes from the rules' Info. Label values are rule IDs, severities,
// source names, results and object names: never IPs or tuples.
type Metrics struct {
	// Findings counts the findings of the last complete pass, by rule and
	// severity; every rule and severity is present, at 0 when none.
	Findings *prometheus.GaugeVec
	// SourceUp is 1 when the source was read completely in the last pass.
	SourceUp *prometheus.GaugeVec
	// SourceSeconds is how long the source took in the last pass.
	SourceSeconds *prometheus.GaugeVec
	// RemedyActions counts remedy outcomes, by rule and result.
	RemedyActions *prometheus.CounterVec

	rules    []rule.Info
	gauges   map[string]*prometheus.GaugeVec
	counters map[string]*prometheus.CounterVec
}

// NewMetrics creates the series for rules and registers them with reg.
func NewMetrics(reg prometheus.Registerer, rules []rule.Rule) *Metrics {
	m := &Metrics{
		Findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "findings",
			Help: "Findings of the last complete pass, by rule and severity."}, []string{"rule", "severity"}),
		SourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "source_up",
			Help: "1 when the source was read completely in the last pass."}, []string{"source"}),
		SourceSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "source_duration_seconds",
			Help: "How long the source took to read in the last pass."}, []string{"source"}),
		RemedyActions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "remedy_actions_total",
			Help: "Remedy outcomes, by the rule whose finding was acted on and result (done, dry-run, pending, refused, gone, failed)."},
			[]string{"rule", "result"}),
		gauges:   map[string]*prometheus.GaugeVec{},
		counters: map[string]*prometheus.CounterVec{},
	}
	reg.MustRegister(m.Findings, m.SourceUp, m.SourceSeconds, m.RemedyActions)
	byName := map[string]*prometheus.CounterVec{}
	for _, r := range rules {
		info := r.Info()
		m.rules = append(m.rules, info)
		if g := info.Gauge; g != nil {
			m.gauges[info.ID] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: g.Name, Help: g.Help}, g.Labels)
			reg.MustRegister(m.gauges[info.ID])
		}
		if rem := info.Remedy; rem != nil && rem.Counter != nil {
			c, ok := byName[rem.Counter.Name]
			if !ok {
				c = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: rem.Counter.Name, Help: rem.Counter.Help}, []string{"rule"})
				reg.MustRegister(c)
				byName[rem.Counter.Name] = c
			}
			m.counters[info.ID] = c
		}
	}
	m.Publish(nil)
	return m
}

// Publish sets the findings gauges from the findings of a complete pass.
// After a degraded pass, leave them as they are: the last complete pass is
// still the best knowledge.
func (m *Metrics) Publish(fs []finding.Finding) {
	m.Findings.Reset()
	for _, info := range m.rules {
		for _, sev := range []finding.Severity{finding.Info, finding.Warning, finding.Critical} {
			m.Findings.WithLabelValues(info.ID, sev.String()).Set(0)
		}
	}
	for _, g := range m.gauges {
		g.Reset()
	}
	for _, f := range fs {
		m.Findings.WithLabelValues(f.Rule, f.Severity.String()).Inc()
		if g, ok := m.gauges[f.Rule]; ok {
			for _, info := range m.rules {
				if info.ID == f.Rule {
					// A finding of many entries (a ghost backend's
					// flows) counts each.
					n := 1
					if f.Target != nil {
						n = f.Target.Size()
					}
					g.WithLabelValues(info.Gauge.Values(f)...).Add(float64(n))
				}
			}
		}
	}
}

// Sources sets the source gauges from any pass, complete or not.
func (m *Metrics) Sources(sts []snapshot.SourceStatus) {
	for _, st := range sts {
		up := 0.0
		if st.Status == snapshot.StatusOK {
			up = 1
		}
		m.SourceUp.WithLabelValues(st.Name).Set(up)
		m.SourceSeconds.WithLabelValues(st.Name).Set(st.Duration.Seconds())
	}
}

// Action counts one remedy outcome.
func (m *Metrics) Action(a remedy.Action) {
	m.RemedyActions.WithLabelValues(a.Rule, string(a.Result)).Inc()
	if c, ok := m.counters[a.Rule]; ok && a.Result == remedy.Done {
		c.WithLabelValues(a.Rule).Add(float64(a.Acted))
	}
}

// RuleGauge returns the extra gauge of a rule, or nil.
func (m *Metrics) RuleGauge(id string) *prometheus.GaugeVec { return m.gauges[id] }

// RemedyCounter returns the counter of a rule's remedy, or nil.
func (m *Metrics) RemedyCounter(id string) *prometheus.CounterVec { return m.counters[id] }
