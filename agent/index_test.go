package agent

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/host"
)

// events is a fake conntrack event stream.
type fakeEvents struct {
	ch chan conntrack.Event
	// lose makes Run return ErrOverflow, as when the socket overflows.
	lose chan struct{}
}

func newFakeEvents() *fakeEvents {
	return &fakeEvents{ch: make(chan conntrack.Event, 100), lose: make(chan struct{})}
}

func (e *fakeEvents) Run(ctx context.Context, fn func(conntrack.Event) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.lose:
			return conntrack.ErrOverflow
		case ev := <-e.ch:
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
}

// withEvents configures an agent that follows ev and dumps the table only
// at start and when told (the audit interval is an hour).
func withEvents(ev *fakeEvents) func(*harness, *Config) {
	return func(h *harness, c *Config) {
		h.ct.Events = ev
		c.AuditInterval = time.Hour
		h.ct.NewFlowInterval = 10 * time.Millisecond
	}
}

// When the backend's pod is deleted, the agent judges the flows to it from
// the index and deletes the stale one, without reading the table again.
func TestBackendDeathIsJudgedFromTheIndex(t *testing.T) {
	objs := cluster()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old", UID: "u0"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	objs = append(objs[:3], slice("svc-1", endpoint("10.244.0.5", true, false), endpoint("10.244.0.9", true, false)), old)
	client := fake.NewClientset(objs...)
	ev := newFakeEvents()
	healthy := flowTo("10.244.0.5", 41001)
	h := startWith(t, client, nil, withEvents(ev), staleFlow(), healthy)
	h.settle(t, 1)
	if d := h.tab.dumps(); d != 1 || h.tab.count() != 0 {
		t.Fatalf("after start: %d dumps, %d deletes; want 1 and 0", d, h.tab.count())
	}
	if v := testutil.ToFloat64(h.ct.Metrics.IndexFlows); v != 2 {
		t.Errorf("index_flows = %v, want 2", v)
	}

	update(t, client, slice("svc-1", endpoint("10.244.0.5", true, false)))
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, patience, "the stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	if d := h.tab.dumps(); d != 1 {
		t.Errorf("%d dumps: a change read the whole table", d)
	}
	if got := h.tab.deletedFlows()[0]; got.Orig != staleFlow().Orig {
		t.Errorf("deleted %v", got)
	}
	poll.Until(t, patience, "the index to forget the deleted flow", func() bool {
		return testutil.ToFloat64(h.ct.Metrics.IndexFlows) == 1
	})
}

// The agent's own sighting of a flow proves misdelivery when the kernel
// keeps no start times: it saw the flow before the pod now holding its
// backend IP existed. The new holder is a backend of the same Service, in
// its namespace, and the flow has no start time: nothing else proves it.
func TestAgentsSightingProvesMisdelivery(t *testing.T) {
	objs := cluster()
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old", UID: "u0"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	objs = append(objs[:3], slice("svc-1", endpoint("10.244.0.5", true, false), endpointOf(old)), old)
	client := fake.NewClientset(objs...)
	ev := newFakeEvents()
	h := startWith(t, client, reportOnly, withEvents(ev), staleFlow())
	h.settle(t, 1)
	critical := func() float64 {
		return testutil.ToFloat64(h.agent.cfg.Metrics.Findings.WithLabelValues(rule.MisdeliveredFlowID, finding.Critical.String()))
	}
	if n := critical(); n != 0 {
		t.Fatalf("%v misdelivered flows while the pod the flow was opened to runs", n)
	}

	// A minute later the pod dies and its IP goes to a new replica, which
	// the EndpointSlice then lists in its place.
	h.clock.Advance(time.Minute)
	ctx := context.Background()
	if err := client.CoreV1().Pods("ns").Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := old.DeepCopy()
	next.Name, next.UID = "next", "u2"
	next.Status.StartTime = &metav1.Time{Time: h.clock.Now()}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	update(t, client, slice("svc-1", endpoint("10.244.0.5", true, false), endpointOf(next)))
	poll.Until(t, patience, "the misdelivered flow to be reported", func() bool { return critical() == 1 })
	if d := h.tab.dumps(); d != 1 {
		t.Errorf("%d dumps: want the flow judged from the index", d)
	}
}

// An address added to the node after the agent started is a NodePort
// frontend from the next audit on, even one judged from the index: a stale
// flow through a NodePort on it is found without reading the table again.
func TestAnAddressAddedToTheNodeIsANodePortFrontend(t *testing.T) {
	objs := cluster()
	svc := objs[1].(*corev1.Service)
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc.Spec.Ports[0].NodePort = 30080
	client := fake.NewClientset(objs...)
	var mu sync.Mutex
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	hostSrc := &host.Addresses{Read: func() ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(addrs), nil
	}}
	// A client reached the NodePort on 198.51.100.7; its pod is gone.
	viaVIP := staleFlow()
	viaVIP.Orig.Dst, viaVIP.Orig.DstPort = netip.MustParseAddr("198.51.100.7"), 30080
	ev := newFakeEvents()
	h := startWith(t, client, nil, func(h *harness, c *Config) {
		withEvents(ev)(h, c)
		c.Sources = []source.Source{h.kube, hostSrc, h.ct}
	}, viaVIP)
	h.settle(t, 1)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("%d flows deleted while 198.51.100.7 is not the node's", n)
	}

	mu.Lock()
	addrs = append(addrs, netip.MustParseAddr("198.51.100.7"))
	mu.Unlock()
	// An unrelated change makes the agent audit from the index.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "u7"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.77", PodIPs: []corev1.PodIP{{IP: "10.244.0.77"}}}}
	if _, err := client.CoreV1().Pods("ns").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, patience, "the flow through the new address to be deleted", func() bool { return h.tab.count() == 1 })
	if d := h.tab.dumps(); d != 1 {
		t.Errorf("%d dumps: want the flow judged from the index", d)
	}
	if got := h.tab.deletedFlows()[0]; got.Orig != viaVIP.Orig {
		t.Errorf("deleted %v", got)
	}
}

// A connection opened after the backend died (kube-proxy had not yet
// removed its rule) arrives as an event and is judged without a dump.
func TestNewFlowToADeadBackendIsJudged(t *testing.T) {
	ev := newFakeEvents()
	h := startWith(t, fake.NewClientset(cluster()...), nil, withEvents(ev))
	h.settle(t, 1)
	late := flowTo("10.244.0.9", 42000)
	h.tab.add(late)
	ev.ch <- conntrack.Event{Type: conntrack.EventNew, Flow: late}
	poll.Until(t, patience, "the new stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	if d := h.tab.dumps(); d != 1 {
		t.Errorf("%d dumps: a new flow read the whole table", d)
	}
}

// Lost events make the index untrustworthy: the agent reads the whole table
// and says so in a metric.
func TestLostEventsMakeTheNextAuditReadTheTable(t *testing.T) {
	ev := newFakeEvents()
	h := startWith(t, fake.NewClientset(cluster()...), reportOnly, withEvents(ev))
	h.settle(t, 1)
	// A stale flow whose event is lost.
	h.tab.add(staleFlow())
	ev.lose <- struct{}{}
	// At least one: an audit for another cause (an informer's re-list)
	// may also read the table while the index is invalid.
	poll.Until(t, patience, "a full audit", func() bool { return h.tab.dumps() >= 2 })
	poll.Until(t, patience, "the flow to be reported", func() bool { return h.findings(finding.Warning) == 1 })
	if v := testutil.ToFloat64(h.ct.Metrics.EventsLost); v != 1 {
		t.Errorf("conntrack_events_lost_total = %v", v)
	}
}
