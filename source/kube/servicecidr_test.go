package kube

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

func TestInformersReadServiceCIDRs(t *testing.T) {
	client := fake.NewClientset(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"), serviceCIDR("extra", "10.97.0.0/24"))
	inf := NewInformers(client, InformerOptions{})
	startSynced(t, inf)
	k := inf.Snapshot()
	if len(k.ServiceCIDRs) != 2 || k.ServiceCIDRs[0].Name != "extra" || k.NoServiceCIDRAPI ||
		len(k.ServiceCIDRs[1].CIDRs) != 2 || k.ServiceCIDRs[1].CIDRs[1] != netip.MustParsePrefix("fd00:10:96::/112") {
		t.Fatalf("service CIDRs %+v", k.ServiceCIDRs)
	}
	if d := Describe(k); !strings.HasSuffix(d, ", 2 service CIDRs") {
		t.Errorf("describe %q", d)
	}
}

// An API server before Kubernetes 1.33 serves no ServiceCIDRs: that is not
// a failure of the kube source, and the report says what it means.
func TestInformersWithoutServiceCIDRAPI(t *testing.T) {
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}})
	client.PrependReactor("list", "servicecidrs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, "")
	})
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	inf := NewInformers(client, InformerOptions{Now: clk.Now})
	startSynced(t, inf)
	k := inf.Snapshot()
	if !k.NoServiceCIDRAPI || len(k.ServiceCIDRs) != 0 || len(k.Pods) != 1 {
		t.Fatalf("snapshot %+v", k)
	}
	if d := Describe(k); !strings.Contains(d, "no ServiceCIDR API (Kubernetes before 1.33)") {
		t.Errorf("describe %q", d)
	}
	// Nothing is ever heard about a resource that is not served: that is
	// not a stuck watch.
	clk.Advance(10 * time.Minute)
	if err := inf.Stale(clk.Now()); err != nil && strings.Contains(err.Error(), "servicecidrs") {
		t.Errorf("Stale = %v", err)
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
		serviceCIDR("kubernetes", "10.96.0.0/16"),
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
