package rule

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

const (
	tcp  = snapshot.ProtoTCP
	udp  = snapshot.ProtoUDP
	sctp = snapshot.ProtoSCTP
)

// base is a small cluster: db/postgres (ClusterIP) with one live backend,
// web/api (NodePort 30080) with one live backend, two nodes.
func base() snapshot.Kube {
	return snapshot.Kube{
		Nodes: []snapshot.Node{node("node-a", "192.168.1.10", "fd00::10"), node("node-b", "192.168.1.11")},
		Services: []snapshot.Service{
			svc("db", "postgres", "10.96.100.50", tcp, 5432, 0),
			svc("web", "api", "10.96.0.80", tcp, 80, 30080),
		},
		Pods: []snapshot.Pod{
			pod("db", "postgres-new", "uid-pg-new", "10.244.3.48", t0),
			pod("web", "api-new", "uid-api-new", "10.244.1.200", t0),
			pod("app", "client", "uid-client", "10.244.1.50", t0),
		},
		Endpoints: []snapshot.Endpoint{
			ep("db", "postgres", "postgres-abc", "10.244.3.48", true, false),
			ep("web", "api", "api-xyz", "10.244.1.200", true, false),
		},
	}
}

type want struct {
	rule string
	ip   string
	sev  finding.Severity
}

type ruleCase struct {
	name  string
	kube  func(k *snapshot.Kube)
	flows []snapshot.Flow
	cfg   ConntrackConfig
	// proxy is what translates Services on the node; nil when not read.
	proxy *snapshot.ServiceProxy
	want  []want
}

// flowRules returns the rules that read conntrack flows: the ones the
// tables of flows judge.
func flowRules(rules []Rule) []Rule {
	var out []Rule
	for _, r := range rules {
		if _, ok := r.(snapshot.FlowReader); ok {
			out = append(out, r)
		}
	}
	return out
}

func runCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := base()
			if tc.kube != nil {
				tc.kube(&k)
			}
			s := snap(k, tc.flows...)
			s.ServiceProxy = tc.proxy
			got, skipped := Run(s, flowRules(All(Config{Conntrack: tc.cfg})))
			if len(skipped) != 0 {
				t.Fatalf("rules skipped: %v", skipped)
			}
			// A want is one flow: a finding of several flows counts each.
			var gotW []want
			for _, f := range got {
				n := 1
				if f.Target != nil {
					n = f.Target.Size()
				}
				for range n {
					gotW = append(gotW, want{f.Rule, f.Subject.IP, f.Severity})
				}
				gone, _ := f.Evidence["service_gone"].(bool)
				if f.Target == nil || f.Subject.Flow == "" || f.Message == "" || (f.Subject.Service == "") != gone {
					t.Errorf("finding lacks target, message, detail or service: %+v", f)
				}
				// The filter a collector keeps flows by must keep every
				// flow a finding is made of.
				r, _ := Find(All(Config{Conntrack: tc.cfg}), f.Rule)
				for fl := range f.Target.(*finding.FlowTarget).Flows.All() {
					if !r.(snapshot.FlowReader).FlowFilter(s).Keep(fl) {
						t.Errorf("%s finding on a flow its FlowFilter drops: %s", f.Rule, fl.String())
					}
				}
			}
			sortWants(gotW)
			sortWants(tc.want)
			if len(gotW) != len(tc.want) {
				t.Fatalf("got %d findings %v, want %v", len(gotW), describe(got), tc.want)
			}
			for i := range gotW {
				if gotW[i] != tc.want[i] {
					t.Errorf("finding %d = %+v, want %+v (all: %v)", i, gotW[i], tc.want[i], describe(got))
				}
			}
		})
	}
}

func sortWants(w []want) {
	sort.Slice(w, func(i, j int) bool { return w[i].rule+w[i].ip < w[j].rule+w[j].ip })
}

func describe(fs []finding.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("\n  " + f.Rule + " " + f.Severity.String() + " " + f.Message)
	}
	return b.String()
}

func TestStaleNATFlow(t *testing.T) {
	const client = "10.244.1.50:45678"
	runCases(t, []ruleCase{
		{
			name:  "seed 001: pooled connection to a deleted ClusterIP backend",
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name:  "healthy: backend is a ready endpoint",
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.48:5432")},
		},
		{
			name: "listed is not alive: a not-serving endpoint whose pod no longer exists (the slice lags the deletion)",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, notServing(podEP(ep("db", "postgres", "postgres-abc", "10.244.3.47", false, true), "db", "postgres-0")))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "terminating but still serving, pod gone: kube-proxy may still route there, left alone",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, podEP(ep("db", "postgres", "postgres-abc", "10.244.3.47", false, true), "db", "postgres-0"))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name: "listed, not serving, not terminating, pod gone: a stuck slice",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, podEP(ep("db", "postgres", "postgres-abc", "10.244.3.47", false, false), "db", "postgres-0"))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "draining: terminating, not serving, and its pod still exists",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, notServing(podEP(ep("db", "postgres", "postgres-abc", "10.244.3.47", false, true), "db", "postgres-0")))
				k.Pods = append(k.Pods, deleting(pod("db", "postgres-0", "uid-pg0", "10.244.3.47", t0)))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name: "an endpoint without a Pod targetRef (an address outside the pod network) stays live",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-manual", "10.0.5.5", false, false))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.0.5.5:5432")},
		},
		{
			name: "draining: endpoint terminating, pod still exists",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, deleting(pod("db", "postgres-old", "uid-pg-old", "10.244.3.47", t0)))
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-abc", "10.244.3.47", false, true))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name: "draining: gone from the slices but the terminating pod still holds the IP",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, deleting(pod("db", "postgres-old", "uid-pg-old", "10.244.3.47", t0)))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name: "terminating endpoint whose pod is already gone is still listed: not judged stale",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-abc", "10.244.3.47", false, true))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name: "a finished pod does not hold its IP",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, phase(pod("db", "postgres-old", "uid-pg-old", "10.244.3.47", t0), snapshot.PodSucceeded))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "not DNATed: reply comes from the address the client asked for",
			flows: []snapshot.Flow{{Proto: tcp, State: "ESTABLISHED",
				Orig:  snapshot.Tuple{Src: ip("10.244.1.50"), Dst: ip("10.244.3.47"), SrcPort: 1, DstPort: 5432},
				Reply: snapshot.Tuple{Src: ip("10.244.3.47"), Dst: ip("10.244.1.50"), SrcPort: 5432, DstPort: 1}}},
		},
		{
			name:  "destination is no service frontend",
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.99:5432", "10.244.3.47:5432")},
		},
		{
			name:  "protocol must match the service port",
			flows: []snapshot.Flow{flow(udp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
		},
		{
			name:  "seed 004: NodePort on this node's address",
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "192.168.1.10:30080", "10.244.1.100:8080")},
			want:  []want{{StaleNATFlowID, "10.244.1.100", finding.Warning}},
		},
		{
			name:  "NodePort on this node's IPv6 address",
			flows: []snapshot.Flow{flow(tcp, "[2001:db8::1]:54321", "[fd00::10]:30080", "[fd00:244::100]:8080")},
			want:  []want{{StaleNATFlowID, "fd00:244::100", finding.Warning}},
		},
		{
			name:  "NodePort on another node's address is not this node's frontend",
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "192.168.1.11:30080", "10.244.1.100:8080")},
		},
		{
			name:  "NodePort on a local address of the host the Node object does not list (a second NIC, a VIP)",
			cfg:   ConntrackConfig{LocalAddresses: []netip.Addr{netip.MustParseAddr("10.0.0.10")}},
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "10.0.0.10:30080", "10.244.1.100:8080")},
			want:  []want{{StaleNATFlowID, "10.244.1.100", finding.Warning}},
		},
		{
			name:  "kube-proxy in nftables mode serves NodePorts on the node's primary addresses only: a host's other address is no frontend",
			cfg:   ConntrackConfig{LocalAddresses: []netip.Addr{netip.MustParseAddr("10.0.0.10")}},
			proxy: &snapshot.ServiceProxy{Mode: "nftables", By: "kube-proxy at 127.0.0.1:10249"},
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "10.0.0.10:30080", "10.244.1.100:8080")},
		},
		{
			name:  "kube-proxy in nftables mode: the Node's own address is a frontend",
			cfg:   ConntrackConfig{LocalAddresses: []netip.Addr{netip.MustParseAddr("10.0.0.10")}},
			proxy: &snapshot.ServiceProxy{Mode: "nftables", By: "kube-proxy at 127.0.0.1:10249"},
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "192.168.1.10:30080", "10.244.1.100:8080")},
			want:  []want{{StaleNATFlowID, "10.244.1.100", finding.Warning}},
		},
		{
			name:  "the same flow read without the host's addresses (offline) is no frontend",
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "10.0.0.10:30080", "10.244.1.100:8080")},
		},
		{
			name:  "NodePort on any address with --nodeport-addresses",
			cfg:   ConntrackConfig{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}},
			flows: []snapshot.Flow{flow(tcp, "203.0.113.10:54321", "172.18.0.5:30080", "10.244.1.100:8080")},
			want:  []want{{StaleNATFlowID, "10.244.1.100", finding.Warning}},
		},
		{
			name: "externalIP and LoadBalancer ingress IP",
			kube: func(k *snapshot.Kube) {
				k.Services[1].ExternalIPs = ips("198.51.100.7")
				k.Services[1].LoadBalancerIPs = ips("198.51.100.8")
			},
			flows: []snapshot.Flow{
				flow(tcp, "203.0.113.10:1000", "198.51.100.7:80", "10.244.1.100:8080"),
				flow(tcp, "203.0.113.10:1001", "198.51.100.8:80", "10.244.1.101:8080"),
			},
			want: []want{{StaleNATFlowID, "10.244.1.100", finding.Warning}, {StaleNATFlowID, "10.244.1.101", finding.Warning}},
		},
		{
			name: "several slices: a backend in the second slice is live",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, pod("db", "postgres-2", "uid-pg-2", "10.244.3.49", t0))
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-def", "10.244.3.49", true, false))
			},
			flows: []snapshot.Flow{
				flow(tcp, client, "10.96.100.50:5432", "10.244.3.49:5432"),
				flow(tcp, "10.244.1.50:45679", "10.96.100.50:5432", "10.244.3.47:5432"),
			},
			want: []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "a backend of another service does not count",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, ep("web", "api", "api-xyz", "10.244.3.47", true, false))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432")},
			want:  []want{{StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "IPv6 ClusterIP",
			kube: func(k *snapshot.Kube) { k.Services[0].ClusterIPs = append(k.Services[0].ClusterIPs, ip("fd00:96::50")) },
			flows: []snapshot.Flow{
				flow(tcp, "[fd00:244::50]:45678", "[fd00:96::50]:5432", "[fd00:244::47]:5432"),
			},
			want: []want{{StaleNATFlowID, "fd00:244::47", finding.Warning}},
		},
		{
			name: "UDP DNS client pinned to a deleted backend",
			kube: func(k *snapshot.Kube) {
				k.Services = append(k.Services, svc("kube-system", "dns", "10.96.0.10", udp, 53, 0))
			},
			flows: []snapshot.Flow{flow(udp, "10.244.1.50:33333", "10.96.0.10:53", "10.244.0.5:53")},
			want:  []want{{StaleNATFlowID, "10.244.0.5", finding.Warning}},
		},
		{
			name: "SCTP",
			kube: func(k *snapshot.Kube) {
				k.Services = append(k.Services, svc("tel", "sig", "10.96.0.20", sctp, 3868, 0))
			},
			flows: []snapshot.Flow{state(flow(sctp, "10.244.1.50:3868", "10.96.0.20:3868", "10.244.0.6:3868"), "ESTABLISHED")},
			want:  []want{{StaleNATFlowID, "10.244.0.6", finding.Warning}},
		},
		{
			name: "TIME_WAIT cannot capture new connections: info",
			flows: []snapshot.Flow{
				state(flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432"), "TIME_WAIT"),
				state(flow(tcp, "10.244.1.50:45679", "10.96.100.50:5432", "10.244.3.47:5432"), "FIN_WAIT"),
			},
			want: []want{{StaleNATFlowID, "10.244.3.47", finding.Info}, {StaleNATFlowID, "10.244.3.47", finding.Warning}},
		},
		{
			name: "hostNetwork backend: node address no longer an endpoint",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, hostNet(pod("kube-system", "node-exporter", "uid-ne", "192.168.1.11", t0)))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.0.80:80", "192.168.1.11:9100")},
			want:  []want{{StaleNATFlowID, "192.168.1.11", finding.Warning}},
		},
		{
			name: "hostNetwork backend still an endpoint",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, ep("web", "api", "api-xyz", "192.168.1.11", true, false))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.0.80:80", "192.168.1.11:8080")},
		},
		{
			name: "NodePort to a hostNetwork backend on this node: only the port is rewritten",
			kube: func(k *snapshot.Kube) {
				k.Endpoints = append(k.Endpoints, ep("web", "api", "api-xyz", "192.168.1.10", true, false))
			},
			flows: []snapshot.Flow{
				flow(tcp, "203.0.113.10:1", "192.168.1.10:30080", "192.168.1.10:8080"),
				flow(tcp, "203.0.113.10:2", "192.168.1.10:30080", "192.168.1.11:8080"),
			},
			want: []want{{StaleNATFlowID, "192.168.1.11", finding.Warning}},
		},
		{
			name: "hostNetwork backend terminating on that node: draining",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, deleting(hostNet(pod("web", "api-host", "uid-h", "192.168.1.11", t0))))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.0.80:80", "192.168.1.11:8080")},
		},
		{
			name: "an empty cluster is not everything stale",
			kube: func(k *snapshot.Kube) { *k = snapshot.Kube{} },
			flows: []snapshot.Flow{
				flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432"),
				flow(tcp, "203.0.113.10:54321", "192.168.1.10:30080", "10.244.1.100:8080"),
			},
		},
		{
			name: "ExternalName services have no frontend",
			kube: func(k *snapshot.Kube) { k.Services[0].Type = snapshot.ServiceExternalName },
			flows: []snapshot.Flow{
				flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432"),
			},
		},
	})
}

func TestRunSkipsRulesOnIncompleteEvidence(t *testing.T) {
	s := snap(base(), flow(tcp, "10.244.1.50:1", "10.96.100.50:5432", "10.244.3.47:5432"))
	s.Sources[0] = snapshot.SourceStatus{Name: "kube", Status: snapshot.StatusError, Detail: "connection refused"}
	got, skipped := Run(s, All(Config{}))
	if len(got) != 0 {
		t.Fatalf("findings on incomplete evidence: %v", describe(got))
	}
	if len(skipped) != len(All(Config{})) {
		t.Fatalf("skipped = %+v, want every rule skipped", skipped)
	}
	for _, sk := range skipped {
		r, _ := Find(All(Config{}), sk.Rule)
		if slices.Contains(r.Info().Sources, "kube") && !strings.Contains(sk.Reason, "connection refused") {
			t.Errorf("%s skipped for %q, want the kube error named", sk.Rule, sk.Reason)
		}
	}
}

func TestStaleNATFlowEvidence(t *testing.T) {
	f := started(flow(tcp, "10.244.1.50:45678", "10.96.100.50:5432", "10.244.3.47:5432"), t0.Add(-time.Minute))
	f.ID = 42
	got := NewStaleNATFlow(ConntrackConfig{}).Evaluate(snap(base(), f))
	if len(got) != 1 {
		t.Fatalf("got %d findings, want 1", len(got))
	}
	g := got[0]
	if g.Subject.Service != "db/postgres" || g.Subject.Namespace != "db" || g.Subject.Node != "node-a" ||
		g.Subject.Flow != "tcp 10.244.1.50:45678 -> 10.96.100.50:5432" {
		t.Errorf("subject = %+v", g.Subject)
	}
	for k, v := range map[string]any{"frontend": "10.96.100.50:5432", "backend": "10.244.3.47:5432",
		"frontend_kind": "ClusterIP", "state": "ESTABLISHED", "conntrack_id": uint32(42), "flow_age_seconds": int64(3660)} {
		if g.Evidence[k] != v {
			t.Errorf("evidence[%s] = %v (%T), want %v", k, g.Evidence[k], g.Evidence[k], v)
		}
	}
	if cb, _ := g.Evidence["current_backends"].([]string); len(cb) != 1 || cb[0] != "10.244.3.48" {
		t.Errorf("current_backends = %v", g.Evidence["current_backends"])
	}
	if ft, ok := g.Target.(*finding.FlowTarget); !ok || ft.Size() != 1 || ft.Flows.First() != f {
		t.Errorf("finding targets %+v, want flow %+v", g.Target, f)
	}
	if ft := g.Target; ft.Group() != "10.244.3.47" || ft.Kind() != finding.FlowKind {
		t.Errorf("target group %q kind %q", ft.Group(), ft.Kind())
	}
}

// A flow's timeout is evidence only when known: the agent's index does
// not keep it, and a flow it lends reads 0, which is not "expires now".
func TestStaleNATFlowEvidenceOfTimeout(t *testing.T) {
	for _, timeout := range []uint32{0, 117} {
		f := started(flow(tcp, "10.244.1.50:45678", "10.96.100.50:5432", "10.244.3.47:5432"), t0.Add(-time.Minute))
		f.Timeout = timeout
		got := NewStaleNATFlow(ConntrackConfig{}).Evaluate(snap(base(), f))
		if len(got) != 1 {
			t.Fatalf("got %d findings, want 1", len(got))
		}
		secs, said := got[0].Evidence["timeout_seconds"]
		_, expires := got[0].Evidence["expires_in"]
		if said != (timeout > 0) || expires != said || (said && secs != timeout) {
			t.Errorf("timeout %d: evidence says timeout_seconds %v (%v), expires_in %v", timeout, secs, said, expires)
		}
	}
}

// The re-check judges the finding again on a fresh view that holds only
// what RecheckQuery named: the Service, its endpoints, the pods at the
// backend address, the node.
func TestStaleNATFlowRecheck(t *testing.T) {
	r := NewStaleNATFlow(ConntrackConfig{})
	f := flow(tcp, "10.244.1.50:1", "10.96.100.50:5432", "10.244.3.47:5432")
	f.ID = 9
	s := snap(base(), f)
	fs := r.Evaluate(s)
	if len(fs) != 1 {
		t.Fatalf("got %d findings, want 1", len(fs))
	}
	q := r.RecheckQuery(s, fs[0])
	if len(q.Services) != 1 || q.Services[0] != (snapshot.ObjectRef{Namespace: "db", Name: "postgres"}) ||
		len(q.PodIPs) != 1 || q.PodIPs[0] != ip("10.244.3.47") || len(q.Nodes) != 1 || q.Nodes[0] != "node-a" {
		t.Fatalf("query = %+v", q)
	}
	pg := base().Services[0]
	for _, tc := range []struct {
		name string
		kube snapshot.Kube
		want string
	}{
		{"still stale", snapshot.Kube{Services: []snapshot.Service{pg}}, ""},
		{"back in the slice", snapshot.Kube{Services: []snapshot.Service{pg},
			Endpoints: []snapshot.Endpoint{ep("db", "postgres", "pg-1", "10.244.3.47", true, false)}}, "endpoint of db/postgres again"},
		{"its pod terminating", snapshot.Kube{Services: []snapshot.Service{pg},
			Pods: []snapshot.Pod{deleting(pod("db", "postgres-old", "uid-old", "10.244.3.47", t0))}}, "draining"},
		{"another pod holds it", snapshot.Kube{Services: []snapshot.Service{pg},
			Pods: []snapshot.Pod{pod("payments", "ledger", "uid-l", "10.244.3.47", t0)}}, "held by pod payments/ledger"},
		{"the Service is gone", snapshot.Kube{}, "no longer addresses a frontend of db/postgres"},
	} {
		fresh := &snapshot.Snapshot{NodeName: "node-a", Kube: &tc.kube}
		err := r.Recheck(fresh, fs)[0]
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// An Event names the client pod only when the pod that holds the client
// address provably opened the flow: it held the address before the flow
// started. Otherwise the address may have been inherited.
func TestStaleNATFlowConcernsClientOnlyWhenProven(t *testing.T) {
	client := "10.244.1.50:45678" // app/client, started at t0
	for _, tc := range []struct {
		name   string
		start  time.Time
		kube   func(k *snapshot.Kube)
		client bool
	}{
		{"flow started after the client pod", t0.Add(time.Minute), nil, true},
		{"no start time: no proof", time.Time{}, nil, false},
		{"flow older than the pod holding the address", t0.Add(-time.Minute), nil, false},
		{"within the clock skew", t0.Add(time.Second), nil, false},
		{"two pods report the address", t0.Add(time.Minute), func(k *snapshot.Kube) {
			k.Pods = append(k.Pods, pod("other", "dup", "uid-dup", "10.244.1.50", t0))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := base()
			if tc.kube != nil {
				tc.kube(&k)
			}
			f := started(flow(tcp, client, "10.96.100.50:5432", "10.244.3.47:5432"), tc.start)
			fs := NewStaleNATFlow(ConntrackConfig{}).Evaluate(snap(k, f))
			if len(fs) != 1 {
				t.Fatalf("got %d findings", len(fs))
			}
			want := []finding.ObjectRef{{Kind: "Service", Namespace: "db", Name: "postgres"}}
			if tc.client {
				want = append(want, finding.ObjectRef{Kind: "Pod", Namespace: "app", Name: "client", UID: "uid-client"})
			}
			if fmt.Sprint(fs[0].Concerns) != fmt.Sprint(want) {
				t.Errorf("concerns = %v, want %v", fs[0].Concerns, want)
			}
		})
	}
}
