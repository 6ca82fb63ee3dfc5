package conntrack

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// noEvents is an event stream that sends nothing: the tests apply events
// to the index themselves.
type noEvents struct{}

func (noEvents) Run(ctx context.Context, _ func(Event) error) error { <-ctx.Done(); return nil }

// Between passes, a new flow is judged on its own: its backend's other
// flows, judged before, are not judged again for it (on a busy node they
// are thousands a second). When more new flows come than the index holds
// for that, their backends' flows are all judged, and none is missed.
func TestChangesJudgesTheNewFlowsAlone(t *testing.T) {
	w := &Watch{Events: noEvents{}}
	w.init()
	const backend, old = "10.244.0.9", 10000
	w.index.beginSeed()
	for i := range old {
		f := flowTo(backend, uint16(1+i))
		w.index.seed(&f, nil)
	}
	w.index.endSeed(true)
	calls := 0
	w.lastKeep = func(f *snapshot.Flow) bool { calls++; return f.Orig.SrcPort == 60000 }
	b := netip.MustParseAddr(backend)

	w.index.apply(Event{Type: EventNew, Flow: flowTo(backend, 50000)})
	if c := w.Changes(); len(c.Addrs) != 0 || calls != 1 {
		t.Errorf("a new flow no rule keeps: changes %v after %d judgements, want none after 1", c.Addrs, calls)
	}
	calls = 0
	w.index.apply(Event{Type: EventNew, Flow: flowTo(backend, 60000)})
	if c := w.Changes(); len(c.Addrs) != 1 || c.Why != "new-flow" || calls != 1 {
		t.Errorf("a new flow a rule keeps: changes %v (%s) after %d judgements, want %v after 1", c.Addrs, c.Why, calls, b)
	}

	calls = 0
	w.index.apply(Event{Type: EventNew, Flow: flowTo(backend, 60000)})
	for i := range maxFresh {
		w.index.apply(Event{Type: EventNew, Flow: flowTo("10.244.0.7", uint16(1+i))})
	}
	if c := w.Changes(); len(c.Addrs) != 1 || calls < old {
		t.Errorf("more new flows than the index holds: changes %v after %d judgements, want %v after every flow of the backends", c.Addrs, calls, b)
	}
	if c := w.Changes(); len(c.Addrs) != 0 {
		t.Errorf("changes %v with no new flow", c.Addrs)
	}
}
