package conntrack

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// viewFlows returns, by backend, copies of the flows a view lends, as a
// Conntrack that holds it gives them.
func viewFlows(v *indexView) map[netip.Addr][]snapshot.Flow {
	c := &snapshot.Conntrack{}
	c.Lend(v)
	out := map[netip.Addr][]snapshot.Flow{}
	for f := range c.All() {
		out[f.Reply.Src] = append(out[f.Reply.Src], *f)
	}
	return out
}

func ids(fs []snapshot.Flow) []uint32 {
	var out []uint32
	for _, f := range fs {
		out = append(out, f.ID)
	}
	slices.Sort(out)
	return out
}

// A pass keeps its flows in the index's stores, lent, not copied: what it
// was lent never changes, whatever the index takes in since (events,
// another seed, a pass that judges again), and the index itself follows
// the table as it did.
func TestLentFlowsStayAsThePassReadThem(t *testing.T) {
	ix := newFlowIndex(nil)
	b9, b7 := netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("10.244.0.7")
	var flows []snapshot.Flow
	for p := uint16(1); p <= 6; p++ {
		flows = append(flows, flowTo("10.244.0.9", p))
	}
	for p := uint16(11); p <= 13; p++ {
		flows = append(flows, flowTo("10.244.0.7", p))
	}
	odd := func(f *snapshot.Flow) bool { return f.ID%2 == 1 }
	ix.beginSeed()
	for i := range flows {
		if !ix.seed(&flows[i], odd) {
			t.Fatalf("the seed did not record %v", flows[i].String())
		}
	}
	ix.endSeed(true)
	v := ix.lendSeeded(nil)
	first := viewFlows(v)
	if v.Len() != 5 || !slices.Equal(ids(first[b9]), []uint32{1, 3, 5}) || !slices.Equal(ids(first[b7]), []uint32{11, 13}) {
		t.Fatalf("lent %d flows: %v; want the odd IDs", v.Len(), first)
	}

	// The table changes: a lent flow ends, a flow to a lent backend
	// starts, a new backend's flow starts.
	ix.apply(Event{Type: EventDestroy, Flow: flows[0]})
	ix.apply(Event{Type: EventNew, Flow: flowTo("10.244.0.9", 21)})
	ix.apply(Event{Type: EventNew, Flow: flowTo("10.244.0.5", 31)})
	// A pass judges every flow again, keeping others.
	even := func(f *snapshot.Flow) bool { return f.ID%2 == 0 }
	second := viewFlows(ix.lendJudged(nil, true, even, nil))
	if !slices.Equal(ids(second[b9]), []uint32{2, 4, 6}) || len(second[b7]) != 1 || len(second[netip.MustParseAddr("10.244.0.5")]) != 0 {
		t.Errorf("a judged pass lent %v; want the even IDs", second)
	}
	// Another seed: 10.244.0.7's flows are gone from the table.
	ix.beginSeed()
	for i := range flows[:6] {
		ix.seed(&flows[i], odd)
	}
	ix.endSeed(true)
	if got := flowsTo(ix, b7); len(got) != 0 {
		t.Errorf("the index still holds %d flows to a backend the seed did not see", len(got))
	}
	if got := flowsTo(ix, b9); len(got) != 6 {
		t.Errorf("the index holds %d flows to 10.244.0.9, want 6", len(got))
	}

	if again := viewFlows(v); !equalFlows(again, first) {
		t.Errorf("the first pass's flows changed under it:\nnow  %v\nlent %v", again, first)
	}
}

func equalFlows(a, b map[netip.Addr][]snapshot.Flow) bool {
	if len(a) != len(b) {
		return false
	}
	for k, fs := range a {
		if !slices.Equal(fs, b[k]) {
			return false
		}
	}
	return true
}

// A flow a pass lends sits at a position of its own in its backend's
// store: a selection of some of them (a finding's) gives back those and
// no others, whether they are the first of the backend's or not.
func TestLentSelections(t *testing.T) {
	ix := newFlowIndex(nil)
	ix.beginSeed()
	for p := uint16(1); p <= 8; p++ {
		f := flowTo("10.244.0.9", p)
		ix.seed(&f, func(f *snapshot.Flow) bool { return f.ID != 2 })
	}
	ix.endSeed(true)
	c := &snapshot.Conntrack{}
	c.Lend(ix.lendSeeded(nil))
	if c.Len() != 7 {
		t.Fatalf("lent %d flows, want 7", c.Len())
	}
	for b, n := range c.Backends() {
		if b != netip.MustParseAddr("10.244.0.9") || n != 7 {
			t.Errorf("backend %v with %d flows", b, n)
		}
	}
	var head, tail snapshot.FlowSelection
	for r, f := range c.Refs() {
		switch {
		case f.ID == 1:
			head.Add(c, r)
		case f.ID >= 6:
			tail.Add(c, r)
		}
	}
	for _, tc := range []struct {
		sel  *snapshot.FlowSelection
		want []uint32
	}{{&head, []uint32{1}}, {&tail, []uint32{6, 7, 8}}} {
		var got []uint32
		for f := range tc.sel.All() {
			got = append(got, f.ID)
		}
		if !slices.Equal(got, tc.want) || tc.sel.Backend() != netip.MustParseAddr("10.244.0.9") {
			t.Errorf("selection gave %v of %v, want %v", got, tc.sel.Backend(), tc.want)
		}
	}
}

// A busy backend's store with a few stale flows among its thousands is
// not lent: its few flows are copied, so that the next event to it does
// not copy the whole store, every pass. A store the pass keeps most of is
// lent, whatever its size.
func TestFewOfABusyBackendAreCopied(t *testing.T) {
	busy, dead := netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("10.244.0.7")
	ix := newFlowIndex(nil)
	stale := func(f *snapshot.Flow) bool { return f.Reply.Src == dead || f.ID%1000 == 0 }
	ix.beginSeed()
	for p := uint16(1); p <= 2*lendMin; p++ {
		f := flowTo(busy.String(), p)
		ix.seed(&f, stale)
		g := flowTo(dead.String(), p)
		ix.seed(&g, stale)
	}
	ix.endSeed(true)
	for _, pass := range []struct {
		name string
		lend func(into *snapshot.Conntrack) *indexView
	}{
		{"seeded", ix.lendSeeded},
		{"judged", func(into *snapshot.Conntrack) *indexView { return ix.lendJudged(nil, true, stale, into) }},
	} {
		c := &snapshot.Conntrack{}
		c.Lend(pass.lend(c))
		got := map[netip.Addr]int{}
		for f := range c.All() {
			got[f.Reply.Src]++
		}
		if got[busy] != 2 || got[dead] != 2*lendMin || c.Len() != 2+2*lendMin {
			t.Errorf("%s: kept %v (%d); want the busy backend's 2 stale flows and the dead one's %d", pass.name, got, c.Len(), 2*lendMin)
		}
		ix.mu.Lock()
		if ix.byBackend[busy.As16()].lent || !ix.byBackend[dead.As16()].lent {
			t.Errorf("%s: the busy backend's store lent %v, the dead one's %v; want only the dead one's", pass.name, ix.byBackend[busy.As16()].lent, ix.byBackend[dead.As16()].lent)
		}
		ix.mu.Unlock()
	}
}
