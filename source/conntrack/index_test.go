package conntrack

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// staleFlow goes to ClusterIP 10.96.0.10:80, translated to 10.244.0.9.
func staleFlow() snapshot.Flow {
	return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", ID: 7,
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: 40000}}
}

// flowTo is a flow from a client pod to 10.96.0.10:80, translated to
// backend:8080.
func flowTo(backend string, sport uint16) snapshot.Flow {
	f := staleFlow()
	f.ID = uint32(sport)
	f.Orig.SrcPort, f.Reply.DstPort = sport, sport
	f.Reply.Src = netip.MustParseAddr(backend)
	return f
}

// flowsTo returns copies of the indexed flows to backends.
func flowsTo(ix *flowIndex, backends ...netip.Addr) []snapshot.Flow {
	var out []snapshot.Flow
	ix.each(backends, false, func(f *snapshot.Flow) { out = append(out, *f) })
	return out
}

func TestIndexReplaysEventsThatArriveDuringTheSeed(t *testing.T) {
	ix := newFlowIndex(nil)
	a, b, c := flowTo("10.244.0.9", 1), flowTo("10.244.0.9", 2), flowTo("10.244.0.7", 3)
	notDNAT := staleFlow()
	notDNAT.Reply.Src, notDNAT.Reply.SrcPort = notDNAT.Orig.Dst, notDNAT.Orig.DstPort

	ix.beginSeed()
	ix.seed(&a, nil)
	ix.seed(&b, nil)
	ix.seed(&notDNAT, nil)
	// While the dump runs, b ends and c starts.
	ix.apply(Event{Type: EventDestroy, Flow: b})
	ix.apply(Event{Type: EventNew, Flow: c})
	if ix.isValid() {
		t.Fatal("valid before the first seed completed")
	}
	ix.endSeed(true)
	if !ix.isValid() || ix.len() != 2 {
		t.Fatalf("valid %v, %d flows; want 2 (a and c)", ix.isValid(), ix.len())
	}
	if got := flowsTo(ix, netip.MustParseAddr("10.244.0.9")); len(got) != 1 || got[0].Orig != a.Orig {
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
	ix.seed(&a, nil)
	ix.endSeed(false)
	if ix.isValid() {
		t.Errorf("an incomplete seed left the index valid")
	}
	// The next complete seed holds what its dump saw, and nothing of the
	// incomplete one.
	ix.beginSeed()
	ix.seed(&b, nil)
	ix.endSeed(true)
	if got := flowsTo(ix, netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("10.244.0.7")); !ix.isValid() || len(got) != 1 || got[0].Orig != b.Orig {
		t.Errorf("after a complete seed of b: valid %v, flows %v", ix.isValid(), got)
	}
}

// The index stamps each flow without a kernel start time with when it first
// saw it, keeps that time for the same entry while no event is lost, and
// never gives it to another entry of the same tuple.
func TestIndexRemembersWhenItFirstSawAFlow(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	clk := fakeclock.New(t0)
	ix := newFlowIndex(clk.Now)
	backend := []netip.Addr{netip.MustParseAddr("10.244.0.9")}
	seenOf := func(sport uint16) time.Time {
		t.Helper()
		for _, f := range flowsTo(ix, backend...) {
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
	ix.seed(&a, nil)
	ix.seed(&stamped, nil)
	ix.endSeed(true)
	if !a.Seen.Equal(t0) || !seenOf(1).Equal(t0) {
		t.Fatalf("first seed: the flow passed on says seen %v, the index %v; want %v", a.Seen, seenOf(1), t0)
	}
	if !seenOf(2).IsZero() {
		t.Errorf("a flow with a kernel start time got Seen %v", seenOf(2))
	}

	// The next seed finds the same entry: it keeps the first sighting, and
	// passes it on to the rules.
	clk.Set(t0.Add(time.Minute))
	again := flowTo("10.244.0.9", 1)
	ix.beginSeed()
	ix.seed(&again, nil)
	ix.endSeed(true)
	if !again.Seen.Equal(t0) || !seenOf(1).Equal(t0) {
		t.Errorf("same entry seeded again: seen %v (index %v), want %v", again.Seen, seenOf(1), t0)
	}

	// Another entry of the same tuple (another kernel ID) is new.
	clk.Set(t0.Add(2 * time.Minute))
	other := flowTo("10.244.0.9", 1)
	other.ID = 4242
	ix.beginSeed()
	ix.seed(&other, nil)
	ix.endSeed(true)
	if !other.Seen.Equal(clk.Now()) {
		t.Errorf("another entry of the same tuple took the old sighting: %v, want %v", other.Seen, clk.Now())
	}

	// A new entry from an event is stamped when the event arrives.
	clk.Set(t0.Add(3 * time.Minute))
	ix.apply(Event{Type: EventNew, Flow: flowTo("10.244.0.9", 3)})
	if !seenOf(3).Equal(clk.Now()) {
		t.Errorf("new event: seen %v, want %v", seenOf(3), clk.Now())
	}

	// After lost events nothing is carried: the tuple may since belong to
	// another entry the index never heard of.
	clk.Set(t0.Add(4 * time.Minute))
	ix.invalidate()
	lost := other
	ix.beginSeed()
	ix.seed(&lost, nil)
	ix.endSeed(true)
	if !lost.Seen.Equal(clk.Now()) {
		t.Errorf("after lost events the sighting was carried: %v, want %v", lost.Seen, clk.Now())
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
		ix.seed(&flows[i], nil)
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
				ix.seed(&f, nil)
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
			ix.apply(Event{Type: EventNew, Flow: f})
			ix.apply(Event{Type: EventDestroy, Flow: f})
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
			if got := flowsTo(ix, backend...); len(got) != n/5000 {
				b.Fatalf("%d flows to %v, want %d", len(got), backend[0], n/5000)
			}
		}
	})
}

// A seed during which more events come than it may hold back is given up:
// the index stays invalid, so that the next pass reads the table again,
// rather than hold a mass deletion's events in memory.
func TestIndexSeedGivesUpOnTooManyEvents(t *testing.T) {
	ix := newFlowIndex(nil)
	ix.beginSeed()
	a := flowTo("10.244.0.9", 1)
	ix.seed(&a, nil)
	for i := range maxPending + 10 {
		ix.apply(Event{Type: EventDestroy, Flow: flowTo("10.244.0.9", uint16(i))})
	}
	if len(ix.pending) != 0 {
		t.Errorf("%d events held back", len(ix.pending))
	}
	if ix.endSeed(true) || ix.isValid() {
		t.Error("the index is valid after events were dropped")
	}
	ix.beginSeed()
	ix.seed(&a, nil)
	if !ix.endSeed(true) {
		t.Error("the next seed is not valid")
	}
}
