package conntrack

import (
	"context"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// gcPercent returns the garbage collector's percent (GOGC) now.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// While passes keep many flows (a node whose workloads all died), the
// garbage collector runs eagerly, so that the heap does not grow to twice
// what they keep between collections; once they keep few again it runs
// as it did before.
func TestManyKeptFlowsMakeTheCollectorEager(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	many := make(listTable, manyKept)
	for i := range many {
		many[i] = staleFlow()
		many[i].Orig.Src = netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		many[i].Orig.SrcPort = uint16(1024 + i%60000)
		many[i].Reply.Dst, many[i].Reply.DstPort = many[i].Orig.Src, many[i].Orig.SrcPort
	}
	w := &Watch{}
	for _, step := range []struct {
		table listTable
		want  int
	}{{many, eagerGCPercent}, {many, eagerGCPercent}, {many[:10], 100}, {many, eagerGCPercent}, {listTable{}, 100}} {
		w.Table = step.table
		s := &snapshot.Snapshot{}
		if err := w.Collect(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.Conntrack.Len() != len(step.table) || gcPercent() != step.want {
			t.Errorf("a pass that kept %d flows: GC percent %d, want %d", s.Conntrack.Len(), gcPercent(), step.want)
		}
	}
}

// A scan of a listing that keeps many flows leaves the collector eager
// while the rules and the report read them (they run after the
// collection): on the default, the heap grew to twice what was kept as
// they did. A listing that keeps few puts it back; one that fails leaves
// it as it was.
func TestManyKeptListingLeavesTheCollectorEager(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	listing := func(n int) string {
		var b strings.Builder
		w := NewTextWriter(&b, time.Time{})
		for i := range n {
			f := staleFlow()
			f.Orig.Src = netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
			f.Orig.SrcPort = uint16(1024 + i%60000)
			f.Reply.Dst, f.Reply.DstPort = f.Orig.Src, f.Orig.SrcPort
			if err := w.Write(&f); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	all := listing(manyKept)
	many, few := writeListing(t, all), writeListing(t, listing(10))
	// cut fails at its end, once it has kept many.
	cut := writeListing(t, strings.TrimSuffix(all, "\n"))
	src := &FileSource{}
	for _, step := range []struct {
		path string
		want int
	}{{many, eagerGCPercent}, {few, 100}, {many, eagerGCPercent}, {few, 100}, {cut, 100}, {many, eagerGCPercent}, {cut, eagerGCPercent}} {
		src.Path = step.path
		err := src.Collect(context.Background(), &snapshot.Snapshot{})
		if (err != nil) != (step.path == cut) {
			t.Fatalf("%s: %v", step.path, err)
		}
		if got := gcPercent(); got != step.want {
			t.Errorf("after a scan of %s (%v): GC percent %d, want %d", step.path, err, got, step.want)
		}
	}
}

// The index of a node whose workloads all died holds a few flows to each
// of many backends: a backend's own costs (its store, its routes, its
// IPv6 store, the room its seed left) are a few bytes a flow beside the
// 24 of the flow itself. On 2f36acc, 100,000 backends of ten flows took
// 48 bytes a flow (40 since).
func TestIndexOfManyBackends(t *testing.T) {
	const backends, per = 100000, 10
	flows := make([]snapshot.Flow, backends*per)
	for i := range flows {
		f := staleFlow()
		k := i % backends
		f.Orig.Src = netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		f.Orig.SrcPort = uint16(1024 + i%60000)
		f.Reply.Src = netip.AddrFrom4([4]byte{10, byte(200 + k>>16), byte(k >> 8), byte(k)})
		f.Reply.Dst, f.Reply.DstPort = f.Orig.Src, f.Orig.SrcPort
		flows[i] = f
	}
	before := heapInUse()
	ix := seededIndex(flows)
	held := int64(heapInUse()) - int64(before)
	runtime.KeepAlive(flows)
	if ix.len() != backends*per {
		t.Fatalf("the index holds %d flows, want %d", ix.len(), backends*per)
	}
	if each := held / (backends * per); each > 44 {
		t.Errorf("the index of %d flows to %d backends holds %d bytes a flow, want at most 44", backends*per, backends, each)
	}
}
