package conntrack

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Tests of the wire format that need no kernel: the messages are built the
// way the kernel builds them (see kernelMessage) and parsed back.

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// sampleFlows covers both families, the three protocols, DNAT and not, and
// every field the parser fills.
func sampleFlows() []snapshot.Flow {
	return []snapshot.Flow{
		{
			ID: 0xdeadbeef, Proto: snapshot.ProtoTCP,
			Orig:    snapshot.Tuple{Src: mustAddr("10.244.1.50"), Dst: mustAddr("10.96.100.50"), SrcPort: 45678, DstPort: 5432},
			Reply:   snapshot.Tuple{Src: mustAddr("10.244.2.7"), Dst: mustAddr("10.244.1.50"), SrcPort: 5432, DstPort: 45678},
			State:   "ESTABLISHED",
			Status:  snapshot.StatusSeenReply | snapshot.StatusAssured | snapshot.StatusConfirmed | snapshot.StatusDstNAT,
			Timeout: 431999, Mark: 0x4000, Zone: 7,
			Start: time.Unix(1700000000, 123456789),
		},
		{
			ID: 1, Proto: snapshot.ProtoUDP,
			Orig:    snapshot.Tuple{Src: mustAddr("192.168.0.1"), Dst: mustAddr("192.168.0.2"), SrcPort: 53000, DstPort: 53},
			Reply:   snapshot.Tuple{Src: mustAddr("192.168.0.2"), Dst: mustAddr("192.168.0.1"), SrcPort: 53, DstPort: 53000},
			Status:  snapshot.StatusConfirmed,
			Timeout: 29,
		},
		{
			ID: 77, Proto: snapshot.ProtoSCTP,
			Orig:    snapshot.Tuple{Src: mustAddr("fd00::1"), Dst: mustAddr("fd00:96::10"), SrcPort: 3868, DstPort: 3868},
			Reply:   snapshot.Tuple{Src: mustAddr("fd00:244::9"), Dst: mustAddr("fd00::1"), SrcPort: 3869, DstPort: 3868},
			State:   "HEARTBEAT_SENT",
			Status:  snapshot.StatusConfirmed | snapshot.StatusSeenReply,
			Timeout: 210,
		},
		{
			ID: 2, Proto: snapshot.ProtoTCP,
			Orig:    snapshot.Tuple{Src: mustAddr("2001:db8::1"), Dst: mustAddr("2001:db8::2"), SrcPort: 1, DstPort: 65535},
			Reply:   snapshot.Tuple{Src: mustAddr("2001:db8::2"), Dst: mustAddr("2001:db8::1"), SrcPort: 65535, DstPort: 1},
			State:   "SYN_SENT2",
			Status:  snapshot.StatusConfirmed,
			Timeout: 120,
		},
	}
}

// kernelPayload encodes f as the payload of the IPCTNL_MSG_CT_NEW message
// the kernel sends in a dump, in the kernel's attribute order.
func kernelPayload(t testing.TB, f *snapshot.Flow) []byte {
	t.Helper()
	family := uint8(afInet)
	if f.Orig.Src.Is6() {
		family = afInet6
	}
	b := appendNfgen(nil, family)
	b = appendTuple(b, ctaTupleOrig, &f.Orig, f.Proto)
	b = appendTuple(b, ctaTupleReply, &f.Reply, f.Proto)
	b = appendBE32(b, ctaStatus, f.Status)
	b = appendBE32(b, ctaTimeout, f.Timeout)
	b = appendBE32(b, ctaMark, f.Mark)
	// Counters and other attributes the parser skips.
	c := len(b)
	b = beginNest(b, 9) // CTA_COUNTERS_ORIG
	b = appendAttr(b, 1, 0, 0, 0, 0, 0, 0, 0, 5)
	b = endNest(b, c)
	if !f.Start.IsZero() {
		ts := len(b)
		b = beginNest(b, ctaTimestamp)
		b = appendAttr(b, ctaTimestampStart, binary.BigEndian.AppendUint64(nil, uint64(f.Start.UnixNano()))...)
		b = endNest(b, ts)
	}
	b = appendBE32(b, ctaID, f.ID)
	if f.Zone != 0 {
		b = appendBE16(b, ctaZone, f.Zone)
	}
	switch f.Proto {
	case snapshot.ProtoTCP:
		n, ok := snapshot.StateNumber(snapshot.ProtoTCP, f.State)
		if !ok {
			t.Fatalf("state %q", f.State)
		}
		pi := len(b)
		b = beginNest(b, ctaProtoinfo)
		tcp := len(b)
		b = beginNest(b, ctaProtoinfoTCP)
		b = appendU8(b, ctaProtoinfoTCPState, n)
		b = appendU8(b, 2, 7) // CTA_PROTOINFO_TCP_WSCALE_ORIGINAL
		b = appendAttr(b, 4, 0x0a, 0x0a)
		b = endNest(b, tcp)
		b = endNest(b, pi)
	case snapshot.ProtoSCTP:
		n, ok := snapshot.StateNumber(snapshot.ProtoSCTP, f.State)
		if !ok {
			t.Fatalf("state %q", f.State)
		}
		pi := len(b)
		b = beginNest(b, ctaProtoinfo)
		sctp := len(b)
		b = beginNest(b, ctaProtoinfoSCTP)
		b = appendU8(b, ctaProtoinfoSCTPState, n)
		b = appendBE32(b, ctaProtoinfoSCTPVtagOrig, 1)
		b = appendBE32(b, ctaProtoinfoSCTPVtagReply, 2)
		b = endNest(b, sctp)
		b = endNest(b, pi)
	}
	return b
}

// kernelMessage wraps payload in a netlink header.
func kernelMessage(typ, flags uint16, seq, pid uint32, payload []byte) []byte {
	b := native.AppendUint32(nil, uint32(nlmsgHdrLen+len(payload)))
	b = native.AppendUint16(b, typ)
	b = native.AppendUint16(b, flags)
	b = native.AppendUint32(b, seq)
	b = native.AppendUint32(b, pid)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func doneMessage(seq, pid uint32, code int32) []byte {
	return kernelMessage(nlmsgDone, nlmFMulti, seq, pid, native.AppendUint32(nil, uint32(code)))
}

func errorMessage(seq, pid uint32, errno syscall.Errno) []byte {
	p := native.AppendUint32(nil, uint32(-int32(errno)))
	p = append(p, make([]byte, nlmsgHdrLen)...) // the request's header
	return kernelMessage(nlmsgError, nlmFCapped, seq, pid, p)
}

func flowsEqual(a, b *snapshot.Flow) bool {
	return a.ID == b.ID && a.Proto == b.Proto && a.Orig == b.Orig && a.Reply == b.Reply &&
		a.State == b.State && a.Status == b.Status && a.Timeout == b.Timeout &&
		a.Mark == b.Mark && a.Zone == b.Zone && a.Start.Equal(b.Start)
}

func TestParseFlowRoundTrip(t *testing.T) {
	for _, want := range sampleFlows() {
		var got snapshot.Flow
		got.State = "stale" // every field must be overwritten
		got.Start = time.Now()
		if err := parseFlow(kernelPayload(t, &want), &got); err != nil {
			t.Fatalf("%v: %v", &want, err)
		}
		if !flowsEqual(&got, &want) {
			t.Errorf("parsed\n %+v\nwant\n %+v", got, want)
		}
	}
}

func TestParseFlowDoesNotAllocate(t *testing.T) {
	flows := sampleFlows()
	payloads := make([][]byte, len(flows))
	for i := range flows {
		payloads[i] = kernelPayload(t, &flows[i])
	}
	var f snapshot.Flow
	allocs := testing.AllocsPerRun(100, func() {
		for _, p := range payloads {
			if err := parseFlow(p, &f); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("parseFlow allocates %v times per run of %d entries", allocs, len(payloads))
	}
}

// TestStateNames pins the names to those `conntrack -L` prints, including
// NONE for a number it has no name for.
func TestStateNames(t *testing.T) {
	tcp := []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT",
		"LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2", "NONE", "NONE"}
	sctp := []string{"NONE", "CLOSED", "COOKIE_WAIT", "COOKIE_ECHOED", "ESTABLISHED",
		"SHUTDOWN_SENT", "SHUTDOWN_RECD", "SHUTDOWN_ACK_SENT", "HEARTBEAT_SENT", "HEARTBEAT_ACKED", "NONE"}
	base := sampleFlows()
	check := func(f snapshot.Flow, infoType uint16, n uint8, want string) {
		t.Helper()
		b := kernelPayload(t, &snapshot.Flow{Proto: snapshot.ProtoUDP, Orig: f.Orig, Reply: f.Reply})
		pi := len(b)
		b = beginNest(b, ctaProtoinfo)
		in := len(b)
		b = beginNest(b, infoType)
		b = appendU8(b, 1, n)
		b = endNest(b, in)
		b = endNest(b, pi)
		// Swap the protocol number in both tuples.
		var got snapshot.Flow
		b = setProto(t, b, f.Proto)
		if err := parseFlow(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.State != want {
			t.Errorf("%v state %d: %q, want %q", f.Proto, n, got.State, want)
		}
	}
	for n, want := range tcp {
		check(base[0], ctaProtoinfoTCP, uint8(n), want)
	}
	for n, want := range sctp {
		check(base[2], ctaProtoinfoSCTP, uint8(n), want)
	}
	check(base[0], ctaProtoinfoTCP, 255, "NONE")
	// A UDP entry has no state, whatever the message says.
	udp := base[1]
	check(udp, ctaProtoinfoTCP, 3, "")
}

// setProto rewrites every CTA_PROTO_NUM in a payload built by kernelPayload.
func setProto(t *testing.T, b []byte, p snapshot.Proto) []byte {
	t.Helper()
	out := append([]byte(nil), b...)
	n := 0
	for i := nfgenLen; i+8 <= len(out); i++ {
		// A CTA_PROTO_NUM attribute: length 5, type 1, one byte of value,
		// inside a CTA_TUPLE_PROTO nest.
		if native.Uint16(out[i:]) == 5 && native.Uint16(out[i+2:]) == ctaProtoNum &&
			i >= 4 && native.Uint16(out[i-2:])&nlaTypeMask == ctaTupleProto {
			out[i+4] = uint8(p)
			n++
		}
	}
	if n != 2 {
		t.Fatalf("found %d protocol numbers", n)
	}
	return out
}

func TestParseFlowMalformed(t *testing.T) {
	good := sampleFlows()[0]
	v4 := kernelPayload(t, &good)
	tuple := func(typ uint16, src, dst []byte, srcType, dstType uint16, proto ...byte) []byte {
		var b []byte
		tu := len(b)
		b = beginNest(b, typ)
		ip := len(b)
		b = beginNest(b, ctaTupleIP)
		b = appendAttr(b, srcType, src...)
		b = appendAttr(b, dstType, dst...)
		b = endNest(b, ip)
		if proto != nil {
			l4 := len(b)
			b = beginNest(b, ctaTupleProto)
			b = appendAttr(b, ctaProtoNum, proto...)
			b = appendBE16(b, ctaProtoSrcPort, 1)
			b = endNest(b, l4)
		}
		return endNest(b, tu)
	}
	a4 := []byte{10, 0, 0, 1}
	a16 := make([]byte, 16)
	hdr := appendNfgen(nil, afInet)
	okReply := tuple(ctaTupleReply, a4, a4, ctaIPv4Src, ctaIPv4Dst, 6)
	cases := map[string][]byte{
		"empty":                 nil,
		"short nfgenmsg":        {2, 0},
		"family 7":              append(appendNfgen(nil, 7), v4[nfgenLen:]...),
		"truncated":             v4[:len(v4)-3],
		"attribute past end":    append(append([]byte(nil), hdr...), 0xff, 0, 1, 0),
		"attribute length 2":    append(append([]byte(nil), hdr...), 2, 0, 1, 0),
		"three trailing bytes":  append(append([]byte(nil), v4...), 1, 2, 3),
		"no reply tuple":        append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4, a4, ctaIPv4Src, ctaIPv4Dst, 6)...),
		"no tuples":             appendBE32(append([]byte(nil), hdr...), ctaStatus, 8),
		"v6 address in v4":      append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a16, a16, ctaIPv6Src, ctaIPv6Dst, 6)...), okReply...),
		"short address":         append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4[:3], a4, ctaIPv4Src, ctaIPv4Dst, 6)...), okReply...),
		"no destination":        append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4, nil, ctaIPv4Src, 99, 6)...), okReply...),
		"no protocol":           append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4, a4, ctaIPv4Src, ctaIPv4Dst)...), okReply...),
		"wide protocol number":  append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4, a4, ctaIPv4Src, ctaIPv4Dst, 0, 6)...), okReply...),
		"protocols differ":      append(append(append([]byte(nil), hdr...), tuple(ctaTupleOrig, a4, a4, ctaIPv4Src, ctaIPv4Dst, 17)...), okReply...),
		"short status":          appendAttr(append([]byte(nil), v4...), ctaStatus, 0, 8),
		"long timeout":          appendAttr(append([]byte(nil), v4...), ctaTimeout, 0, 0, 0, 0, 1),
		"short zone":            appendAttr(append([]byte(nil), v4...), ctaZone, 1),
		"short timestamp":       appendAttr(append([]byte(nil), v4...), ctaTimestamp, 12, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0),
		"negative timestamp":    appendAttr(append([]byte(nil), v4...), ctaTimestamp, 12, 0, 1, 0, 0x80, 0, 0, 0, 0, 0, 0, 0),
		"wide tcp state":        appendAttr(append([]byte(nil), v4...), ctaProtoinfo, 12, 0, 1, 0x80, 6, 0, 1, 0, 3, 0, 0, 0),
		"broken protoinfo nest": appendAttr(append([]byte(nil), v4...), ctaProtoinfo, 12, 0, 1, 0x80, 9, 0, 1, 0, 3, 0, 0, 0),
	}
	for name, b := range cases {
		var f snapshot.Flow
		err := parseFlow(b, &f)
		if !errors.Is(err, errMalformed) {
			t.Errorf("%s: err = %v, want a malformed-message error", name, err)
		}
	}
}

// dumpOf builds the datagrams of a dump of flows, n entries per datagram.
func dumpOf(t testing.TB, seq, pid uint32, flows []snapshot.Flow, n int) [][]byte {
	var out [][]byte
	var cur []byte
	for i := range flows {
		cur = append(cur, kernelMessage(ctMsgTypeNew, nlmFMulti, seq, pid, kernelPayload(t, &flows[i]))...)
		if (i+1)%n == 0 {
			out = append(out, cur)
			cur = nil
		}
	}
	return append(out, append(cur, doneMessage(seq, pid, 0)...))
}

func TestDumperFeed(t *testing.T) {
	flows := sampleFlows()
	var got []snapshot.Flow
	d := dumper{seq: 9, pid: 4242, fn: func(f *snapshot.Flow) error {
		got = append(got, *f)
		return nil
	}}
	dgrams := dumpOf(t, 9, 4242, flows, 3)
	if len(dgrams) != 2 {
		t.Fatalf("%d datagrams", len(dgrams))
	}
	for i, b := range dgrams {
		over, err := d.feed(b)
		if err != nil {
			t.Fatal(err)
		}
		if over != (i == len(dgrams)-1) {
			t.Fatalf("datagram %d: over = %v", i, over)
		}
	}
	if d.seen != len(flows) || len(got) != len(flows) {
		t.Fatalf("seen %d, got %d flows, want %d", d.seen, len(got), len(flows))
	}
	for i := range flows {
		if !flowsEqual(&got[i], &flows[i]) {
			t.Errorf("flow %d: %+v, want %+v", i, got[i], flows[i])
		}
	}
}

func TestDumperErrors(t *testing.T) {
	flows := sampleFlows()
	entry := kernelMessage(ctMsgTypeNew, nlmFMulti, 9, 1, kernelPayload(t, &flows[0]))
	fnErr := errors.New("stop")
	cases := []struct {
		name     string
		datagram []byte
		fn       func(*snapshot.Flow) error
		over     bool
		is       error
	}{
		{"permission", errorMessage(9, 1, syscall.EPERM), nil, true, ErrPermission},
		{"access", errorMessage(9, 1, syscall.EACCES), nil, true, ErrPermission},
		{"no ctnetlink", errorMessage(9, 1, syscall.EINVAL), nil, true, source.ErrUnsupported},
		{"no subsystem", errorMessage(9, 1, syscall.ENOENT), nil, true, source.ErrUnsupported},
		{"lost messages", errorMessage(9, 1, syscall.ENOBUFS), nil, true, syscall.ENOBUFS},
		{"error in done", append(append([]byte(nil), entry...), doneMessage(9, 1, -int32(syscall.ENOBUFS))...), nil, true, syscall.ENOBUFS},
		{"truncated message", entry[:len(entry)-8], nil, false, errMalformed},
		{"truncated header", entry[:10], nil, false, errMalformed},
		{"other sequence", kernelMessage(ctMsgTypeNew, nlmFMulti, 8, 1, kernelPayload(t, &flows[0])), nil, false, errMalformed},
		{"other port", kernelMessage(ctMsgTypeNew, nlmFMulti, 9, 2, kernelPayload(t, &flows[0])), nil, false, errMalformed},
		{"interrupted", kernelMessage(ctMsgTypeNew, nlmFMulti|nlmFDumpIntr, 9, 1, kernelPayload(t, &flows[0])), nil, false, nil},
		{"overrun", kernelMessage(nlmsgOverrun, 0, 9, 1, nil), nil, false, errMalformed},
		{"unknown type", kernelMessage(ctMsgTypeDelete, 0, 9, 1, nil), nil, false, errMalformed},
		{"ack", kernelMessage(nlmsgError, 0, 9, 1, make([]byte, 20)), nil, true, errMalformed},
		{"short error", kernelMessage(nlmsgError, 0, 9, 1, []byte{1}), nil, true, errMalformed},
		{"callback", entry, func(*snapshot.Flow) error { return fnErr }, false, fnErr},
	}
	for _, c := range cases {
		fn := c.fn
		if fn == nil {
			fn = func(*snapshot.Flow) error { return nil }
		}
		d := dumper{seq: 9, pid: 1, fn: fn}
		over, err := d.feed(c.datagram)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		var ke *kernelError
		if errors.As(err, &ke) {
			err = dumpError(err, d.seen)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
		if over != c.over {
			t.Errorf("%s: over = %v, want %v", c.name, over, c.over)
		}
	}
}

func TestDumpErrorMessages(t *testing.T) {
	cases := []struct {
		errno syscall.Errno
		is    error
		says  string
	}{
		{syscall.EPERM, ErrPermission, "needs CAP_NET_ADMIN"},
		{syscall.EACCES, ErrPermission, "needs CAP_NET_ADMIN"},
		{syscall.EPROTONOSUPPORT, source.ErrUnsupported, "nf_conntrack_netlink is not available"},
		{syscall.EINVAL, source.ErrUnsupported, "nf_conntrack_netlink is not available"},
		{syscall.ENOBUFS, syscall.ENOBUFS, "not read completely"},
		{syscall.EIO, syscall.EIO, "conntrack dump"},
	}
	for _, c := range cases {
		err := dumpError(&kernelError{errno: c.errno}, 0)
		if !errors.Is(err, c.is) || !errors.Is(err, c.errno) {
			t.Errorf("%v: %v does not wrap %v and the errno", c.errno, err, c.is)
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %q does not say %q", c.errno, err, c.says)
		}
	}
	if err := dumpError(&kernelError{errno: syscall.ENOBUFS}, 0); errors.Is(err, source.ErrUnsupported) || errors.Is(err, ErrPermission) {
		t.Errorf("ENOBUFS classified as %v", err)
	}
	// Midway through the table EINVAL is a failure, not a missing feature.
	if err := dumpError(&kernelError{errno: syscall.EINVAL}, 10); errors.Is(err, source.ErrUnsupported) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("EINVAL after 10 entries classified as %v", err)
	}
}

func TestParseErrorMsgExtAck(t *testing.T) {
	// struct nlmsgerr with the request header capped, then
	// NLMSGERR_ATTR_MSG.
	code := -int32(syscall.EINVAL)
	p := native.AppendUint32(nil, uint32(code))
	p = append(p, make([]byte, nlmsgHdrLen)...)
	p = appendAttr(p, nlmsgerrAttrMsg, []byte("bad tuple\x00")...)
	err := parseErrorMsg(message{typ: nlmsgError, flags: nlmFCapped | nlmFAckTLVs, payload: p})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "bad tuple") {
		t.Errorf("err = %v", err)
	}
	if err := parseErrorMsg(message{typ: nlmsgError, payload: make([]byte, 20)}); err != nil {
		t.Errorf("ack: %v", err)
	}
}

// FuzzParseMessage feeds arbitrary datagrams to the parser: it must return
// an error or well-formed entries, and never panic.
func FuzzParseMessage(f *testing.F) {
	flows := sampleFlows()
	for _, d := range dumpOf(f, 3, 0, flows, 2) {
		f.Add(d)
	}
	f.Add(errorMessage(3, 0, syscall.EPERM))
	f.Add(doneMessage(3, 0, -int32(syscall.ENOBUFS)))
	f.Add(kernelMessage(nlmsgError, nlmFAckTLVs, 3, 0, appendAttr(make([]byte, 4+nlmsgHdrLen), 1, 'x', 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Message by message, as the dump loop sees them.
		for rest := b; len(rest) > 0; {
			m, r, err := nextMessage(rest)
			if err != nil {
				break
			}
			rest = r
			switch m.typ {
			case nlmsgError:
				_ = parseErrorMsg(m)
			case ctMsgTypeNew:
				var fl snapshot.Flow
				if err := parseFlow(m.payload, &fl); err != nil {
					if !errors.Is(err, errMalformed) {
						t.Fatalf("error not marked malformed: %v", err)
					}
					continue
				}
				checkParsed(t, &fl)
			}
		}
		// And through the dumper, whatever sequence the datagram names.
		seq := uint32(3)
		if len(b) >= nlmsgHdrLen {
			seq = native.Uint32(b[8:])
		}
		d := dumper{seq: seq, fn: func(fl *snapshot.Flow) error {
			checkParsed(t, fl)
			return nil
		}}
		_, _ = d.feed(b)
	})
}

func checkParsed(t *testing.T, f *snapshot.Flow) {
	t.Helper()
	is4 := f.Orig.Src.Is4()
	for _, a := range []netip.Addr{f.Orig.Src, f.Orig.Dst, f.Reply.Src, f.Reply.Dst} {
		if !a.IsValid() || a.Is4() != is4 {
			t.Fatalf("parsed entry with address %v: %+v", a, f)
		}
	}
	switch f.Proto {
	case snapshot.ProtoTCP:
		if _, ok := snapshot.StateNumber(snapshot.ProtoTCP, f.State); !ok && f.State != "" {
			t.Fatalf("TCP state %q", f.State)
		}
	case snapshot.ProtoSCTP:
		if _, ok := snapshot.StateNumber(snapshot.ProtoSCTP, f.State); !ok && f.State != "" {
			t.Fatalf("SCTP state %q", f.State)
		}
	default:
		if f.State != "" {
			t.Fatalf("protocol %v with state %q", f.Proto, f.State)
		}
	}
}
