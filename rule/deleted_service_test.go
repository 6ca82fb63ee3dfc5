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
