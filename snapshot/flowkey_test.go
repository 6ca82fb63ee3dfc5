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
