package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric ghostwatch exports.
const Namespace = "ghostwatch"

// Metrics are the agent's Prometheus series. Label values are rule IDs,
// severities, source names, results and Service names: never IPs or tuples.
type Metrics struct {
	Findings      *prometheus.GaugeVec
	StaleFlows    *prometheus.GaugeVec
	FlowsDeleted  *prometheus.CounterVec
	RemedyActions *prometheus.CounterVec
	SourceUp      *prometheus.GaugeVec
	SourceSeconds *prometheus.GaugeVec
	IndexFlows    prometheus.Gauge
	Audits        *prometheus.CounterVec
	Degraded      *prometheus.GaugeVec
	EventsLost    prometheus.Counter
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "findings",
			Help: "Findings of the last complete audit, by rule and severity."}, []string{"rule", "severity"}),
		StaleFlows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "conntrack_stale_entries",
			Help: "Conntrack entries on this node that still translate a Service to a backend that is gone, by Service."},
			[]string{"namespace", "service"}),
		FlowsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "conntrack_flows_deleted_total",
			Help: "Conntrack entries the agent deleted, by the rule that named them."}, []string{"reason"}),
		RemedyActions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "remedy_actions_total",
			Help: "Remedy decisions, by rule and result (deleted, dry-run, pending, refused, gone, failed)."}, []string{"rule", "result"}),
		SourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "source_up",
			Help: "1 when the source was read completely in the last audit."}, []string{"source"}),
		SourceSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "source_duration_seconds",
			Help: "How long the source took to read in the last audit."}, []string{"source"}),
		IndexFlows: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "index_flows",
			Help: "DNATed flows the agent indexes by backend (with conntrack events), or flows to a Service frontend seen in the last audit (without)."}),
		Audits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "audits_total",
			Help: "Audits run, by what triggered them (start, timer, change, grace, new-flow, events-lost) and outcome (complete, degraded)."},
			[]string{"trigger", "outcome"}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "degraded",
			Help: "1 while the agent refuses to act, by reason (cache-stale, source-error, budget-exceeded)."}, []string{"reason"}),
		EventsLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "conntrack_events_lost_total",
			Help: "Times conntrack events were lost (socket overflow or failure); each makes the next audit read the whole table."}),
	}
	reg.MustRegister(m.EventsLost, m.Findings, m.StaleFlows, m.FlowsDeleted, m.RemedyActions, m.SourceUp, m.SourceSeconds,
		m.IndexFlows, m.Audits, m.Degraded)
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
)

var degradedReasons = []string{reasonCacheStale, reasonSourceError, reasonBudgetExceeded}
