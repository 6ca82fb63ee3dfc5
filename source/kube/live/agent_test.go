package live

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
)

func startSynced(t *testing.T, inf *Informers) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf.Start(ctx)
	wctx, wcancel := context.WithTimeout(ctx, poll.Patience)
	defer wcancel()
	if err := inf.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
}

// A watch the API server refuses makes the caches stale, named and dated
// by the informers' clock, until a watch runs again.
func TestStaleOnErrorsByTheInjectedClock(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	var (
		mu      sync.Mutex
		refuse  bool
		current *watch.FakeWatcher
	)
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		current = watch.NewFake()
		return true, current, nil
	})
	inf := NewInformers(client, InformerOptions{Now: clk.Now})
	if err := inf.Stale(clk.Now()); err == nil || !strings.Contains(err.Error(), "not listed yet") {
		t.Fatalf("before start: %v, want not listed yet", err)
	}
	startSynced(t, inf)
	poll.Until(t, poll.Patience, "the pods' watch", func() bool { mu.Lock(); defer mu.Unlock(); return current != nil })
	if err := inf.Stale(clk.Now()); err != nil {
		t.Fatalf("after sync: %v", err)
	}
	// The watch ends, and the API server refuses the next.
	mu.Lock()
	refuse = true
	current.Stop()
	mu.Unlock()
	poll.Until(t, poll.Patience, "the refused watch", func() bool { return inf.watched[0].Err() != nil })
	clk.Advance(30 * time.Second)
	if err := inf.Stale(clk.Now()); err == nil || !strings.Contains(err.Error(), "pods: dial tcp 127.0.0.1:6443: connect: connection refused (30s ago)") {
		t.Fatalf("after a refused watch: %v", err)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	poll.Until(t, poll.Patience, "a watch again", func() bool { return inf.Stale(clk.Now()) == nil })
}

// Before the first list succeeds, Stale says why it has not: the error of
// the last attempt, not only "not synced".
func TestStaleSaysWhyNotListed(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	})
	inf := NewInformers(client, InformerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	poll.Until(t, poll.Patience, "the list error", func() bool { return inf.watched[0].Err() != nil })
	err := inf.Stale(time.Now())
	// The other watches may or may not have listed by now: only the pods'
	// part is certain.
	if err == nil || !strings.Contains(err.Error(), "pods: not listed yet: ") || !strings.Contains(err.Error(), "dial tcp 10.0.0.1:443: connect: connection refused") {
		t.Fatalf("Stale = %v", err)
	}
}

// A watch that stays silent, without an error, longer than the API server
// ever leaves it without a bookmark is stuck: the caches are not trusted.
// Any event of the watch, a bookmark included, is a sign of life.
func TestStaleWhenTheWatchFallsSilent(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	var mu sync.Mutex
	watches := map[string]*watch.FakeWatcher{}
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		mu.Lock()
		watches[a.GetResource().Resource] = w
		mu.Unlock()
		return true, w, nil
	})
	inf := NewInformers(client, InformerOptions{Now: clk.Now, Silence: 2 * time.Minute})
	startSynced(t, inf)
	poll.Until(t, poll.Patience, "five watches", func() bool { mu.Lock(); defer mu.Unlock(); return len(watches) == 5 })
	clk.Advance(90 * time.Second)
	if err := inf.Stale(clk.Now()); err != nil {
		t.Fatalf("90s of quiet is normal: %v", err)
	}
	// Bookmarks on every watch but the nodes'.
	bookmark := metav1.ObjectMeta{ResourceVersion: "7"}
	mu.Lock()
	watches["pods"].Action(watch.Bookmark, &corev1.Pod{ObjectMeta: bookmark})
	watches["services"].Action(watch.Bookmark, &corev1.Service{ObjectMeta: bookmark})
	watches["endpointslices"].Action(watch.Bookmark, &discoveryv1.EndpointSlice{ObjectMeta: bookmark})
	watches["servicecidrs"].Action(watch.Bookmark, &networkingv1.ServiceCIDR{ObjectMeta: bookmark})
	mu.Unlock()
	poll.Until(t, poll.Patience, "the bookmarks", func() bool {
		for _, w := range inf.watched {
			if w.Resource != "nodes" && !w.Heard().Equal(clk.Now()) {
				return false
			}
		}
		return true
	})
	clk.Advance(60 * time.Second)
	err := inf.Stale(clk.Now())
	if err == nil || !strings.Contains(err.Error(), "nodes: nothing heard from the API server for 2m30s") || strings.Contains(err.Error(), "pods:") {
		t.Fatalf("after 150s without a word on the nodes' watch: %v", err)
	}
}

// Changes name the addresses that changed Pods and EndpointSlices mention,
// before and after, and say when a Service or Node changed.
func TestChanges(t *testing.T) {
	ready := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Status: corev1.PodStatus{PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00::5"}}}}
	client := fake.NewClientset(pod)
	inf := NewInformers(client, InformerOptions{})
	changed := make(chan struct{}, 64)
	if err := inf.OnChange(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	startSynced(t, inf)
	poll.Until(t, poll.Patience, "the initial pod", func() bool { return len(inf.TakeChanges().Addrs) > 0 })
	inf.TakeChanges()

	ctx := context.Background()
	pod.Status.PodIP, pod.Status.PodIPs = "10.244.0.6", []corev1.PodIP{{IP: "10.244.0.6"}}
	if _, err := client.CoreV1().Pods("ns").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s",
		Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]struct{}{}
	for _, a := range []string{"10.244.0.5", "fd00::5", "10.244.0.6", "10.244.0.9"} {
		want[netip.MustParseAddr(a)] = struct{}{}
	}
	got := map[netip.Addr]struct{}{}
	poll.Until(t, poll.Patience, "both changes", func() bool {
		for a := range inf.TakeChanges().Addrs {
			got[a] = struct{}{}
		}
		return len(got) == len(want)
	})
	for a := range want {
		if _, ok := got[a]; !ok {
			t.Errorf("changes lack %s: %v", a, got)
		}
	}
	if _, err := client.CoreV1().Services("ns").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	frontends := false
	poll.Until(t, poll.Patience, "the service change", func() bool { frontends = frontends || inf.TakeChanges().Frontends; return frontends })
	select {
	case <-changed:
	default:
		t.Error("OnChange's function was not called")
	}
}
