package snapshot

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func tup(src, dst string, sport, dport uint16) Tuple {
	return Tuple{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport}
}

func TestPackRoundTrip(t *testing.T) {
	start := time.Unix(1700000000, 123456789)
	for _, c := range []struct {
		name string
		f    Flow
	}{
		{"ipv4 tcp with state and start", Flow{ID: 0xdeadbeef, Proto: ProtoTCP, State: "ESTABLISHED",
			Orig: tup("10.244.1.50", "10.96.100.50", 45678, 5432), Reply: tup("10.244.2.7", "10.244.1.50", 5432, 45678),
			Status: StatusSeenReply | StatusAssured | StatusConfirmed | StatusDstNAT, Timeout: 431999, Mark: 0x4000, Zone: 7, Start: start}},
		{"ipv4 tcp without state or start", Flow{ID: 3, Proto: ProtoTCP,
			Orig: tup("10.0.0.1", "10.96.0.1", 1, 80), Reply: tup("10.0.0.9", "10.0.0.1", 8080, 1), Timeout: 10}},
		{"ipv4 tcp in the last state", Flow{ID: 4, Proto: ProtoTCP, State: "SYN_SENT2",
			Orig: tup("10.0.0.1", "10.0.0.2", 65535, 1), Reply: tup("10.0.0.2", "10.0.0.1", 1, 65535)}},
		{"ipv4 udp with start", Flow{ID: 1, Proto: ProtoUDP, Status: StatusConfirmed, Timeout: 29, Start: start,
			Orig: tup("192.168.0.1", "192.168.0.2", 53000, 53), Reply: tup("192.168.0.2", "192.168.0.1", 53, 53000)}},
		{"ipv4 sctp in state NONE", Flow{ID: 5, Proto: ProtoSCTP, State: "NONE",
			Orig: tup("10.1.0.1", "10.96.7.7", 3868, 3868), Reply: tup("10.1.4.4", "10.1.0.1", 3868, 3868)}},
		{"ipv4 icmp", Flow{ID: 6, Proto: 1,
			Orig: tup("10.0.0.1", "10.0.0.2", 0, 0), Reply: tup("10.0.0.2", "10.0.0.1", 0, 0)}},
		{"ipv6 tcp with state", Flow{ID: 2, Proto: ProtoTCP, State: "TIME_WAIT", Status: StatusConfirmed, Timeout: 120,
			Orig: tup("2001:db8::1", "2001:db8::2", 1, 65535), Reply: tup("2001:db8::2", "2001:db8::1", 65535, 1)}},
		{"ipv6 udp with start and zone", Flow{ID: 9, Proto: ProtoUDP, Zone: 3, Status: 0x18e, Start: start,
			Orig: tup("fd00::50", "fd00:96::a", 5353, 53), Reply: tup("fd00:244::9", "fd00::50", 5353, 5353)}},
		{"ipv6 sctp with state and start", Flow{ID: 77, Proto: ProtoSCTP, State: "HEARTBEAT_ACKED", Timeout: 210, Start: start,
			Orig: tup("fd00::1", "fd00:96::10", 3868, 3868), Reply: tup("fd00:244::9", "fd00::1", 3869, 3868)}},
		{"ipv6 with ipv4-mapped addresses", Flow{ID: 8, Proto: ProtoUDP,
			Orig: tup("::ffff:10.0.0.1", "::ffff:10.0.0.2", 1, 2), Reply: tup("::ffff:10.0.0.2", "::ffff:10.0.0.1", 2, 1)}},
		{"ipv4 tcp seen by the agent", Flow{ID: 11, Proto: ProtoTCP, State: "ESTABLISHED", Seen: start,
			Orig: tup("10.0.0.1", "10.96.0.1", 1, 80), Reply: tup("10.0.0.9", "10.0.0.1", 8080, 1)}},
		{"start before 1970", Flow{ID: 10, Proto: ProtoUDP, Start: time.Unix(-5, 0),
			Orig: tup("10.0.0.1", "10.0.0.2", 1, 2), Reply: tup("10.0.0.2", "10.0.0.1", 2, 1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Pack(&c.f)
			// Packing in place overwrites every field.
			inPlace := Pack(&Flow{ID: 99, Proto: ProtoSCTP, State: "CLOSED", Zone: 9, Timeout: 9, Mark: 9, Start: time.Now(),
				Orig: tup("fd09::1", "fd09::2", 9, 9), Reply: tup("fd09::3", "fd09::4", 9, 9)})
			inPlace.Pack(&c.f)
			if inPlace != p {
				t.Errorf("packed in place:\n %+v\nwant %+v", inPlace, p)
			}
			got := p.Unpack()
			if got.ID != c.f.ID || got.Proto != c.f.Proto || got.Orig != c.f.Orig || got.Reply != c.f.Reply ||
				got.State != c.f.State || got.Status != c.f.Status || got.Timeout != c.f.Timeout ||
				got.Mark != c.f.Mark || got.Zone != c.f.Zone || !got.Start.Equal(c.f.Start) || got.Start.IsZero() != c.f.Start.IsZero() ||
				!got.Seen.Equal(c.f.Seen) || got.Seen.IsZero() != c.f.Seen.IsZero() {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, c.f)
			}
			// UnpackInto overwrites every field.
			into := Flow{State: "stale", Start: time.Now(), Timeout: 1, Mark: 1}
			p.UnpackInto(&into)
			if !reflect.DeepEqual(into, got) {
				t.Errorf("UnpackInto:\n got %+v\nwant %+v", into, got)
			}
			if k := c.f.Key(); p.Key() != k || k.Proto() != c.f.Proto || k.Orig() != c.f.Orig || k.Zone() != c.f.Zone {
				t.Errorf("key %+v: proto %v orig %+v zone %d", k, k.Proto(), k.Orig(), k.Zone())
			}
			if p.ID() != c.f.ID {
				t.Errorf("ID() = %d, want %d", p.ID(), c.f.ID)
			}
			// The parts, kept apart and put back together, are the flow.
			joined := PackedFlow{FlowKey: p.Key(), ReplySrc: c.f.Reply.Src.As16(), FlowDetails: p.FlowDetails}
			want := got
			want.Timeout, want.Mark = 0, 0
			if j := joined.Unpack(); !reflect.DeepEqual(j, want) {
				t.Errorf("joined parts:\n got %+v\nwant %+v", j, want)
			}
		})
	}
}

// A state name the tables do not have, or a state for a protocol without
// any, is not kept.
func TestPackUnknownState(t *testing.T) {
	for _, f := range []Flow{
		{Proto: ProtoTCP, State: "BOGUS", Orig: tup("10.0.0.1", "10.0.0.2", 1, 2), Reply: tup("10.0.0.2", "10.0.0.1", 2, 1)},
		{Proto: ProtoUDP, State: "ESTABLISHED", Orig: tup("10.0.0.1", "10.0.0.2", 1, 2), Reply: tup("10.0.0.2", "10.0.0.1", 2, 1)},
	} {
		p := Pack(&f)
		if got := p.Unpack(); got.State != "" {
			t.Errorf("%v %q: unpacked state %q", f.Proto, f.State, got.State)
		}
	}
}

// The key is the entry's identity to the kernel: the reply, ID, state and
// the rest do not change it; the protocol, any part of the original tuple,
// its family and the zone do.
func TestFlowKey(t *testing.T) {
	base := Flow{ID: 1, Proto: ProtoTCP, State: "ESTABLISHED", Zone: 2,
		Orig: tup("10.0.0.1", "10.96.0.1", 1000, 80), Reply: tup("10.244.0.9", "10.0.0.1", 8080, 1000)}
	same := base
	same.ID, same.State, same.Status, same.Timeout, same.Mark, same.Start = 2, "FIN_WAIT", StatusAssured, 9, 9, time.Now()
	same.Reply = tup("10.244.0.8", "10.0.0.5", 8081, 1001)
	if base.Key() != same.Key() {
		t.Error("the key depends on more than the protocol, the original tuple and the zone")
	}
	for name, change := range map[string]func(*Flow){
		"protocol":         func(f *Flow) { f.Proto = ProtoUDP },
		"source":           func(f *Flow) { f.Orig.Src = netip.MustParseAddr("10.0.0.2") },
		"destination":      func(f *Flow) { f.Orig.Dst = netip.MustParseAddr("10.96.0.2") },
		"source port":      func(f *Flow) { f.Orig.SrcPort++ },
		"destination port": func(f *Flow) { f.Orig.DstPort++ },
		"zone":             func(f *Flow) { f.Zone++ },
		"family": func(f *Flow) {
			f.Orig = Tuple{Src: netip.AddrFrom16(f.Orig.Src.As16()), Dst: netip.AddrFrom16(f.Orig.Dst.As16()),
				SrcPort: f.Orig.SrcPort, DstPort: f.Orig.DstPort}
		},
	} {
		f := base
		change(&f)
		if f.Key() == base.Key() {
			t.Errorf("another %s, the same key", name)
		}
	}
	m := map[FlowKey]uint32{base.Key(): base.ID}
	if m[same.Key()] != base.ID {
		t.Error("not usable as a map key")
	}
}

// The records must stay free of pointers (the garbage collector would scan
// every one) and as small as they are: the agent keeps a FlowKey and a
// FlowDetails for each DNATed flow of the node, the kernel reader a
// PackedFlow for each kept flow.
func TestPackedSizes(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		size uintptr
	}{
		{reflect.TypeFor[FlowKey](), 40},
		{reflect.TypeFor[FlowDetails](), 40},
		{reflect.TypeFor[PackedFlow](), 104},
	} {
		if c.typ.Size() != c.size {
			t.Errorf("%v is %d bytes, want %d", c.typ, c.typ.Size(), c.size)
		}
		if p := pointerIn(c.typ); p != "" {
			t.Errorf("%v holds a pointer: %s", c.typ, p)
		}
	}
}

// pointerIn names a field of t that is or holds a pointer; "" when none.
func pointerIn(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if p := pointerIn(t.Field(i).Type); p != "" {
				return t.Field(i).Name + "." + p
			}
		}
		return ""
	case reflect.Array:
		return pointerIn(t.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return t.String()
}

func TestPackDoesNotAllocate(t *testing.T) {
	f := Flow{ID: 1, Proto: ProtoTCP, State: "ESTABLISHED", Start: time.Unix(1700000000, 0),
		Orig: tup("fd00::1", "fd00::2", 1, 2), Reply: tup("fd00::3", "fd00::1", 2, 1)}
	var p PackedFlow
	var out Flow
	if n := testing.AllocsPerRun(100, func() {
		p = Pack(&f)
		p.UnpackInto(&out)
	}); n != 0 {
		t.Errorf("Pack and UnpackInto allocate %v times", n)
	}
}

// TestStates pins the names to those `conntrack -L` prints, NONE for a
// number it has no name for, and StateNumber as StateName's inverse.
func TestStates(t *testing.T) {
	tcp := []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT",
		"LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}
	sctp := []string{"NONE", "CLOSED", "COOKIE_WAIT", "COOKIE_ECHOED", "ESTABLISHED",
		"SHUTDOWN_SENT", "SHUTDOWN_RECD", "SHUTDOWN_ACK_SENT", "HEARTBEAT_SENT", "HEARTBEAT_ACKED"}
	for _, c := range []struct {
		p     Proto
		names []string
	}{{ProtoTCP, tcp}, {ProtoSCTP, sctp}} {
		if got := States(c.p); !reflect.DeepEqual(got, c.names) {
			t.Errorf("States(%v) = %v", c.p, got)
		}
		for i, name := range c.names {
			if got := StateName(c.p, uint8(i)); got != name {
				t.Errorf("StateName(%v, %d) = %q, want %q", c.p, i, got, name)
			}
			if n, ok := StateNumber(c.p, name); !ok || n != uint8(i) {
				t.Errorf("StateNumber(%v, %q) = %d, %v", c.p, name, n, ok)
			}
		}
		for _, n := range []uint8{uint8(len(c.names)), 255} {
			if got := StateName(c.p, n); got != "NONE" {
				t.Errorf("StateName(%v, %d) = %q, want NONE", c.p, n, got)
			}
		}
		if _, ok := StateNumber(c.p, "OPEN"); ok {
			t.Errorf("StateNumber(%v, OPEN) is known", c.p)
		}
	}
	States(ProtoTCP)[0] = "changed"
	if StateName(ProtoTCP, 0) != "NONE" {
		t.Error("States returned the table itself")
	}
	if States(ProtoUDP) != nil || StateName(ProtoUDP, 0) != "" {
		t.Error("UDP has states")
	}
	if _, ok := StateNumber(ProtoUDP, "NONE"); ok {
		t.Error("UDP has a state NONE")
	}
}
