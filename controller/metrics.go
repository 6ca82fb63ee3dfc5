package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
)

// Metrics are the controller's Prometheus series: the findings every
// ghostwatch process exports (sink.Metrics), and its own.
type Metrics struct {
	*sink.Metrics
	Leader prometheus.Gauge
	Pods   prometheus.Gauge
	Passes prometheus.Counter
}

// NewMetrics creates the series for the controller's rules and registers
// them with reg.
func NewMetrics(reg prometheus.Registerer, rules []rule.Rule) *Metrics {
	ns := sink.Namespace
	m := &Metrics{
		Metrics: sink.NewMetrics(reg, rules),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "controller_leader",
			Help: "1 while this replica holds the leader Lease and watches the cluster; 0 while it stands by."}),
		Pods: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "controller_pods",
			Help: "Pods holding pod-network IPs the leader indexes."}),
		Passes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "controller_passes_total",
			Help: "Passes of the cluster rules the leader ran."}),
	}
	reg.MustRegister(m.Leader, m.Pods, m.Passes)
	return m
}
