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
	Leader      prometheus.Gauge
	Pods        prometheus.Gauge
	Passes      prometheus.Counter
	PassSeconds prometheus.Gauge
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
		PassSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "controller_pass_duration_seconds",
			Help: "How long the leader's last pass took: assembling what it watches into a snapshot and running the cluster rules on it."}),
	}
	reg.MustRegister(m.Leader, m.Pods, m.Passes, m.PassSeconds)
	return m
}
