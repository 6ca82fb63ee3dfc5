package live

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/kubetest"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

func TestInformersReadServiceCIDRs(t *testing.T) {
	client := fake.NewClientset(kubetest.ServiceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"), kubetest.ServiceCIDR("extra", "10.97.0.0/24"))
	inf := NewInformers(client, InformerOptions{})
	startSynced(t, inf)
	k := inf.Snapshot()
	if len(k.ServiceCIDRs) != 2 || k.ServiceCIDRs[0].Name != "extra" || k.NoServiceCIDRAPI ||
		len(k.ServiceCIDRs[1].CIDRs) != 2 || k.ServiceCIDRs[1].CIDRs[1] != netip.MustParsePrefix("fd00:10:96::/112") {
		t.Fatalf("service CIDRs %+v", k.ServiceCIDRs)
	}
	if d := kube.Describe(k); !strings.HasSuffix(d, ", 2 service CIDRs") {
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
	if d := kube.Describe(k); !strings.Contains(d, "no ServiceCIDR API (Kubernetes before 1.33)") {
		t.Errorf("describe %q", d)
	}
	// Nothing is ever heard about a resource that is not served: that is
	// not a stuck watch.
	clk.Advance(10 * time.Minute)
	if err := inf.Stale(clk.Now()); err != nil && strings.Contains(err.Error(), "servicecidrs") {
		t.Errorf("Stale = %v", err)
	}
}
