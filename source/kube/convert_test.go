package kube

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/internal/kubetest"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func ptr[T any](v T) *T { return &v }

var (
	t0 = time.Date(2026, 11, 22, 14, 0, 5, 0, time.UTC)
	t1 = t0.Add(3 * time.Second)
)

func TestPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   corev1.Pod
		want snapshot.Pod
	}{{
		name: "running dual-stack",
		in: corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: "u1", Namespace: "web", Name: "api-1",
				CreationTimestamp: metav1.NewTime(t0.In(time.FixedZone("CET", 3600)))},
			Spec: corev1.PodSpec{NodeName: "worker-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5",
				PodIPs:    []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}},
				StartTime: ptr(metav1.NewTime(t1))},
		},
		want: snapshot.Pod{UID: "u1", Namespace: "web", Name: "api-1", Node: "worker-1", Phase: "Running",
			IPs: addrs("10.244.1.5", "fd00:10:244:1::5"), Created: t0, StartTime: t1},
	}, {
		name: "podIP only, terminating, host network",
		in: corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy-x",
				DeletionTimestamp: ptr(metav1.NewTime(t1))},
			Spec:   corev1.PodSpec{NodeName: "worker-2", HostNetwork: true},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "192.168.50.2"},
		},
		want: snapshot.Pod{Namespace: "kube-system", Name: "kube-proxy-x", Node: "worker-2", Phase: "Running",
			IPs: addrs("192.168.50.2"), HostNetwork: true, Deleting: true},
	}, {
		name: "pending, no IP, garbage IPs skipped",
		in: corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b"},
			Status: corev1.PodStatus{Phase: corev1.PodPending,
				PodIPs: []corev1.PodIP{{IP: "not-an-ip"}, {IP: ""}, {IP: "fe80::1%eth0"}, {IP: "010.001.002.003"}, {IP: "::ffff:10.1.2.3"}}},
		},
		want: snapshot.Pod{Namespace: "a", Name: "b", Phase: "Pending", IPs: addrs("10.1.2.3")},
	}, {
		name: "an IPv4-mapped podIP is kept as the IPv4 address, marked",
		in: corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "fd00::5",
				PodIPs: []corev1.PodIP{{IP: "fd00::5"}, {IP: "::ffff:10.0.0.5"}}},
		},
		want: snapshot.Pod{Namespace: "ns", Name: "b", Phase: "Running", IPs: addrs("fd00::5", "10.0.0.5"), Mapped: 0b10},
	}, {
		name: "status.podIP alone, IPv4-mapped",
		in: corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "::ffff:10.0.0.6"},
		},
		want: snapshot.Pod{Namespace: "ns", Name: "c", Phase: "Running", IPs: addrs("10.0.0.6"), Mapped: 0b1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Pod(&tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Pod():\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A pod's IP is said as its status wrote it: IPv4-mapped when it was.
func TestPodWrittenAs(t *testing.T) {
	p := Pod(&corev1.Pod{Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00::5"}, {IP: "::ffff:10.0.0.5"}}}})
	for ip, want := range map[string]string{"10.0.0.5": "::ffff:10.0.0.5", "fd00::5": "fd00::5", "::ffff:10.0.0.5": "::ffff:10.0.0.5"} {
		if got := p.WrittenAs(netip.MustParseAddr(ip)); got != want {
			t.Errorf("WrittenAs(%s) = %q, want %q", ip, got, want)
		}
	}
	plain := Pod(&corev1.Pod{Status: corev1.PodStatus{PodIP: "10.0.0.5"}})
	if got := plain.WrittenAs(netip.MustParseAddr("10.0.0.5")); got != "10.0.0.5" {
		t.Errorf("a pod that wrote 10.0.0.5: WrittenAs = %q", got)
	}
}

func TestParseIP(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":         "10.0.0.1",
		"010.000.001.009":  "10.0.1.9",
		"fd00::1":          "fd00::1",
		"::ffff:192.0.2.1": "192.0.2.1",
		"":                 "",
		"None":             "",
		"1.2.3":            "",
		"1.2.3.256":        "",
		"1.2.3.0256":       "",
		"fe80::1%eth0":     "",
		"1.2.3.4/24":       "",
		"-1.2.3.4":         "",
	} {
		got, ok := ParseIP(in)
		if want == "" {
			if ok {
				t.Errorf("ParseIP(%q) = %v, want failure", in, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(want) {
			t.Errorf("ParseIP(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
}

func TestService(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   corev1.Service
		want snapshot.Service
	}{{
		name: "nodeport, protocol defaults to TCP",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "api"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.80", ClusterIPs: []string{"10.96.0.80"},
				Selector: map[string]string{"app": "api"},
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, NodePort: 30080},
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
					{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 9999},
				}},
		},
		want: snapshot.Service{Namespace: "web", Name: "api", Type: "NodePort", ClusterIPs: addrs("10.96.0.80"), HasSelector: true,
			Ports: []snapshot.ServicePort{
				{Name: "http", Protocol: snapshot.ProtoTCP, Port: 80, NodePort: 30080},
				{Name: "dns", Protocol: snapshot.ProtoUDP, Port: 53, NodePort: 30053},
				{Name: "sctp", Protocol: snapshot.ProtoSCTP, Port: 9999},
			}},
	}, {
		name: "clusterIP fallback, empty type, externalIPs, LB ingress",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.5.5", ExternalIPs: []string{"203.0.113.7", "bogus"},
				Ports: []corev1.ServicePort{{Port: 443, Protocol: "TCP"}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "198.51.100.9"}, {Hostname: "lb.example.com"}}}},
		},
		want: snapshot.Service{Namespace: "edge", Name: "gw", Type: "ClusterIP", ClusterIPs: addrs("10.96.5.5"),
			ExternalIPs: addrs("203.0.113.7"), LoadBalancerIPs: addrs("198.51.100.9"),
			Ports: []snapshot.ServicePort{{Protocol: snapshot.ProtoTCP, Port: 443}}},
	}, {
		name: "headless",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg-hl"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"},
				Ports: []corev1.ServicePort{{Port: 5432}}},
		},
		want: snapshot.Service{Namespace: "db", Name: "pg-hl", Type: "ClusterIP",
			Ports: []snapshot.ServicePort{{Protocol: snapshot.ProtoTCP, Port: 5432}}},
	}, {
		name: "dual-stack, clusterIPs win over clusterIP, bad ports skipped",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "ds"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.9.9", ClusterIPs: []string{"10.96.9.9", "fd00:10:96::9"},
				Ports: []corev1.ServicePort{{Port: 0}, {Port: 70000}, {Port: 8080, Protocol: "ICMP"}, {Port: 80, NodePort: -1}}},
		},
		want: snapshot.Service{Namespace: "web", Name: "ds", Type: "ClusterIP", ClusterIPs: addrs("10.96.9.9", "fd00:10:96::9"),
			Ports: []snapshot.ServicePort{{Protocol: snapshot.ProtoTCP, Port: 80}}},
	}, {
		name: "external name",
		in: corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "ext"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
		},
		want: snapshot.Service{Namespace: "x", Name: "ext", Type: "ExternalName"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Service(&tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Service():\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	slice := func(labels map[string]string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "web", Name: "api-abcde", Labels: labels},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
		}
	}
	svc := map[string]string{discoveryv1.LabelServiceName: "api"}
	ref := snapshot.ObjectRef{Namespace: "web", Name: "api"}
	podRef := func(ns, name string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		name string
		in   *discoveryv1.EndpointSlice
		want []snapshot.Endpoint
	}{{
		name: "no service label",
		in:   slice(nil, discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}}),
	}, {
		name: "nil conditions: ready, serving, not terminating",
		in: slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, NodeName: ptr("worker-1"),
			TargetRef: podRef("web", "api-1")}),
		want: []snapshot.Endpoint{{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.5"),
			Ready: true, Serving: true, Pod: &snapshot.ObjectRef{Namespace: "web", Name: "api-1"}, Node: "worker-1"}},
	}, {
		name: "ready false, serving nil follows ready",
		in: slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.244.1.6"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}}),
		want: []snapshot.Endpoint{{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.6")}},
	}, {
		name: "terminating but serving (draining), targetRef namespace defaults",
		in: slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.244.1.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)},
			TargetRef:  podRef("", "api-2")}),
		want: []snapshot.Endpoint{{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.7"),
			Serving: true, Terminating: true, Pod: &snapshot.ObjectRef{Namespace: "web", Name: "api-2"}}},
	}, {
		name: "ready nil but serving false",
		in: slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.244.1.8"},
			Conditions: discoveryv1.EndpointConditions{Serving: ptr(false), Terminating: ptr(false)}}),
		want: []snapshot.Endpoint{{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.8"), Ready: true}},
	}, {
		name: "several addresses, bad ones skipped, non-pod targetRef",
		in: slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.244.1.9", "api.example.com", "10.244.1.10"},
			TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "worker-1"}}),
		want: []snapshot.Endpoint{
			{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.9"), Ready: true, Serving: true},
			{Service: ref, Slice: "api-abcde", Address: netip.MustParseAddr("10.244.1.10"), Ready: true, Serving: true},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Endpoints(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Endpoints():\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// Endpoints sharing a targetRef must not share the pointer.
	got := Endpoints(slice(svc, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1", "10.0.0.2"}, TargetRef: podRef("web", "p")}))
	if len(got) != 2 || got[0].Pod == got[1].Pod {
		t.Errorf("endpoints share a Pod pointer: %+v", got)
	}
}

func TestNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "worker-1"},
			{Type: corev1.NodeInternalIP, Address: "192.168.50.1"},
			{Type: corev1.NodeInternalIP, Address: "fd00:50::1"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.1"},
			{Type: corev1.NodeExternalIP, Address: "192.168.50.1"},
			{Type: corev1.NodeInternalDNS, Address: "10.9.9.9"},
			{Type: corev1.NodeInternalIP, Address: "garbage"},
		}},
	}
	want := snapshot.Node{Name: "worker-1", Addresses: addrs("192.168.50.1", "fd00:50::1", "203.0.113.1")}
	if got := Node(n); !reflect.DeepEqual(got, want) {
		t.Errorf("Node():\n got %+v\nwant %+v", got, want)
	}
}

func TestLookupNode(t *testing.T) {
	k := &snapshot.Kube{Nodes: []snapshot.Node{{Name: "a"}, {Name: "b", Addresses: addrs("10.0.0.2")}}}
	n, ok := LookupNode(k, "b")
	if !ok || n.Name != "b" || len(n.Addresses) != 1 {
		t.Errorf("LookupNode(b) = %+v, %v", n, ok)
	}
	if n != &k.Nodes[1] {
		t.Errorf("LookupNode returned a copy, want a pointer into the snapshot")
	}
	if n, ok := LookupNode(k, "c"); ok || n != nil {
		t.Errorf("LookupNode(c) = %+v, %v; want nothing", n, ok)
	}
	if _, ok := LookupNode(nil, "a"); ok {
		t.Errorf("LookupNode(nil) found a node")
	}
}

func TestTrimPod(t *testing.T) {
	const applied = "kubectl.kubernetes.io/last-applied-configuration"
	gossip := map[string]string{"ghostwatch.io/gossip": "consul", "ghostwatch.io/gossip-port": "8500"}
	for _, tc := range []struct {
		name string
		trim func(any) (any, error)
		want map[string]string // the annotations kept
	}{
		{"TrimPod", TrimPod, nil},
		{"keeping none", TrimPodKeeping(), nil},
		// The controller keeps the annotations that name a pod's gossip
		// agent.
		{"keeping a prefix", TrimPodKeeping("ghostwatch.io/gossip"), gossip},
		{"keeping two", TrimPodKeeping("ghostwatch.io/gossip", applied),
			map[string]string{applied: "{...}", "ghostwatch.io/gossip": "consul", "ghostwatch.io/gossip-port": "8500"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := kubetest.FullPod()
			orig := in.DeepCopy()
			out, err := tc.trim(in)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := out.(*corev1.Pod)
			if !ok {
				t.Fatalf("returned %T", out)
			}
			if !reflect.DeepEqual(in, orig) {
				t.Errorf("modified its argument")
			}
			if p == in {
				t.Errorf("returned its argument")
			}
			want := &corev1.Pod{
				TypeMeta: in.TypeMeta,
				ObjectMeta: metav1.ObjectMeta{UID: "u1", Namespace: "web", Name: "api-1", ResourceVersion: "4711",
					CreationTimestamp: in.CreationTimestamp, DeletionTimestamp: in.DeletionTimestamp,
					Annotations: tc.want},
				Spec: corev1.PodSpec{NodeName: "worker-1", HostNetwork: true},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: in.Status.PodIPs,
					StartTime: in.Status.StartTime},
			}
			if !reflect.DeepEqual(p, want) {
				t.Errorf("trimmed:\n got %+v\nwant %+v", p, want)
			}
			// What the rules read survives the trim.
			if !reflect.DeepEqual(Pod(p), Pod(in)) {
				t.Errorf("Pod(trimmed) = %+v, want %+v", Pod(p), Pod(in))
			}
			// Idempotent.
			again, _ := tc.trim(p)
			if !reflect.DeepEqual(again, p) {
				t.Errorf("not idempotent")
			}
			// Other things pass through unchanged.
			tomb := cache.DeletedFinalStateUnknown{Key: "web/api-1", Obj: in}
			if got, err := tc.trim(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
				t.Errorf("trimmed a tombstone: %#v, %v", got, err)
			}
			svc := &corev1.Service{}
			if got, _ := tc.trim(svc); got != any(svc) {
				t.Errorf("trimmed a service: %#v", got)
			}
			if got, _ := tc.trim((*corev1.Pod)(nil)); got != any((*corev1.Pod)(nil)) {
				t.Errorf("trimmed a nil pod: %#v", got)
			}
		})
	}
}

func TestTrimOthers(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "w", ResourceVersion: "9", Labels: map[string]string{"a": "b"}},
		// The pod CIDRs are where host-local takes a node's addresses
		// from when no configuration names its ranges.
		Spec: corev1.NodeSpec{PodCIDR: "10.244.3.0/24", PodCIDRs: []string{"10.244.3.0/24", "fd00:3::/64"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"big"}}},
		},
	}
	got, _ := TrimNode(n)
	tn := got.(*corev1.Node)
	if len(tn.Status.Images) != 0 || tn.Labels != nil || tn.ResourceVersion != "9" || !reflect.DeepEqual(Node(tn), Node(n)) || len(Node(tn).PodCIDRs) != 2 {
		t.Errorf("TrimNode = %+v", tn)
	}
	if len(n.Status.Images) != 1 {
		t.Errorf("TrimNode modified its argument")
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1"}}
	got, _ = TrimMeta(svc)
	ts := got.(*corev1.Service)
	if ts.Annotations != nil || ts.ManagedFields != nil || ts.Spec.ClusterIP != "10.96.0.1" || svc.Annotations == nil {
		t.Errorf("TrimMeta(service) = %+v (input now %+v)", ts, svc)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "e", ManagedFields: []metav1.ManagedFieldsEntry{{}}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}}
	got, _ = TrimMeta(es)
	if te := got.(*discoveryv1.EndpointSlice); te.ManagedFields != nil || len(te.Endpoints) != 1 || es.ManagedFields == nil {
		t.Errorf("TrimMeta(slice) = %+v", te)
	}
}
