package live

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// pagedPods is a fake API server's list of pods in pages: each list
// asked with a limit gets that many pods from where its continue token
// says; the first continue it is asked for, expire says, is refused as
// expired (410 Gone). Every list asked is recorded.
type pagedPods struct {
	pods   []corev1.Pod
	expire bool
	asked  []metav1.ListOptions
}

func (p *pagedPods) react(a clienttesting.Action) (bool, runtime.Object, error) {
	o := a.(clienttesting.ListActionImpl).ListOptions
	p.asked = append(p.asked, o)
	from := 0
	if o.Continue != "" {
		if p.expire {
			p.expire = false
			return true, nil, apierrors.NewResourceExpired("the continue token is too old")
		}
		from, _ = strconv.Atoi(o.Continue)
	}
	to := len(p.pods)
	if o.Limit > 0 {
		to = min(from+int(o.Limit), to)
	}
	l := &corev1.PodList{Items: p.pods[from:to]}
	if to < len(p.pods) {
		l.Continue = strconv.Itoa(to)
	}
	return true, l, nil
}

// A lookup of more addresses than Batch is one list of every pod, in
// pages of Page, read again from its start when its continuation
// expired; it answers every address from it, an address no pod holds
// with none, and keeps the answers as the lookups one by one do. Up to
// Batch addresses are asked one by one.
func TestHoldersBatchManyAddresses(t *testing.T) {
	var pods []corev1.Pod
	for i := range 10 {
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("p%d", i), UID: types.UID("u" + strconv.Itoa(i))},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: heldAddr(i).String(), PodIPs: []corev1.PodIP{{IP: heldAddr(i).String()}}}})
	}
	api := &pagedPods{pods: pods, expire: true}
	client := kubefake.NewClientset()
	client.PrependReactor("list", "pods", api.react)
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	h := &Holders{Client: client, Batch: 4, Page: 3, Now: func() time.Time { return now }, Metrics: NewHolderMetrics(reg, "ghostwatch")}
	ask := []netip.Addr{heldAddr(1), heldAddr(9), deadAddr(0), deadAddr(1), deadAddr(2), heldAddr(1)}
	got, err := h.Lookup(context.Background(), ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || len(got[heldAddr(1)]) != 1 || got[heldAddr(1)][0].Name != "p1" || got[heldAddr(9)][0].Name != "p9" || len(got[deadAddr(2)]) != 0 {
		t.Errorf("answers %+v", got)
	}
	// Pages 0, expired, 0 again, 3, 6, 9.
	if len(api.asked) != 6 || api.asked[0].FieldSelector != "" || api.asked[0].Limit != 3 || api.asked[0].ResourceVersion != "" ||
		api.asked[1].Continue != "3" || api.asked[2].Continue != "" || api.asked[5].Continue != "9" {
		t.Errorf("lists asked %+v", api.asked)
	}
	if v := testutil.ToFloat64(h.Metrics.Addresses.WithLabelValues(lookupAllPods)); v != 5 {
		t.Errorf("holder_lookups_total{how=all-pods} = %v, want 5", v)
	}
	// The answers stand, as any lookup's: nothing is asked again.
	api.asked = nil
	if _, err := h.Lookup(context.Background(), ask); err != nil || len(api.asked) != 0 {
		t.Errorf("asked again %+v: %v", api.asked, err)
	}
	// As many as Batch: one by one, each by its address from the watch
	// cache.
	four := []netip.Addr{heldAddr(2), heldAddr(3), deadAddr(3), deadAddr(4)}
	if _, err := h.Lookup(context.Background(), four); err != nil {
		t.Fatal(err)
	}
	if len(api.asked) != 4 || api.asked[0].FieldSelector == "" || api.asked[0].ResourceVersion != "0" {
		t.Errorf("lists asked %+v", api.asked)
	}
	if v := testutil.ToFloat64(h.Metrics.Addresses.WithLabelValues(lookupByAddress)); v != 4 {
		t.Errorf("holder_lookups_total{how=by-address} = %v, want 4", v)
	}
	if p := h.Progress(); p != "" {
		t.Errorf("progress with no lookup under way: %q", p)
	}
}

// A list of every pod that fails fails the lookup of every address it
// was to answer, and keeps nothing of it.
func TestHoldersBatchFailure(t *testing.T) {
	client := kubefake.NewClientset()
	client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	h := &Holders{Client: client, Batch: 1}
	_, err := h.Lookup(context.Background(), []netip.Addr{deadAddr(0), deadAddr(1)})
	if err == nil || err.Error() != "looking up the pods at 2 addresses in a list of every pod: etcd is down (503 ServiceUnavailable)" {
		t.Errorf("err = %v", err)
	}
	if _, ok := h.Due(deadAddr(0)); ok {
		t.Error("a failed lookup was kept")
	}
}
