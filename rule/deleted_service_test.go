package rule

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// serviceRange gives the cluster the ServiceCIDR the API server creates by
// default, named "kubernetes".
func serviceRange(k *snapshot.Kube) {
	k.ServiceCIDRs = []snapshot.ServiceCIDR{{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}}
}

// A Service deleted together with its pods (helm uninstall) leaves the
// kernel translating a client's flow to a backend nothing holds: a ghost,
// told by the flow's destination lying in a service range that no Service
// holds any more.
func TestStaleNATFlowToDeletedService(t *testing.T) {
	const client = "10.244.1.50:45678"
	ghost := flow(tcp, client, "10.96.7.7:6379", "10.244.3.60:6379")
	runCases(t, []ruleCase{
		{
			name:  "deleted Service, backend gone: stale",
			kube:  serviceRange,
			flows: []snapshot.Flow{ghost, flow(udp, "10.244.1.50:5353", "10.96.7.7:6379", "10.244.3.60:6379")},
			want:  []want{{StaleNATFlowID, "10.244.3.60", finding.Warning}, {StaleNATFlowID, "10.244.3.60", finding.Warning}},
		},
		{
			name:  "without a service range nothing tells the address was a Service's",
			flows: []snapshot.Flow{ghost},
		},
		{
			name:  "--service-cidr gives the range",
			cfg:   ConntrackConfig{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}},
			flows: []snapshot.Flow{ghost},
			want:  []want{{StaleNATFlowID, "10.244.3.60", finding.Warning}},
		},
		{
			name: "deleted Service whose backend pod still runs: the flow still reaches it",
			kube: func(k *snapshot.Kube) {
				serviceRange(k)
				k.Pods = append(k.Pods, pod("cache", "redis-0", "uid-r", "10.244.3.60", t0))
			},
			flows: []snapshot.Flow{ghost},
		},
		{
			name:  "deleted Service whose backend is a node address: hostNetwork, left alone",
			kube:  serviceRange,
			flows: []snapshot.Flow{flow(tcp, client, "10.96.7.7:6379", "192.168.1.11:6379")},
		},
		{
			name: "a Service holds the address on other ports: not a deleted Service",
			kube: func(k *snapshot.Kube) {
				serviceRange(k)
				k.Services = append(k.Services, svc("cache", "redis", "10.96.7.7", tcp, 6380, 0))
			},
			flows: []snapshot.Flow{ghost},
		},
		{
			name:  "outside every service range",
			kube:  serviceRange,
			flows: []snapshot.Flow{flow(tcp, client, "10.100.7.7:6379", "10.244.3.60:6379")},
		},
		{
			name: "never DNATed: not a Service flow",
			kube: serviceRange,
			flows: []snapshot.Flow{func() snapshot.Flow {
				f := flow(tcp, client, "10.96.7.7:6379", "10.96.7.7:6379")
				f.Status &^= snapshot.StatusDstNAT
				return f
			}()},
		},
		{
			name: "scaled to zero (a Service with no endpoints) is judged as before",
			kube: func(k *snapshot.Kube) {
				serviceRange(k)
				k.Endpoints = k.Endpoints[1:] // db/postgres has none
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
	})
}

func TestDeletedServiceFindingAndRecheck(t *testing.T) {
	r := NewStaleNATFlow(ConntrackConfig{})
	k := base()
	serviceRange(&k)
	f := flow(tcp, "10.244.1.50:1", "10.96.7.7:6379", "10.244.3.60:6379")
	s := snap(k, f)
	fs := r.Evaluate(s)
	if len(fs) != 1 {
		t.Fatalf("got %d findings, want 1", len(fs))
	}
	g := fs[0]
	if g.Subject.Service != "" || g.Evidence["service_gone"] != true || g.Evidence["service_cidr"] != "10.96.0.0/16" ||
		g.Evidence["service_cidr_object"] != "kubernetes" {
		t.Errorf("subject %+v, evidence %v", g.Subject, g.Evidence)
	}
	for _, w := range []string{"no Service holds 10.96.7.7", "ServiceCIDR kubernetes (10.96.0.0/16)", "no pod holds 10.244.3.60"} {
		if !strings.Contains(g.Message, w) {
			t.Errorf("message %q lacks %q", g.Message, w)
		}
	}
	if d := staleDetail(g); !strings.HasPrefix(d, "Service of 10.96.7.7:6379 deleted, backend 10.244.3.60:6379 gone") {
		t.Errorf("detail %q", d)
	}
	// With no Service to put it on, the Event goes on the node.
	if len(g.Concerns) != 1 || g.Concerns[0] != (finding.ObjectRef{Kind: "Node", Name: "node-a"}) {
		t.Errorf("concerns %+v", g.Concerns)
	}
	q := r.RecheckQuery(s, g)
	if len(q.Services) != 0 || len(q.ServiceIPs) != 1 || q.ServiceIPs[0] != ip("10.96.7.7") ||
		len(q.PodIPs) != 1 || q.PodIPs[0] != ip("10.244.3.60") {
		t.Fatalf("query = %+v", q)
	}
	ranges := []snapshot.ServiceCIDR{{Name: "kubernetes", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}}
	redis := svc("cache", "redis", "10.96.7.7", tcp, 6379, 0)
	for _, tc := range []struct {
		name string
		kube snapshot.Kube
		want string
	}{
		{"still deleted", snapshot.Kube{ServiceCIDRs: ranges}, ""},
		{"the address went to a new Service", snapshot.Kube{ServiceCIDRs: ranges, Services: []snapshot.Service{redis}},
			"belongs to Service cache/redis now"},
		{"a pod holds the backend", snapshot.Kube{ServiceCIDRs: ranges,
			Pods: []snapshot.Pod{pod("cache", "redis-1", "uid-r1", "10.244.3.60", t0)}}, "held again"},
		{"the range is gone", snapshot.Kube{}, "10.96.7.7 is in no service range any more"},
	} {
		fresh := &snapshot.Snapshot{NodeName: "node-a", Kube: &tc.kube}
		err := r.Recheck(fresh, fs)[0]
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A UDP flow to a frontend the kernel never translated: created while no
// rule translated the Service, every datagram of it goes to the Service
// address itself. TCP is left alone, and so are untranslated flows to
// addresses that are no frontend.
func TestStaleNATFlowNeverTranslated(t *testing.T) {
	untranslated := func(proto snapshot.Proto, client, dst string) snapshot.Flow {
		f := flow(proto, client, dst, dst)
		f.Status = snapshot.StatusAssured | snapshot.StatusSeenReply
		return f
	}
	runCases(t, []ruleCase{
		{
			name:  "UDP to a ClusterIP, never translated",
			kube:  withDNS,
			flows: []snapshot.Flow{untranslated(udp, "10.244.1.50:5353", "10.96.0.10:53")},
			want:  []want{{StaleNATFlowID, "10.96.0.10", finding.Warning}},
		},
		{
			name: "UDP to a NodePort, never translated",
			kube: func(k *snapshot.Kube) {
				k.Services = append(k.Services, svc("web", "syslog", "10.96.0.81", udp, 514, 30514))
			},
			flows: []snapshot.Flow{untranslated(udp, "203.0.113.10:40000", "192.168.1.10:30514")},
			want:  []want{{StaleNATFlowID, "192.168.1.10", finding.Warning}},
		},
		{
			name:  "TCP never translated: retried from a new port",
			flows: []snapshot.Flow{untranslated(tcp, "10.244.1.50:40000", "10.96.100.50:5432")},
		},
		{
			name:  "UDP to an address that is no frontend",
			flows: []snapshot.Flow{untranslated(udp, "10.244.1.50:40000", "8.8.8.8:53")},
		},
	})
	r := NewStaleNATFlow(ConntrackConfig{})
	k := base()
	withDNS(&k)
	s := snap(k, untranslated(udp, "10.244.1.50:5353", "10.96.0.10:53"))
	fs := r.Evaluate(s)
	if len(fs) != 1 || fs[0].Evidence["never_translated"] != true || !strings.Contains(fs[0].Message, "was never translated") ||
		fs[0].Remove != "conntrack -D -p udp -s 10.244.1.50 -d 10.96.0.10 --sport 5353 --dport 53 -r 10.96.0.10" {
		t.Fatalf("findings %+v", fs)
	}
	if q := r.RecheckQuery(s, fs[0]); len(q.PodIPs) != 0 || len(q.Services) != 1 {
		t.Errorf("query %+v: a frontend address is no pod's", q)
	}
	if errs := r.Recheck(&snapshot.Snapshot{NodeName: "node-a", Kube: &snapshot.Kube{Services: k.Services}}, fs); errs[0] != nil {
		t.Errorf("recheck: %v", errs[0])
	}
	if errs := r.Recheck(&snapshot.Snapshot{NodeName: "node-a", Kube: &snapshot.Kube{}}, fs); errs[0] == nil {
		t.Errorf("recheck with the Service gone passed")
	}
}

func withDNS(k *snapshot.Kube) {
	k.Services = append(k.Services, svc("kube-system", "kube-dns", "10.96.0.10", udp, 53, 0))
}

// A table with more flows translated from another node's NodePorts than
// from this node's was read on that node.
func TestWrongNode(t *testing.T) {
	other := func(port string) snapshot.Flow {
		return flow(tcp, "203.0.113.10:"+port, "192.168.1.11:30080", "10.244.1.200:8080")
	}
	own := func(port string) snapshot.Flow {
		return flow(tcp, "203.0.113.10:"+port, "192.168.1.10:30080", "10.244.1.200:8080")
	}
	for _, tc := range []struct {
		name  string
		flows []snapshot.Flow
		want  string
	}{
		{"this node's table", []snapshot.Flow{own("1"), own("2"), other("3")}, ""},
		{"node-b's table", []snapshot.Flow{own("1"), other("2"), other("3")},
			"most likely read on node node-b, not node-a: 2 of its flows were translated from NodePorts on node-b's addresses, 1 on node-a's; scan again with --node-name node-b"},
		{"ClusterIP flows say nothing", []snapshot.Flow{flow(tcp, "10.244.1.50:1", "10.96.0.80:80", "10.244.1.200:8080")}, ""},
	} {
		rules := All(Config{})
		s := snap(base())
		// The filter's counts are the pass's.
		s.BeginPass()
		f := rules[0].(snapshot.FlowReader).FlowFilter(s)
		for i := range tc.flows {
			f.Keep(&tc.flows[i])
		}
		err := WrongNode(rules, s)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
