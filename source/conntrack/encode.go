package conntrack

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Request encoding. Each append* function appends to b and returns it.

func appendMsgHeader(b []byte, typ, flags uint16, seq uint32) []byte {
	b = native.AppendUint32(b, 0) // length, patched by finishMsg
	b = native.AppendUint16(b, typ)
	b = native.AppendUint16(b, flags)
	b = native.AppendUint32(b, seq)
	b = native.AppendUint32(b, 0) // to the kernel
	return b
}

func finishMsg(b []byte, start int) []byte {
	native.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

func appendNfgen(b []byte, family uint8) []byte {
	return append(b, family, nfnetlinkV0, 0, 0)
}

func appendAttr(b []byte, typ uint16, v ...byte) []byte {
	b = native.AppendUint16(b, uint16(nlaHdrLen+len(v)))
	b = native.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func appendU8(b []byte, typ uint16, v uint8) []byte { return appendAttr(b, typ, v) }

func appendBE16(b []byte, typ uint16, v uint16) []byte {
	return appendAttr(b, typ, byte(v>>8), byte(v))
}

func appendBE32(b []byte, typ uint16, v uint32) []byte {
	return appendAttr(b, typ, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// beginNest starts a nested attribute at len(b); endNest, given that
// offset, patches its length.
func beginNest(b []byte, typ uint16) []byte {
	b = native.AppendUint16(b, 0)
	return native.AppendUint16(b, typ|nlaFNested)
}

func endNest(b []byte, start int) []byte {
	native.PutUint16(b[start:], uint16(len(b)-start))
	return b
}

func appendTuple(b []byte, typ uint16, t *snapshot.Tuple, proto snapshot.Proto) []byte {
	tuple := len(b)
	b = beginNest(b, typ)
	ip := len(b)
	b = beginNest(b, ctaTupleIP)
	if t.Src.Is4() {
		s, d := t.Src.As4(), t.Dst.As4()
		b = appendAttr(b, ctaIPv4Src, s[:]...)
		b = appendAttr(b, ctaIPv4Dst, d[:]...)
	} else {
		s, d := t.Src.As16(), t.Dst.As16()
		b = appendAttr(b, ctaIPv6Src, s[:]...)
		b = appendAttr(b, ctaIPv6Dst, d[:]...)
	}
	b = endNest(b, ip)
	l4 := len(b)
	b = beginNest(b, ctaTupleProto)
	b = appendU8(b, ctaProtoNum, uint8(proto))
	b = appendBE16(b, ctaProtoSrcPort, t.SrcPort)
	b = appendBE16(b, ctaProtoDstPort, t.DstPort)
	b = endNest(b, l4)
	return endNest(b, tuple)
}

// flowFamily checks that the flow's four addresses are of one family and
// returns it.
func flowFamily(f *snapshot.Flow) (uint8, error) {
	addrs := [...]netip.Addr{f.Orig.Src, f.Orig.Dst, f.Reply.Src, f.Reply.Dst}
	is4 := addrs[0].Is4()
	for _, a := range addrs {
		if !a.IsValid() || a.Is4() != is4 || a.Zone() != "" {
			return 0, errors.New("the addresses must all be IPv4 or all IPv6")
		}
	}
	if is4 {
		return afInet, nil
	}
	return afInet6, nil
}

// appendDumpRequest encodes IPCTNL_MSG_CT_GET with NLM_F_DUMP for both
// address families.
func appendDumpRequest(b []byte, seq uint32) []byte {
	start := len(b)
	b = appendMsgHeader(b, ctMsgTypeGet, nlmFRequest|nlmFDump, seq)
	b = appendNfgen(b, afUnspec)
	return finishMsg(b, start)
}

// appendCreateRequest encodes IPCTNL_MSG_CT_NEW with NLM_F_CREATE|NLM_F_EXCL:
// both tuples, the status (see createStatus), the timeout, mark, zone and,
// for TCP and SCTP, the state.
func appendCreateRequest(b []byte, seq uint32, f *snapshot.Flow, confirmed bool) ([]byte, error) {
	family, err := flowFamily(f)
	if err != nil {
		return b, err
	}
	if f.Timeout == 0 {
		return b, errors.New("a timeout is required")
	}
	start := len(b)
	b = appendMsgHeader(b, ctMsgTypeNew, nlmFRequest|nlmFAck|nlmFCreate|nlmFExcl, seq)
	b = appendNfgen(b, family)
	b = appendTuple(b, ctaTupleOrig, &f.Orig, f.Proto)
	b = appendTuple(b, ctaTupleReply, &f.Reply, f.Proto)
	if st, ok := createStatus(f.Status, confirmed); ok {
		b = appendBE32(b, ctaStatus, st)
	}
	b = appendBE32(b, ctaTimeout, f.Timeout)
	if f.Mark != 0 {
		b = appendBE32(b, ctaMark, f.Mark)
	}
	if f.Zone != 0 {
		b = appendBE16(b, ctaZone, f.Zone)
	}
	switch f.Proto {
	case snapshot.ProtoTCP:
		if f.State != "" {
			n, ok := snapshot.StateNumber(snapshot.ProtoTCP, f.State)
			if !ok {
				return b[:start], fmt.Errorf("unknown TCP state %q", f.State)
			}
			pi := len(b)
			b = beginNest(b, ctaProtoinfo)
			tcp := len(b)
			b = beginNest(b, ctaProtoinfoTCP)
			b = appendU8(b, ctaProtoinfoTCPState, n)
			b = endNest(b, tcp)
			b = endNest(b, pi)
			return finishMsg(b, start), nil
		}
	case snapshot.ProtoSCTP:
		// The kernel wants the state and both verification tags.
		n := uint8(0)
		if f.State != "" {
			var ok bool
			if n, ok = snapshot.StateNumber(snapshot.ProtoSCTP, f.State); !ok {
				return b[:start], fmt.Errorf("unknown SCTP state %q", f.State)
			}
		}
		pi := len(b)
		b = beginNest(b, ctaProtoinfo)
		sctp := len(b)
		b = beginNest(b, ctaProtoinfoSCTP)
		b = appendU8(b, ctaProtoinfoSCTPState, n)
		b = appendBE32(b, ctaProtoinfoSCTPVtagOrig, 0)
		b = appendBE32(b, ctaProtoinfoSCTPVtagReply, 0)
		b = endNest(b, sctp)
		b = endNest(b, pi)
		return finishMsg(b, start), nil
	default:
		if f.State != "" {
			return b[:start], fmt.Errorf("protocol %v has no state", f.Proto)
		}
	}
	return finishMsg(b, start), nil
}

// createStatus is the CTA_STATUS sent on creation, and whether to send
// one at all.
//
// The kernel applies CTA_STATUS to the new entry like a status change and
// refuses it (EBUSY) when it differs from the entry's own status in a bit
// the kernel manages (IPS_EXPECTED, IPS_CONFIRMED, IPS_DYING). By the time
// it compares, the entry is already marked IPS_CONFIRMED on most kernels
// (6.18 among them; it is why `conntrack -I` sends IPS_CONFIRMED with the
// bits it was asked for), so a status without it, even 0, is refused, while
// no CTA_STATUS at all is accepted. Some kernels (those that set
// IPS_CONFIRMED only at hash insertion) refuse the opposite, so Create
// retries once without it when confirmed is refused. The other bits the
// kernel owns (NAT, offload, ...) it ignores.
func createStatus(st uint32, confirmed bool) (uint32, bool) {
	st &^= statusUnsettable
	if st == 0 {
		return 0, false
	}
	if confirmed {
		st |= snapshot.StatusConfirmed
	}
	return st, true
}

// appendDeleteRequest encodes IPCTNL_MSG_CT_DELETE for the entry with f's
// original tuple in f's zone and, when f.ID is set, that ID.
func appendDeleteRequest(b []byte, seq uint32, f *snapshot.Flow) ([]byte, error) {
	return appendEntryRequest(b, ctMsgTypeDelete, seq, f, f.ID)
}

// appendDeleteJudgedRequest encodes IPCTNL_MSG_CT_DELETE for the one
// entry whose reply tuple is f's, in f's zone, with f's ID (DeleteJudged).
func appendDeleteJudgedRequest(b []byte, seq uint32, f *snapshot.Flow) ([]byte, error) {
	if f.ID == 0 {
		return b, errors.New("no conntrack ID: the entry judged cannot be told from one that replaced it")
	}
	return appendTupleRequest(b, ctMsgTypeDelete, seq, f, ctaTupleReply, f.ID)
}

// appendGetRequest encodes IPCTNL_MSG_CT_GET without NLM_F_DUMP, as
// `conntrack -G` sends it, for the entry with f's original tuple in f's
// zone. The kernel answers with the entry, then the acknowledgement.
func appendGetRequest(b []byte, seq uint32, f *snapshot.Flow) ([]byte, error) {
	return appendEntryRequest(b, ctMsgTypeGet, seq, f, 0)
}

// appendEntryRequest encodes a request of type typ about the one entry
// with f's original tuple in f's zone and, when id is not 0, that ID.
func appendEntryRequest(b []byte, typ uint16, seq uint32, f *snapshot.Flow, id uint32) ([]byte, error) {
	return appendTupleRequest(b, typ, seq, f, ctaTupleOrig, id)
}

// appendTupleRequest encodes a request of type typ about the one entry
// with f's tuple of direction dir (ctaTupleOrig or ctaTupleReply) in f's
// zone and, when id is not 0, that ID.
func appendTupleRequest(b []byte, typ uint16, seq uint32, f *snapshot.Flow, dir uint16, id uint32) ([]byte, error) {
	t, which := &f.Orig, "original"
	if dir == ctaTupleReply {
		t, which = &f.Reply, "reply"
	}
	family, err := flowFamily(&snapshot.Flow{Orig: *t, Reply: snapshot.Tuple{Src: t.Dst, Dst: t.Src}})
	if err != nil {
		return b, fmt.Errorf("the %s addresses must both be IPv4 or both IPv6", which)
	}
	start := len(b)
	b = appendMsgHeader(b, typ, nlmFRequest|nlmFAck, seq)
	b = appendNfgen(b, family)
	b = appendTuple(b, dir, t, f.Proto)
	if f.Zone != 0 {
		b = appendBE16(b, ctaZone, f.Zone)
	}
	if id != 0 {
		b = appendBE32(b, ctaID, id)
	}
	return finishMsg(b, start), nil
}
