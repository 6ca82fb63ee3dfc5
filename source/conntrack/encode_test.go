package conntrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestCreateRequest(t *testing.T) {
	f := sampleFlows()[0]
	f.ID, f.Start = 0, time.Time{}
	b, err := appendCreateRequest(nil, 5, &f, true)
	if err != nil {
		t.Fatal(err)
	}
	m, rest, err := nextMessage(b)
	if err != nil || len(rest) != 0 {
		t.Fatalf("%v, %d bytes left", err, len(rest))
	}
	if m.typ != ctMsgTypeNew || m.flags != nlmFRequest|nlmFAck|nlmFCreate|nlmFExcl || m.seq != 5 {
		t.Errorf("header %+v", m)
	}
	// The request parses as an entry: same tuples, state, mark, zone,
	// timeout; the status has CONFIRMED and the bits userspace may set.
	var got snapshot.Flow
	if err := parseFlow(m.payload, &got); err != nil {
		t.Fatal(err)
	}
	want := f
	want.Status = snapshot.StatusSeenReply | snapshot.StatusAssured | snapshot.StatusConfirmed | snapshot.StatusDstNAT
	if !flowsEqual(&got, &want) {
		t.Errorf("create request carries\n %+v\nwant\n %+v", got, want)
	}

	for _, c := range []struct {
		in        uint32
		confirmed bool
		out       uint32
		sent      bool
	}{
		{0, true, 0, false},
		{snapshot.StatusConfirmed, true, 0, false},
		{snapshot.StatusExpected | statusDying, true, 0, false},
		{snapshot.StatusAssured | snapshot.StatusSeenReply, true, snapshot.StatusAssured | snapshot.StatusSeenReply | snapshot.StatusConfirmed, true},
		{snapshot.StatusAssured | snapshot.StatusSeenReply | snapshot.StatusConfirmed, false, snapshot.StatusAssured | snapshot.StatusSeenReply, true},
	} {
		out, sent := createStatus(c.in, c.confirmed)
		if out != c.out || sent != c.sent {
			t.Errorf("createStatus(%#x, %v) = %#x, %v; want %#x, %v", c.in, c.confirmed, out, sent, c.out, c.sent)
		}
	}

	bad := []snapshot.Flow{
		{Proto: snapshot.ProtoTCP, Timeout: 1},
		{Proto: snapshot.ProtoTCP, Timeout: 1, Orig: f.Orig, Reply: snapshot.Tuple{Src: mustAddr("::1"), Dst: mustAddr("::2")}},
		{Proto: snapshot.ProtoTCP, Orig: f.Orig, Reply: f.Reply},
		{Proto: snapshot.ProtoTCP, Timeout: 1, Orig: f.Orig, Reply: f.Reply, State: "OPEN"},
		{Proto: snapshot.ProtoSCTP, Timeout: 1, Orig: f.Orig, Reply: f.Reply, State: "SYN_SENT"},
		{Proto: snapshot.ProtoUDP, Timeout: 1, Orig: f.Orig, Reply: f.Reply, State: "ESTABLISHED"},
	}
	for i := range bad {
		if _, err := appendCreateRequest(nil, 1, &bad[i], true); err == nil {
			t.Errorf("create %+v: no error", bad[i])
		}
	}
}

func TestDeleteRequest(t *testing.T) {
	f := sampleFlows()[0]
	b, err := appendDeleteRequest(nil, 6, &f)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := nextMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.typ != ctMsgTypeDelete || m.flags != nlmFRequest|nlmFAck {
		t.Errorf("header %+v", m)
	}
	// Exactly: nfgenmsg, the original tuple, the zone and the ID.
	var types []uint16
	for a := m.payload[nfgenLen:]; len(a) > 0; {
		typ, v, rest, err := nextAttr(a)
		if err != nil {
			t.Fatal(err)
		}
		a = rest
		types = append(types, typ)
		switch typ {
		case ctaTupleOrig:
			var tu snapshot.Tuple
			if _, err := parseTuple(v, afInet, &tu, "original"); err != nil || tu != f.Orig {
				t.Errorf("tuple %+v, %v", tu, err)
			}
		case ctaZone:
			if z, _ := attrBE16(v, ""); z != f.Zone {
				t.Errorf("zone %d", z)
			}
		case ctaID:
			if id, _ := attrBE32(v, ""); id != f.ID {
				t.Errorf("id %#x", id)
			}
		}
	}
	if len(types) != 3 || types[0] != ctaTupleOrig || types[1] != ctaZone || types[2] != ctaID {
		t.Errorf("attributes %v", types)
	}
	f.ID, f.Zone = 0, 0
	b, _ = appendDeleteRequest(nil, 6, &f)
	if m, _, _ := nextMessage(b); len(m.payload) != nfgenLen+4+48 {
		t.Errorf("delete without ID or zone: %d bytes of payload", len(m.payload))
	}
}

func TestGetRequest(t *testing.T) {
	for _, f := range sampleFlows() {
		b, err := appendGetRequest(nil, 7, &f)
		if err != nil {
			t.Fatal(err)
		}
		m, rest, err := nextMessage(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%v, %d bytes left", err, len(rest))
		}
		// Not a dump: the one entry, then the acknowledgement.
		if m.typ != ctMsgTypeGet || m.flags != nlmFRequest|nlmFAck || m.seq != 7 {
			t.Errorf("header %+v", m)
		}
		family := uint8(afInet)
		if f.Orig.Src.Is6() {
			family = afInet6
		}
		if m.payload[0] != family {
			t.Errorf("%v: family %d", &f, m.payload[0])
		}
		// Exactly: the original tuple and, when not 0, the zone; no ID
		// (the kernel would ignore it).
		var types []uint16
		for a := m.payload[nfgenLen:]; len(a) > 0; {
			typ, v, rest, err := nextAttr(a)
			if err != nil {
				t.Fatal(err)
			}
			a = rest
			types = append(types, typ)
			switch typ {
			case ctaTupleOrig:
				var tu snapshot.Tuple
				if p, err := parseTuple(v, family, &tu, "original"); err != nil || tu != f.Orig || p != uint8(f.Proto) {
					t.Errorf("%v: tuple %+v protocol %d, %v", &f, tu, p, err)
				}
			case ctaZone:
				if z, _ := attrBE16(v, ""); z != f.Zone {
					t.Errorf("%v: zone %d", &f, z)
				}
			}
		}
		want := []uint16{ctaTupleOrig}
		if f.Zone != 0 {
			want = append(want, ctaZone)
		}
		if fmt.Sprint(types) != fmt.Sprint(want) {
			t.Errorf("%v: attributes %v, want %v", &f, types, want)
		}
	}
	mixed := snapshot.Flow{Proto: snapshot.ProtoTCP,
		Orig: snapshot.Tuple{Src: mustAddr("10.0.0.1"), Dst: mustAddr("fd00::1")}}
	if _, err := appendGetRequest(nil, 1, &mixed); err == nil {
		t.Error("a get for an original tuple of two families: no error")
	}
}
