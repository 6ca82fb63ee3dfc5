package snapshot

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
)

func testFlow(backend string, sport uint16) Flow {
	return Flow{Proto: ProtoTCP, State: "ESTABLISHED", ID: uint32(sport), Status: 0x18e, Timeout: 300,
		Orig:  Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: sport, DstPort: 80},
		Reply: Tuple{Src: netip.MustParseAddr(backend), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: sport}}
}

// A flow split into its backend, route and own part, and joined again, is
// what it was: every field a rule or a remedy reads, the state (it decides
// a stale flow's severity) and a masquerading node's reply address
// included.
func TestSplitJoinRoundTrip(t *testing.T) {
	v6 := Flow{ID: 9, Proto: ProtoUDP, Zone: 3, Status: 0x18e, Timeout: 30,
		Orig:  Tuple{Src: netip.MustParseAddr("fd00::50"), Dst: netip.MustParseAddr("fd00:96::a"), SrcPort: 5353, DstPort: 53},
		Reply: Tuple{Src: netip.MustParseAddr("fd00:244::9"), Dst: netip.MustParseAddr("fd00::50"), SrcPort: 5353, DstPort: 5353},
		Start: time.Unix(1700000000, 123).UTC()}
	masq := testFlow("10.244.0.9", 2)
	masq.Reply.Dst, masq.Reply.DstPort = netip.MustParseAddr("192.168.1.10"), 61000
	sctp := testFlow("10.244.0.9", 3)
	sctp.Proto, sctp.State = ProtoSCTP, "COOKIE_ECHOED"
	seen := testFlow("10.244.0.9", 4)
	seen.Seen = time.Unix(1700000100, 7).UTC()
	for _, f := range []Flow{testFlow("10.244.0.9", 1), v6, masq, sctp, seen} {
		backend, route, src, sport, rest := SplitFlow(&f)
		var got Flow
		JoinFlow(backend, &route, src, sport, rest, &got)
		if got != f {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, f)
		}
	}
}

// A table keeps its flows a backend's together, with their counts, and
// the state words a listing printed that the kernel's tables do not name.
func TestConntrackKeepsFlowsByBackend(t *testing.T) {
	odd := testFlow("10.244.0.7", 3)
	odd.State = "SOMETHING_NEW"
	flows := []Flow{testFlow("10.244.0.9", 1), testFlow("10.244.0.7", 2), testFlow("10.244.0.9", 4), odd}
	c := NewConntrack(10, flows...)
	if c.Len() != 4 || c.Seen != 10 {
		t.Fatalf("Len %d, Seen %d", c.Len(), c.Seen)
	}
	var order []uint16
	for f := range c.All() {
		order = append(order, f.Orig.SrcPort)
	}
	if want := []uint16{1, 4, 2, 3}; !equal(order, want) {
		t.Errorf("order %v, want %v (a backend's flows together, in the order kept)", order, want)
	}
	got := map[netip.Addr]int{}
	for b, n := range c.Backends() {
		got[b] = n
	}
	if got[netip.MustParseAddr("10.244.0.9")] != 2 || got[netip.MustParseAddr("10.244.0.7")] != 2 || len(got) != 2 {
		t.Errorf("backends %v", got)
	}
	if fs := c.Flows(); fs[3].State != "SOMETHING_NEW" {
		t.Errorf("the unknown state came back as %q", fs[3].State)
	}
	var none *Conntrack
	if none.Len() != 0 || len(none.Flows()) != 0 {
		t.Error("a nil table is not empty")
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkConntrackKeep measures keeping a million flows to one backend,
// as a table where every flow is stale is kept: time, and heap per flow.
func BenchmarkConntrackKeep(b *testing.B) {
	const n = 1000000
	f := testFlow("10.244.0.9", 1)
	for b.Loop() {
		c := &Conntrack{}
		for i := range n {
			f.Orig.SrcPort, f.Reply.DstPort = uint16(i), uint16(i)
			f.Orig.Src = netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)})
			f.Reply.Dst = f.Orig.Src
			c.Keep(&f)
		}
		if c.Len() != n {
			b.Fatal(c.Len())
		}
	}
}

// A table of a node whose workloads all died keeps a few flows to each of
// many backends: it pays for the flows, not for room a busy backend would
// need (on 2f36acc, a chunk of 64 flows a backend: 3 KB for 10 flows).
// Fit gives back what the last chunks leave unused, and every flow, its
// place (a FlowRef, a selection) and its order stay what they were.
func TestManyBackendsCostTheirFlows(t *testing.T) {
	const backends, per = 100000, 10
	before := heapAlloc()
	c := &Conntrack{}
	f := testFlow("10.244.0.9", 1)
	for i := range backends * per {
		k := i % backends
		f.Orig.SrcPort, f.Reply.DstPort, f.ID = uint16(1024+i%60000), uint16(1024+i%60000), uint32(i+1)
		f.Orig.Src = netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)})
		f.Reply.Dst = f.Orig.Src
		f.Reply.Src = netip.AddrFrom4([4]byte{10, byte(200 + k>>16), byte(k >> 8), byte(k)})
		c.Keep(&f)
	}
	var sel FlowSelection
	var first []Flow
	seventh := netip.AddrFrom4([4]byte{10, 200, 0, 7})
	odd := false
	for ref, f := range c.Refs() {
		if f.Reply.Src == seventh {
			if odd = !odd; odd {
				sel.Add(c, ref)
				first = append(first, *f)
			}
		}
	}
	c.Fit()
	held := int64(heapAlloc()) - int64(before)
	if each := held / (backends * per); each > 48 {
		t.Errorf("%d flows to %d backends hold %d bytes a flow, want at most 48", backends*per, backends, each)
	}
	if c.Len() != backends*per {
		t.Fatalf("Len %d", c.Len())
	}
	var again []Flow
	for f := range sel.All() {
		again = append(again, *f)
	}
	if len(first) != per/2 || !equal(again, first) {
		t.Errorf("a selection of %d flows gives %d after Fit: %v, want %v", len(first), len(again), again, first)
	}
	n, last := 0, netip.Addr{}
	for f := range c.All() {
		if n%per == 0 {
			last = f.Reply.Src
		} else if f.Reply.Src != last {
			t.Fatalf("flow %d goes to %s among the flows of %s", n, f.Reply.Src, last)
		}
		n++
	}
}

// A backend's flows from IPv4 and IPv6 clients (an IPv4-mapped backend)
// are kept in one group: those from IPv4 clients, then the others, each
// in the order kept, and a selection reads each where it is.
func TestOneBackendOfBothFamilies(t *testing.T) {
	v4 := testFlow("10.244.0.9", 1)
	v6 := testFlow("10.244.0.9", 2)
	v6.Orig.Src, v6.Orig.Dst = netip.MustParseAddr("fd00::50"), netip.MustParseAddr("fd00:96::a")
	v6.Reply.Src, v6.Reply.Dst = netip.MustParseAddr("::ffff:10.244.0.9"), v6.Orig.Src
	v4b := testFlow("10.244.0.9", 3)
	c := NewConntrack(3, v6, v4, v4b)
	c.Fit()
	var got []uint16
	var sel FlowSelection
	for ref, f := range c.Refs() {
		got = append(got, f.Orig.SrcPort)
		if f.Orig.SrcPort != 1 {
			sel.Add(c, ref)
		}
	}
	if !equal(got, []uint16{1, 3, 2}) {
		t.Errorf("order %v, want [1 3 2]", got)
	}
	var picked []Flow
	for f := range sel.All() {
		picked = append(picked, *f)
	}
	if len(picked) != 2 || picked[0] != v4b || picked[1] != v6 {
		t.Errorf("selection %+v", picked)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
