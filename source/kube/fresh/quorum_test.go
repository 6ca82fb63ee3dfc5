package fresh

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/kubetest"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestQuorum(t *testing.T) {
	ready := true
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24", "fd00::/64"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10",
			Ports: []corev1.ServicePort{{Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "other"}}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.7"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p5", UID: "u5"},
			Status: corev1.PodStatus{PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p6", UID: "u6"},
			Status: corev1.PodStatus{PodIP: "10.244.0.6", PodIPs: []corev1.PodIP{{IP: "10.244.0.6"}}}},
	}
	client := fake.NewClientset(objs...)
	var selectors []string
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	ctx := context.Background()
	q := snapshot.Query{Services: []snapshot.ObjectRef{{Namespace: "ns", Name: "svc"}, {Namespace: "ns", Name: "gone"}},
		PodIPs: []netip.Addr{netip.MustParseAddr("10.244.0.5")}, Nodes: []string{"node-a", "node-gone"}}
	k, err := Quorum(ctx, client, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Services) != 1 || k.Services[0].Name != "svc" || len(k.Endpoints) != 1 || k.Endpoints[0].Address != netip.MustParseAddr("10.244.0.5") ||
		len(k.Nodes) != 1 || len(k.Pods) != 1 || k.Pods[0].UID != "u5" {
		t.Fatalf("quorum read %+v", k)
	}
	if len(selectors) != 1 || selectors[0] != "status.podIP=10.244.0.5" {
		t.Errorf("pod lists selected by %q", selectors)
	}
	// An address of the cluster's second family cannot be looked up.
	q.PodIPs = []netip.Addr{netip.MustParseAddr("fd00::5")}
	if _, err := Quorum(ctx, client, q); err == nil || !strings.Contains(err.Error(), "second address family") {
		t.Errorf("second-family address: %v", err)
	}
	// A failed read is an error that names what was read.
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := Quorum(ctx, client, q); err == nil || !strings.Contains(err.Error(), "quorum read of service ns/svc: connection refused") {
		t.Errorf("failed read: %v", err)
	}
}

// The proof that a Service was deleted: no IPAddress books its address to
// a Service, read with a quorum read; when one does, that Service is read
// as the query's Services are.
func TestQuorumServiceIPs(t *testing.T) {
	ipAddr := func(name string, parent *networkingv1.ParentReference) *networkingv1.IPAddress {
		return &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IPAddressSpec{ParentRef: parent}}
	}
	client := fake.NewClientset(
		kubetest.ServiceCIDR("kubernetes", "10.96.0.0/16"),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "cache", Name: "redis"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.8",
			Ports: []corev1.ServicePort{{Port: 6379}}}},
		ipAddr("10.96.7.8", &networkingv1.ParentReference{Resource: "services", Namespace: "cache", Name: "redis"}),
		ipAddr("10.96.7.9", &networkingv1.ParentReference{Group: "gateway.example.io", Resource: "gateways", Namespace: "gw", Name: "g"}),
	)
	ctx := context.Background()
	k, err := Quorum(ctx, client, snapshot.Query{ServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.7.7")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Services) != 0 || len(k.ServiceCIDRs) != 1 || k.ServiceCIDRs[0].Name != "kubernetes" {
		t.Fatalf("an address no Service holds: %+v", k)
	}
	k, err = Quorum(ctx, client, snapshot.Query{ServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.7.8")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Services) != 1 || k.Services[0].Name != "redis" || len(k.ServiceCIDRs) != 1 {
		t.Fatalf("an address booked to cache/redis: %+v", k)
	}
	_, err = Quorum(ctx, client, snapshot.Query{ServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.7.9")}})
	if err == nil || !strings.Contains(err.Error(), "10.96.7.9 is booked by IPAddress 10.96.7.9 to gateways.gateway.example.io gw/g, not to a Service") {
		t.Errorf("an address booked to something else: %v", err)
	}
	// Without the IPAddress API nothing proves the Service gone.
	client.PrependReactor("list", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io", Resource: "ipaddresses"}, "")
	})
	_, err = Quorum(ctx, client, snapshot.Query{ServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.7.7")}})
	if err == nil || !strings.Contains(err.Error(), "cannot prove that no Service holds 10.96.7.7") {
		t.Errorf("no IPAddress API: %v", err)
	}
}

// Collect replaces the snapshot's cluster objects with what Quorum reads;
// without a client, or when a read fails, it leaves them as they were.
func TestCollect(t *testing.T) {
	ctx := context.Background()
	q := snapshot.Query{Nodes: []string{"node-a"}}
	kept := &snapshot.Kube{}
	s := &snapshot.Snapshot{Kube: kept}
	if err := Collect(ctx, nil, q, Families{}, s); err == nil || s.Kube != kept {
		t.Errorf("without a client: %v, Kube replaced: %v", err, s.Kube != kept)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	if err := Collect(ctx, client, q, Families{}, s); err != nil {
		t.Fatal(err)
	}
	if s.Kube == kept || len(s.Kube.Nodes) != 1 || s.Kube.Nodes[0].Name != "node-a" {
		t.Errorf("fresh nodes %+v", s.Kube)
	}
	s.Kube = kept
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if err := Collect(ctx, client, q, Families{}, s); err == nil || s.Kube != kept {
		t.Errorf("a failed read: %v, Kube replaced: %v", err, s.Kube != kept)
	}
	// A query of a gossip cluster only names nothing here.
	gossipOnly := snapshot.Query{Gossip: []snapshot.GossipCluster{{System: "consul", Cluster: "ns/consul"}}}
	if err := Collect(ctx, nil, gossipOnly, Families{}, s); err != nil || s.Kube != kept {
		t.Errorf("a query of no cluster object: %v, Kube replaced: %v", err, s.Kube != kept)
	}
}

func TestFamiliesOf(t *testing.T) {
	pod := func(host bool, ips ...string) snapshot.Pod {
		p := snapshot.Pod{HostNetwork: host}
		for _, ip := range ips {
			p.IPs = append(p.IPs, netip.MustParseAddr(ip))
		}
		return p
	}
	for _, c := range []struct {
		name string
		pods []snapshot.Pod
		want Families
	}{
		{"no pod", nil, Families{}},
		{"host-network pods only", []snapshot.Pod{pod(true, "192.168.1.10")}, Families{}},
		{"single-stack IPv4", []snapshot.Pod{pod(false, "10.0.0.5"), pod(false, "10.0.0.6"), pod(false)}, Families{Known: true, First4: true}},
		{"single-stack IPv6", []snapshot.Pod{pod(false, "fd00::5")}, Families{Known: true}},
		{"dual-stack, IPv6 first", []snapshot.Pod{pod(false, "fd00::5"), pod(false, "fd00::6", "10.0.0.6")}, Families{Known: true, Dual: true}},
		{"dual-stack, IPv4 first", []snapshot.Pod{pod(false, "10.0.0.6", "fd00::6")}, Families{Known: true, Dual: true, First4: true}},
		{"one address each, of both families", []snapshot.Pod{pod(false, "10.0.0.5"), pod(false, "fd00::5")}, Families{}},
	} {
		if got := FamiliesOf(c.pods); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
