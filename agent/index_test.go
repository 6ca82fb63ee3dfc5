package agent

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/host"
)

// A record keeps everything a rule and a remedy read, the state included
// (it decides a stale flow's severity), in a pointer-free record.
func TestIndexRecordRoundTrip(t *testing.T) {
	v6 := snapshot.Flow{ID: 9, Proto: snapshot.ProtoUDP, Zone: 3, Status: 0x18e,
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("fd00::50"), Dst: netip.MustParseAddr("fd00:96::a"), SrcPort: 5353, DstPort: 53},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr("fd00:244::9"), Dst: netip.MustParseAddr("fd00::50"), SrcPort: 5353, DstPort: 5353},
		Start: time.Unix(1700000000, 123)}
	v4 := staleFlow()
	v4.Status = 0x18e
	finWait := staleFlow()
	finWait.State = "FIN_WAIT"
	sctp := staleFlow()
	sctp.Proto, sctp.State = snapshot.ProtoSCTP, "COOKIE_ECHOED"
	for _, f := range []snapshot.Flow{v4, v6, finWait, sctp} {
		if got := flowOf(recordOf(&f)); got.String() != f.String() || got.Backend() != f.Backend() ||
			got.Reply != f.Reply || got.ID != f.ID || got.Zone != f.Zone || got.Status != f.Status || got.State != f.State || !got.Start.Equal(f.Start) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, f)
		}
	}
}

func TestIndexReplaysEventsThatArriveDuringTheSeed(t *testing.T) {
	ix := newFlowIndex(nil)
	a, b, c := flowTo("10.244.0.9", 1), flowTo("10.244.0.9", 2), flowTo("10.244.0.7", 3)
	notDNAT := staleFlow()
	notDNAT.Reply.Src, notDNAT.Reply.SrcPort = notDNAT.Orig.Dst, notDNAT.Orig.DstPort

	ix.beginSeed()
	ix.seed(&a)
	ix.seed(&b)
	ix.seed(&notDNAT)
	// While the dump runs, b ends and c starts.
	ix.apply(conntrack.Event{Type: conntrack.EventDestroy, Flow: b})
	ix.apply(conntrack.Event{Type: conntrack.EventNew, Flow: c})
	if ix.isValid() {
		t.Fatal("valid before the first seed completed")
	}
	ix.endSeed(true)
	if !ix.isValid() || ix.len() != 2 {
		t.Fatalf("valid %v, %d flows; want 2 (a and c)", ix.isValid(), ix.len())
	}
	if got := ix.flowsTo([]netip.Addr{netip.MustParseAddr("10.244.0.9")}); len(got) != 1 || got[0].Orig != a.Orig {
		t.Errorf("flows to 10.244.0.9: %v", got)
	}
	if got := ix.takeDirty(); len(got) != 1 || got[0] != netip.MustParseAddr("10.244.0.7") {
		t.Errorf("dirty backends %v, want the new flow's", got)
	}

	ix.forget(&a)
	if ix.len() != 1 {
		t.Errorf("forget: %d flows", ix.len())
	}
	ix.beginSeed()
	ix.seed(&a)
	ix.endSeed(false)
	if ix.isValid() || ix.len() != 1 {
		t.Errorf("an incomplete seed replaced the index or left it valid: valid %v, %d flows", ix.isValid(), ix.len())
	}
}

// The index stamps each flow without a kernel start time with when it first
// saw it, keeps that time for the same entry while no event is lost, and
// never gives it to another entry of the same tuple.
func TestIndexRemembersWhenItFirstSawAFlow(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	now := t0
	ix := newFlowIndex(func() time.Time { return now })
	backend := []netip.Addr{netip.MustParseAddr("10.244.0.9")}
	seenOf := func(sport uint16) time.Time {
		t.Helper()
		for _, f := range ix.flowsTo(backend) {
			if f.Orig.SrcPort == sport {
				return f.Seen
			}
		}
		t.Fatalf("flow from port %d not indexed", sport)
		return time.Time{}
	}
	a, stamped := flowTo("10.244.0.9", 1), flowTo("10.244.0.9", 2)
	stamped.Start = t0.Add(-time.Hour)

	ix.beginSeed()
	ix.seed(&a)
	ix.seed(&stamped)
	ix.endSeed(true)
	if !a.Seen.Equal(t0) || !seenOf(1).Equal(t0) {
		t.Fatalf("first seed: the flow passed on says seen %v, the index %v; want %v", a.Seen, seenOf(1), t0)
	}
	if !seenOf(2).IsZero() {
		t.Errorf("a flow with a kernel start time got Seen %v", seenOf(2))
	}

	// The next seed finds the same entry: it keeps the first sighting, and
	// passes it on to the rules.
	now = t0.Add(time.Minute)
	again := flowTo("10.244.0.9", 1)
	ix.beginSeed()
	ix.seed(&again)
	ix.endSeed(true)
	if !again.Seen.Equal(t0) || !seenOf(1).Equal(t0) {
		t.Errorf("same entry seeded again: seen %v (index %v), want %v", again.Seen, seenOf(1), t0)
	}

	// Another entry of the same tuple (another kernel ID) is new.
	now = t0.Add(2 * time.Minute)
	other := flowTo("10.244.0.9", 1)
	other.ID = 4242
	ix.beginSeed()
	ix.seed(&other)
	ix.endSeed(true)
	if !other.Seen.Equal(now) {
		t.Errorf("another entry of the same tuple took the old sighting: %v, want %v", other.Seen, now)
	}

	// A new entry from an event is stamped when the event arrives.
	now = t0.Add(3 * time.Minute)
	ix.apply(conntrack.Event{Type: conntrack.EventNew, Flow: flowTo("10.244.0.9", 3)})
	if !seenOf(3).Equal(now) {
		t.Errorf("new event: seen %v, want %v", seenOf(3), now)
	}

	// After lost events nothing is carried: the tuple may since belong to
	// another entry the index never heard of.
	now = t0.Add(4 * time.Minute)
	ix.invalidate()
	lost := other
	ix.beginSeed()
	ix.seed(&lost)
	ix.endSeed(true)
	if !lost.Seen.Equal(now) {
		t.Errorf("after lost events the sighting was carried: %v, want %v", lost.Seen, now)
	}
}

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
func withEvents(ev *fakeEvents) func(*Config) {
	return func(c *Config) {
		c.FlowEvents = ev
		c.AuditInterval = time.Hour
		c.NewFlowInterval = 10 * time.Millisecond
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
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.IndexFlows); v != 2 {
		t.Errorf("index_flows = %v, want 2", v)
	}

	update(t, client, slice("svc-1", endpoint("10.244.0.5", true, false)))
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	if d := h.tab.dumps(); d != 1 {
		t.Errorf("%d dumps: a change read the whole table", d)
	}
	if got := h.tab.deletedFlows()[0]; got.Orig != staleFlow().Orig {
		t.Errorf("deleted %v", got)
	}
	waitFor(t, "the index to forget the deleted flow", func() bool {
		return testutil.ToFloat64(h.agent.cfg.Metrics.IndexFlows) == 1
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
	h.clock.advance(time.Minute)
	ctx := context.Background()
	if err := client.CoreV1().Pods("ns").Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := old.DeepCopy()
	next.Name, next.UID = "next", "u2"
	next.Status.StartTime = &metav1.Time{Time: h.clock.now()}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	update(t, client, slice("svc-1", endpoint("10.244.0.5", true, false), endpointOf(next)))
	waitFor(t, "the misdelivered flow to be reported", func() bool { return critical() == 1 })
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
	h := startWith(t, client, nil, func(c *Config) {
		withEvents(ev)(c)
		c.Host = hostSrc
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
	waitFor(t, "the flow through the new address to be deleted", func() bool { return h.tab.count() == 1 })
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
	waitFor(t, "the new stale flow to be deleted", func() bool { return h.tab.count() == 1 })
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
	waitFor(t, "a full audit", func() bool { return h.tab.dumps() >= 2 })
	waitFor(t, "the flow to be reported", func() bool { return h.findings(finding.Warning) == 1 })
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.EventsLost); v != 1 {
		t.Errorf("conntrack_events_lost_total = %v", v)
	}
}

// benchIndexFlow is the i-th flow of the index benchmark: a DNATed flow
// from one of 1000 service addresses to one of 5000 backends, 70%
// established TCP, 30% UDP, every other one with a start time. Every
// original tuple is distinct.
func benchIndexFlow(i int) snapshot.Flow {
	client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	svc, pod := i%1000, i%5000
	f := snapshot.Flow{ID: uint32(i + 1), Status: snapshot.StatusSeenReply | snapshot.StatusConfirmed | snapshot.StatusDstNAT,
		Orig:  snapshot.Tuple{Src: client, Dst: netip.AddrFrom4([4]byte{172, 30, byte(svc >> 8), byte(svc)}), SrcPort: uint16(30000 + i%30000), DstPort: 443},
		Reply: snapshot.Tuple{Src: netip.AddrFrom4([4]byte{10, 244, byte(pod >> 8), byte(pod)}), Dst: client, SrcPort: 8443, DstPort: uint16(30000 + i%30000)}}
	if i%10 < 7 {
		f.Proto, f.State = snapshot.ProtoTCP, "ESTABLISHED"
	} else {
		f.Proto = snapshot.ProtoUDP
	}
	if i%2 == 0 {
		f.Start = time.Unix(1700000000, int64(i))
	}
	return f
}

func seededIndex(flows []snapshot.Flow) *flowIndex {
	ix := newFlowIndex(nil)
	ix.beginSeed()
	for i := range flows {
		ix.seed(&flows[i])
	}
	ix.endSeed(true)
	return ix
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIndex measures the index of 100,000 DNATed flows to 5,000
// backends: seeding it from a dump (and, as B/flow, the heap the seeded
// index keeps), seeding it again from the next dump, a new and a destroy
// event, and reading one backend's flows.
func BenchmarkIndex(b *testing.B) {
	const n = 100000
	flows := make([]snapshot.Flow, n)
	for i := range flows {
		flows[i] = benchIndexFlow(i)
	}
	b.Run("seed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			seededIndex(flows)
		}
		before := heapInUse()
		ix := seededIndex(flows)
		kept := heapInUse() - before
		if ix.len() != n {
			b.Fatalf("%d flows indexed, want %d", ix.len(), n)
		}
		b.ReportMetric(float64(kept)/n, "B/flow")
	})
	// The next full audit's seed, on a valid index: each flow without a
	// start time takes its first sighting from the index it replaces.
	b.Run("reseed", func(b *testing.B) {
		ix := seededIndex(flows)
		b.ReportAllocs()
		for b.Loop() {
			ix.beginSeed()
			for i := range flows {
				f := flows[i]
				ix.seed(&f)
			}
			ix.endSeed(true)
		}
		if ix.len() != n {
			b.Fatalf("%d flows indexed, want %d", ix.len(), n)
		}
	})
	b.Run("event", func(b *testing.B) {
		ix := seededIndex(flows)
		ix.takeDirty()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			f := benchIndexFlow(n + i%n)
			ix.apply(conntrack.Event{Type: conntrack.EventNew, Flow: f})
			ix.apply(conntrack.Event{Type: conntrack.EventDestroy, Flow: f})
			i++
		}
		if ix.len() != n {
			b.Fatalf("%d flows indexed, want %d", ix.len(), n)
		}
	})
	b.Run("flowsTo", func(b *testing.B) {
		ix := seededIndex(flows)
		backend := []netip.Addr{flows[7].Reply.Src}
		b.ReportAllocs()
		for b.Loop() {
			if got := ix.flowsTo(backend); len(got) != n/5000 {
				b.Fatalf("%d flows to %v, want %d", len(got), backend[0], n/5000)
			}
		}
	})
}
