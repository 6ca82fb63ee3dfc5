package controller

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// GossipSource is the name of the source of the gossip clusters' views
// (source/gossip's Name), whose views and status the gossip series follow.
const GossipSource = "gossip"

// Metrics are the controller's Prometheus series: the findings every
// ghostwatch process exports (sink.Metrics), and its own.
type Metrics struct {
	*sink.Metrics
	Leader      prometheus.Gauge
	Pods        prometheus.Gauge
	Passes      prometheus.Counter
	PassSeconds prometheus.Gauge
	// GossipMembers counts the members of each gossip cluster read, by
	// system, cluster and status, as the last view read says.
	GossipMembers *prometheus.GaugeVec
	// GossipClusterUp is 1 for a gossip cluster whose member list the
	// last round read, 0 for one judged on its last view.
	GossipClusterUp *prometheus.GaugeVec
	// IPAMNextFree is the earliest time Calico's leak collector may free
	// a running pod's address, among the ipam-misbooked findings standing;
	// absent when none says when. One series, however many findings.
	IPAMNextFree *prometheus.GaugeVec

	// upClusters are the clusters of the last views read, which are down
	// while no cluster can be read.
	upClusters [][2]string

	// rejections are the counts of messages refused by the member whose
	// view was read last, by system, cluster and reason.
	rejMu      sync.Mutex
	rejections map[[3]string]uint64
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
	m.GossipMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "gossip_members",
		Help: "Members of each gossip cluster read (pods annotated ghostwatch.io/gossip), by system, cluster (namespace/name) and status (alive, suspect, leaving, left, failed, dead), as the last view read says."},
		[]string{"system", "cluster", "status"})
	m.GossipClusterUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "gossip_cluster_up",
		Help: "1 when the last round read the gossip cluster's member list; 0 when it could not, and the cluster is judged on its last view (the controller's log says why)."},
		[]string{"system", "cluster"})
	m.IPAMNextFree = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "ipam_next_free_timestamp_seconds",
		Help: "The earliest time (Unix seconds) Calico's leak collector may free a running pod's address booked under another node, among the ipam-misbooked findings; absent when none is due (subtract time() for the time left)."}, nil)
	reg.MustRegister(m.Leader, m.Pods, m.Passes, m.PassSeconds, m.GossipMembers, m.GossipClusterUp, m.IPAMNextFree, rejectionsCollector{m})
	return m
}

// IPAM sets IPAMNextFree from the findings standing: the earliest
// freed_from an ipam-misbooked finding names.
func (m *Metrics) IPAM(fs []finding.Finding) {
	var first time.Time
	for _, f := range fs {
		if f.Rule != rule.IPAMMisbookedID {
			continue
		}
		from, _ := f.Evidence["freed_from"].(string)
		at, err := time.Parse(time.RFC3339, from)
		if err == nil && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if first.IsZero() {
		m.IPAMNextFree.Reset()
		return
	}
	m.IPAMNextFree.WithLabelValues().Set(float64(first.Unix()))
}

// Gossip sets the gossip series from a pass's snapshot: from its views
// when they were read, to none when no pod is annotated. While no cluster
// can be read, every cluster last seen is down, and the members and
// rejections are left as they were.
func (m *Metrics) Gossip(s *snapshot.Snapshot) {
	st, ok := s.Source(GossipSource)
	switch {
	case ok && (s.Gossip != nil || st.Status.Absent()):
		m.GossipClusterUp.Reset()
		m.upClusters = nil
		if s.Gossip != nil {
			for _, v := range s.Gossip.Views {
				up := 0.0
				if v.Unread == "" {
					up = 1
				}
				m.GossipClusterUp.WithLabelValues(v.System, v.Cluster).Set(up)
				m.upClusters = append(m.upClusters, [2]string{v.System, v.Cluster})
			}
		}
	case ok && st.Status == snapshot.StatusError:
		for _, c := range m.upClusters {
			m.GossipClusterUp.WithLabelValues(c[0], c[1]).Set(0)
		}
	}
	if !ok || (st.Status != snapshot.StatusOK && !st.Status.Absent()) {
		return
	}
	m.GossipMembers.Reset()
	rej := map[[3]string]uint64{}
	if s.Gossip != nil {
		for _, v := range s.Gossip.Views {
			count := map[string]int{}
			for _, mb := range v.Members {
				count[mb.Status]++
			}
			for _, st := range []string{snapshot.MemberAlive, snapshot.MemberSuspect, snapshot.MemberLeaving, snapshot.MemberLeft, snapshot.MemberFailed, snapshot.MemberDead} {
				m.GossipMembers.WithLabelValues(v.System, v.Cluster, st).Set(float64(count[st]))
			}
			for reason, n := range v.Rejections {
				rej[[3]string{v.System, v.Cluster, reason}] = n
			}
		}
	}
	m.rejMu.Lock()
	m.rejections = rej
	m.rejMu.Unlock()
}

// rejectionsDesc describes ghostwatch_gossip_join_rejections_total.
var rejectionsDesc = prometheus.NewDesc(sink.Namespace+"_gossip_join_rejections_total", rejectionsHelp,
	[]string{"system", "cluster", "reason"}, nil)

const rejectionsHelp = "Messages the member whose view was read last refused since it started, by system, cluster and reason (memberlist applications using the ghostwatch/gossip package: label, unexpected-node, conflicting-address, refuted-death, refuted-alive). A counter of that member: it starts over when another member's view is read, which rate() reads as a reset."

// rejectionsCollector exports the counts the views give as they are.
type rejectionsCollector struct{ m *Metrics }

func (rejectionsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rejectionsDesc }

func (c rejectionsCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.rejMu.Lock()
	keys := make([][3]string, 0, len(c.m.rejections))
	for k := range c.m.rejections {
		keys = append(keys, k)
	}
	vals := c.m.rejections
	c.m.rejMu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a[0]+a[1]+a[2] < b[0]+b[1]+b[2]
	})
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(rejectionsDesc, prometheus.CounterValue, float64(vals[k]), k[0], k[1], k[2])
	}
}
