package conntrack

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

var writeAt = time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)

// roundTrip writes flows and parses them back.
func roundTrip(t testing.TB, flows []snapshot.Flow) ([]snapshot.Flow, string) {
	t.Helper()
	var b bytes.Buffer
	w := NewTextWriter(&b, writeAt)
	for i := range flows {
		if err := w.Write(&flows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []snapshot.Flow
	if _, err := ParseText(bytes.NewReader(b.Bytes()), "written", writeAt, func(f *snapshot.Flow) error {
		got = append(got, *f)
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return got, b.String()
}

// What the writer writes, ParseText reads back as the same flows: TCP,
// UDP never replied, SCTP, GRE, ICMP, IPv6, a zone, a mark, a known start.
func TestTextWriterRoundTrips(t *testing.T) {
	a := netip.MustParseAddr
	flows := []snapshot.Flow{
		{ID: 7, Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 431999, Status: snapshot.StatusSeenReply | snapshot.StatusAssured,
			Orig:  snapshot.Tuple{Src: a("10.244.1.5"), Dst: a("10.96.0.10"), SrcPort: 40000, DstPort: 80},
			Reply: snapshot.Tuple{Src: a("10.244.7.47"), Dst: a("10.244.1.5"), SrcPort: 8080, DstPort: 40000},
			Start: writeAt.Add(-90 * time.Second), Mark: 0x4000, Zone: 3},
		{ID: 8, Proto: snapshot.ProtoUDP, Timeout: 29,
			Orig:  snapshot.Tuple{Src: a("10.244.1.5"), Dst: a("10.96.0.10"), SrcPort: 53000, DstPort: 53},
			Reply: snapshot.Tuple{Src: a("10.96.0.10"), Dst: a("10.244.1.5"), SrcPort: 53, DstPort: 53000}},
		{ID: 9, Proto: snapshot.ProtoSCTP, State: "ESTABLISHED", Timeout: 210, Status: snapshot.StatusSeenReply,
			Orig:  snapshot.Tuple{Src: a("fd00::5"), Dst: a("fd00:96::10"), SrcPort: 3868, DstPort: 3868},
			Reply: snapshot.Tuple{Src: a("fd00::47"), Dst: a("fd00::5"), SrcPort: 3868, DstPort: 3868}},
		{ID: 10, Proto: 47, Timeout: 170, Status: snapshot.StatusSeenReply,
			Orig:  snapshot.Tuple{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), SrcPort: 0x10, DstPort: 0x20},
			Reply: snapshot.Tuple{Src: a("192.0.2.2"), Dst: a("192.0.2.1"), SrcPort: 0x20, DstPort: 0x10}},
		{ID: 11, Proto: 1, Timeout: 29, Status: snapshot.StatusSeenReply,
			Orig:  snapshot.Tuple{Src: a("10.244.1.5"), Dst: a("10.244.7.47")},
			Reply: snapshot.Tuple{Src: a("10.244.7.47"), Dst: a("10.244.1.5")}},
	}
	got, text := roundTrip(t, flows)
	if !reflect.DeepEqual(got, flows) {
		t.Errorf("read back:\n%+v\nwrote:\n%+v\ntext:\n%s", got, flows, text)
	}
}

// Any flow the writer is given, ParseText reads back as written.
func FuzzTextWriterRoundTrips(f *testing.F) {
	f.Add(uint8(6), []byte{10, 244, 1, 5}, []byte{10, 96, 0, 10}, uint16(40000), uint16(80), uint32(431999), uint32(7), uint16(0), "ESTABLISHED", true, int64(90))
	f.Add(uint8(17), []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6}, uint16(1), uint16(53), uint32(29), uint32(0), uint16(2), "", false, int64(-1))
	f.Fuzz(func(t *testing.T, proto uint8, src, dst []byte, sport, dport uint16, timeout, id uint32, zone uint16, state string, assured bool, age int64) {
		s, ok1 := netip.AddrFromSlice(src)
		d, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 || s.Is4() != d.Is4() || s.Is4In6() || d.Is4In6() {
			return
		}
		if _, known := protoNames[proto]; !known {
			return
		}
		fl := snapshot.Flow{ID: id, Proto: snapshot.Proto(proto), Timeout: timeout, Zone: zone, Status: snapshot.StatusSeenReply,
			Orig:  snapshot.Tuple{Src: s, Dst: d, SrcPort: sport, DstPort: dport},
			Reply: snapshot.Tuple{Src: d, Dst: s, SrcPort: dport, DstPort: sport}}
		if isStateWord([]byte(state)) {
			fl.State = internState([]byte(state))
		}
		if assured {
			fl.Status |= snapshot.StatusAssured
		}
		if age >= 0 && age < int64(maxDeltaSeconds) {
			fl.Start = writeAt.Add(-time.Duration(age) * time.Second)
		}
		switch proto {
		case textProtoICMP, textProtoICMPv6:
			fl.Orig.SrcPort, fl.Orig.DstPort, fl.Reply.SrcPort, fl.Reply.DstPort = 0, 0, 0, 0
		}
		got, text := roundTrip(t, []snapshot.Flow{fl})
		if len(got) != 1 || !reflect.DeepEqual(got[0], fl) {
			t.Errorf("read back %+v\nwrote %+v\ntext %s", got, fl, text)
		}
	})
}
