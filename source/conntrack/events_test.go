package conntrack

import (
	"errors"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Tests of event decoding that need no kernel: the messages are built the
// way ctnetlink_conntrack_event builds them.

// eventMessage is the message the kernel multicasts for f: IPCTNL_MSG_CT_NEW
// with NLM_F_CREATE|NLM_F_EXCL for a new entry, IPCTNL_MSG_CT_DELETE for a
// destroyed one, sequence 0 and the port of the socket that caused it.
func eventMessage(t testing.TB, typ EventType, f *snapshot.Flow) []byte {
	t.Helper()
	switch typ {
	case EventNew:
		return kernelMessage(ctMsgTypeNew, nlmFCreate|nlmFExcl, 0, 4242, kernelPayload(t, f))
	case EventDestroy:
		return kernelMessage(ctMsgTypeDelete, 0, 0, 0, kernelPayload(t, f))
	}
	t.Fatalf("event type %v", typ)
	return nil
}

// decodeAll decodes a datagram as Run does and returns its events.
func decodeAll(b []byte) ([]Event, error) {
	var out []Event
	var ev Event
	for len(b) > 0 {
		m, rest, err := nextMessage(b)
		if err != nil {
			return out, err
		}
		b = rest
		ok, err := decodeEvent(m, &ev)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, ev)
		}
	}
	return out, nil
}

func TestEventTypeString(t *testing.T) {
	for typ, want := range map[EventType]string{EventNew: "new", EventDestroy: "destroy", 0: "EventType(0)", 9: "EventType(9)"} {
		if got := typ.String(); got != want {
			t.Errorf("EventType(%d).String() = %q, want %q", uint8(typ), got, want)
		}
	}
}

func TestDecodeEvent(t *testing.T) {
	flows := sampleFlows()
	var datagram []byte
	var want []Event
	for i := range flows {
		typ := EventNew
		if i%2 == 1 {
			typ = EventDestroy
		}
		datagram = append(datagram, eventMessage(t, typ, &flows[i])...)
		want = append(want, Event{Type: typ, Flow: flows[i]})
	}
	// Messages that are not conntrack events are skipped: an
	// acknowledgement, the end of a dump, a get request, an update of an
	// expectation (subsystem 2), a message of an unknown type.
	skipped := [][]byte{
		errorMessage(1, 0, 0),
		doneMessage(1, 0, 0),
		kernelMessage(ctMsgTypeGet, 0, 0, 0, kernelPayload(t, &flows[0])),
		kernelMessage(2<<8|ctMsgNew, nlmFCreate, 0, 0, []byte{2, 0, 0, 0}),
		kernelMessage(0x7777, 0, 0, 0, nil),
	}
	for _, m := range skipped {
		datagram = append(m, datagram...)
	}
	got, err := decodeAll(datagram)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || !flowsEqual(&got[i].Flow, &want[i].Flow) {
			t.Errorf("event %d: %v %+v, want %v %+v", i, got[i].Type, got[i].Flow, want[i].Type, want[i].Flow)
		}
	}

	// A new event whose flags say nothing of creation is still new.
	got, err = decodeAll(kernelMessage(ctMsgTypeNew, 0, 0, 0, kernelPayload(t, &flows[1])))
	if err != nil || len(got) != 1 || got[0].Type != EventNew {
		t.Errorf("IPCTNL_MSG_CT_NEW without NLM_F_CREATE: %+v, %v", got, err)
	}
}

func TestDecodeEventDoesNotAllocate(t *testing.T) {
	flows := sampleFlows()
	var msgs []message
	for i := range flows {
		m, _, err := nextMessage(eventMessage(t, EventDestroy, &flows[i]))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	var ev Event
	allocs := testing.AllocsPerRun(100, func() {
		for _, m := range msgs {
			if ok, err := decodeEvent(m, &ev); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("decodeEvent allocates %v times per run of %d events", allocs, len(msgs))
	}
}

func TestDecodeEventMalformed(t *testing.T) {
	good := sampleFlows()[0]
	payload := kernelPayload(t, &good)
	noReply := appendNfgen(nil, afInet)
	noReply = appendTuple(noReply, ctaTupleOrig, &good.Orig, good.Proto)
	cases := []struct {
		name     string
		datagram []byte
		says     string
	}{
		{"empty new", kernelMessage(ctMsgTypeNew, nlmFCreate, 0, 0, nil), "new event"},
		{"empty destroy", kernelMessage(ctMsgTypeDelete, 0, 0, 0, nil), "destroy event"},
		{"family 7", kernelMessage(ctMsgTypeDelete, 0, 0, 0, append([]byte{7, 0, 0, 0}, payload[nfgenLen:]...)), "address family 7"},
		{"destroy without reply tuple", kernelMessage(ctMsgTypeDelete, 0, 0, 0, noReply), "without original or reply tuple"},
		{"truncated attribute", kernelMessage(ctMsgTypeNew, 0, 0, 0, payload[:len(payload)-3]), "new event"},
		{"short status", kernelMessage(ctMsgTypeNew, 0, 0, 0, appendAttr(append([]byte(nil), payload...), ctaStatus, 1)), "CTA_STATUS"},
		{"message longer than datagram", eventMessage(t, EventNew, &good)[:40], "message length"},
		{"header cut", eventMessage(t, EventNew, &good)[:12], "too short for a message header"},
	}
	for _, c := range cases {
		got, err := decodeAll(c.datagram)
		if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v (events %+v), want a malformed-message error saying %q", c.name, err, got, c.says)
		}
	}
}

// FuzzEventMessage feeds arbitrary datagrams to the event decoder: it must
// return an error marked malformed or well-formed events, and never panic.
func FuzzEventMessage(f *testing.F) {
	flows := sampleFlows()
	for i := range flows {
		f.Add(eventMessage(f, EventNew, &flows[i]))
		f.Add(eventMessage(f, EventDestroy, &flows[i]))
	}
	f.Add(append(eventMessage(f, EventNew, &flows[0]), eventMessage(f, EventDestroy, &flows[2])...))
	f.Add(errorMessage(0, 0, 0))
	f.Add(kernelMessage(ctMsgTypeDelete, 0, 0, 0, []byte{2, 0, 0, 0, 4, 0, 1, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev Event
		for rest := b; len(rest) > 0; {
			m, r, err := nextMessage(rest)
			if err != nil {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("framing error not marked malformed: %v", err)
				}
				break
			}
			rest = r
			ok, err := decodeEvent(m, &ev)
			if err != nil {
				if ok || !errors.Is(err, errMalformed) {
					t.Fatalf("ok %v, error not marked malformed: %v", ok, err)
				}
				continue
			}
			if !ok {
				if m.typ == ctMsgTypeNew || m.typ == ctMsgTypeDelete {
					t.Fatalf("conntrack message %#x skipped without an error", m.typ)
				}
				continue
			}
			want := EventNew
			if m.typ == ctMsgTypeDelete {
				want = EventDestroy
			}
			if ev.Type != want {
				t.Fatalf("message %#x decoded as a %v event", m.typ, ev.Type)
			}
			checkParsed(t, &ev.Flow)
		}
	})
}
