package conntrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// errMalformed is wrapped by every error the parser returns.
var errMalformed = errors.New("malformed conntrack netlink message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
}

// nextAttr splits b into its first netlink attribute and the rest. The type
// is returned without the NLA_F_NESTED and NLA_F_NET_BYTEORDER flags.
func nextAttr(b []byte) (typ uint16, val, rest []byte, err error) {
	if len(b) < nlaHdrLen {
		return 0, nil, nil, malformed("%d trailing bytes, too short for an attribute", len(b))
	}
	l := int(native.Uint16(b))
	if l < nlaHdrLen || l > len(b) {
		return 0, nil, nil, malformed("attribute length %d out of range (%d bytes left)", l, len(b))
	}
	typ = native.Uint16(b[2:]) & nlaTypeMask
	a := align4(l)
	if a > len(b) {
		a = len(b)
	}
	return typ, b[nlaHdrLen:l], b[a:], nil
}

func attrU8(v []byte, what string) (uint8, error) {
	if len(v) != 1 {
		return 0, malformed("%s: %d bytes, want 1", what, len(v))
	}
	return v[0], nil
}

func attrBE16(v []byte, what string) (uint16, error) {
	if len(v) != 2 {
		return 0, malformed("%s: %d bytes, want 2", what, len(v))
	}
	return binary.BigEndian.Uint16(v), nil
}

func attrBE32(v []byte, what string) (uint32, error) {
	if len(v) != 4 {
		return 0, malformed("%s: %d bytes, want 4", what, len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}

func attrBE64(v []byte, what string) (uint64, error) {
	if len(v) != 8 {
		return 0, malformed("%s: %d bytes, want 8", what, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// parseFlow decodes the payload of one IPCTNL_MSG_CT_NEW message (struct
// nfgenmsg and the CTA_* attributes) into f, overwriting every field. It
// does not allocate. Unknown attributes are skipped; known ones of the
// wrong size, a family other than IPv4 or IPv6, addresses of the other
// family, and a missing tuple are errors.
func parseFlow(b []byte, f *snapshot.Flow) error {
	*f = snapshot.Flow{}
	if len(b) < nfgenLen {
		return malformed("%d bytes, too short for nfgenmsg", len(b))
	}
	family := b[0]
	if family != afInet && family != afInet6 {
		return malformed("address family %d", family)
	}
	var origProto, replyProto, state uint8
	var haveOrig, haveReply, haveState bool
	for attrs := b[nfgenLen:]; len(attrs) > 0; {
		typ, v, rest, err := nextAttr(attrs)
		if err != nil {
			return err
		}
		attrs = rest
		switch typ {
		case ctaTupleOrig:
			if origProto, err = parseTuple(v, family, &f.Orig, "original"); err != nil {
				return err
			}
			haveOrig = true
		case ctaTupleReply:
			if replyProto, err = parseTuple(v, family, &f.Reply, "reply"); err != nil {
				return err
			}
			haveReply = true
		case ctaStatus:
			f.Status, err = attrBE32(v, "CTA_STATUS")
		case ctaTimeout:
			f.Timeout, err = attrBE32(v, "CTA_TIMEOUT")
		case ctaMark:
			f.Mark, err = attrBE32(v, "CTA_MARK")
		case ctaID:
			f.ID, err = attrBE32(v, "CTA_ID")
		case ctaZone:
			f.Zone, err = attrBE16(v, "CTA_ZONE")
		case ctaProtoinfo:
			state, haveState, err = parseProtoinfo(v)
		case ctaTimestamp:
			err = parseTimestamp(v, f)
		}
		if err != nil {
			return err
		}
	}
	if !haveOrig || !haveReply {
		return malformed("entry without original or reply tuple")
	}
	if origProto != replyProto {
		return malformed("protocol %d in the original tuple, %d in the reply", origProto, replyProto)
	}
	f.Proto = snapshot.Proto(origProto)
	if haveState {
		f.State = snapshot.StateName(f.Proto, state)
	}
	return nil
}

// parseTuple decodes CTA_TUPLE_ORIG or CTA_TUPLE_REPLY and returns the
// protocol number it names.
func parseTuple(b []byte, family uint8, t *snapshot.Tuple, dir string) (proto uint8, err error) {
	var haveIP, haveProto bool
	for len(b) > 0 {
		typ, v, rest, err := nextAttr(b)
		if err != nil {
			return 0, err
		}
		b = rest
		switch typ {
		case ctaTupleIP:
			if err := parseIP(v, family, t, dir); err != nil {
				return 0, err
			}
			haveIP = true
		case ctaTupleProto:
			if proto, err = parseL4(v, t, dir); err != nil {
				return 0, err
			}
			haveProto = true
		}
	}
	if !haveIP || !haveProto {
		return 0, malformed("%s tuple without addresses or protocol", dir)
	}
	return proto, nil
}

func parseIP(b []byte, family uint8, t *snapshot.Tuple, dir string) error {
	for len(b) > 0 {
		typ, v, rest, err := nextAttr(b)
		if err != nil {
			return err
		}
		b = rest
		var a *netip.Addr
		want, fam := 0, uint8(0)
		switch typ {
		case ctaIPv4Src:
			a, want, fam = &t.Src, 4, afInet
		case ctaIPv4Dst:
			a, want, fam = &t.Dst, 4, afInet
		case ctaIPv6Src:
			a, want, fam = &t.Src, 16, afInet6
		case ctaIPv6Dst:
			a, want, fam = &t.Dst, 16, afInet6
		default:
			continue
		}
		if fam != family {
			return malformed("%s tuple: address attribute %d in a family %d entry", dir, typ, family)
		}
		if len(v) != want {
			return malformed("%s tuple: address of %d bytes, want %d", dir, len(v), want)
		}
		if want == 4 {
			*a = netip.AddrFrom4([4]byte(v))
		} else {
			*a = netip.AddrFrom16([16]byte(v))
		}
	}
	if !t.Src.IsValid() || !t.Dst.IsValid() {
		return malformed("%s tuple without source or destination address", dir)
	}
	return nil
}

func parseL4(b []byte, t *snapshot.Tuple, dir string) (proto uint8, err error) {
	haveNum := false
	for len(b) > 0 {
		typ, v, rest, err := nextAttr(b)
		if err != nil {
			return 0, err
		}
		b = rest
		switch typ {
		case ctaProtoNum:
			if proto, err = attrU8(v, "CTA_PROTO_NUM"); err != nil {
				return 0, err
			}
			haveNum = true
		case ctaProtoSrcPort:
			if t.SrcPort, err = attrBE16(v, "CTA_PROTO_SRC_PORT"); err != nil {
				return 0, err
			}
		case ctaProtoDstPort:
			if t.DstPort, err = attrBE16(v, "CTA_PROTO_DST_PORT"); err != nil {
				return 0, err
			}
		}
	}
	if !haveNum {
		return 0, malformed("%s tuple without protocol number", dir)
	}
	return proto, nil
}

// parseProtoinfo returns the TCP or SCTP state number in CTA_PROTOINFO.
func parseProtoinfo(b []byte) (state uint8, ok bool, err error) {
	for len(b) > 0 {
		typ, v, rest, err := nextAttr(b)
		if err != nil {
			return 0, false, err
		}
		b = rest
		var stateAttr uint16
		switch typ {
		case ctaProtoinfoTCP:
			stateAttr = ctaProtoinfoTCPState
		case ctaProtoinfoSCTP:
			stateAttr = ctaProtoinfoSCTPState
		default:
			continue
		}
		for len(v) > 0 {
			t, sv, r, err := nextAttr(v)
			if err != nil {
				return 0, false, err
			}
			v = r
			if t != stateAttr {
				continue
			}
			if state, err = attrU8(sv, "protocol state"); err != nil {
				return 0, false, err
			}
			ok = true
		}
	}
	return state, ok, nil
}

func parseTimestamp(b []byte, f *snapshot.Flow) error {
	for len(b) > 0 {
		typ, v, rest, err := nextAttr(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != ctaTimestampStart {
			continue
		}
		ns, err := attrBE64(v, "CTA_TIMESTAMP_START")
		if err != nil {
			return err
		}
		if ns > 1<<63-1 {
			return malformed("CTA_TIMESTAMP_START %d out of range", ns)
		}
		if ns != 0 {
			f.Start = time.Unix(0, int64(ns))
		}
	}
	return nil
}

// message is one netlink message.
type message struct {
	typ, flags uint16
	seq, pid   uint32
	payload    []byte
}

// nextMessage splits b into its first netlink message and the rest.
func nextMessage(b []byte) (m message, rest []byte, err error) {
	if len(b) < nlmsgHdrLen {
		return m, nil, malformed("%d trailing bytes, too short for a message header", len(b))
	}
	l := int(native.Uint32(b))
	if l < nlmsgHdrLen || l > len(b) {
		return m, nil, malformed("message length %d out of range (%d bytes received)", l, len(b))
	}
	m = message{
		typ:     native.Uint16(b[4:]),
		flags:   native.Uint16(b[6:]),
		seq:     native.Uint32(b[8:]),
		pid:     native.Uint32(b[12:]),
		payload: b[nlmsgHdrLen:l],
	}
	a := align4(l)
	if a > len(b) {
		a = len(b)
	}
	return m, b[a:], nil
}

// kernelError is an error the kernel reported in NLMSG_ERROR or NLMSG_DONE,
// with the extended ack message when there is one. It unwraps to the
// syscall.Errno.
type kernelError struct {
	errno syscall.Errno
	msg   string
}

func (e *kernelError) Error() string {
	if e.msg != "" {
		return e.errno.Error() + " (" + e.msg + ")"
	}
	return e.errno.Error()
}

func (e *kernelError) Unwrap() error { return e.errno }

// parseErrorMsg decodes the payload of NLMSG_ERROR (struct nlmsgerr,
// possibly followed by extended ack attributes): nil for an ack.
func parseErrorMsg(m message) error {
	if len(m.payload) < 4 {
		return malformed("NLMSG_ERROR of %d bytes", len(m.payload))
	}
	code := int32(native.Uint32(m.payload))
	if code == 0 {
		return nil
	}
	if code > 0 || code < -4095 {
		return malformed("NLMSG_ERROR code %d", code)
	}
	e := &kernelError{errno: syscall.Errno(-code)}
	if m.flags&nlmFAckTLVs == 0 {
		return e
	}
	// struct nlmsgerr is the error and the request's header, followed by
	// the request's payload unless NLM_F_CAPPED.
	off := 4 + nlmsgHdrLen
	if len(m.payload) < off {
		return e
	}
	if m.flags&nlmFCapped == 0 {
		off = 4 + int(native.Uint32(m.payload[4:]))
		if off < 4+nlmsgHdrLen || off > len(m.payload) {
			return e
		}
		off = 4 + align4(off-4)
		if off > len(m.payload) {
			return e
		}
	}
	for tlv := m.payload[off:]; len(tlv) > 0; {
		typ, v, rest, err := nextAttr(tlv)
		if err != nil {
			break
		}
		tlv = rest
		if typ == nlmsgerrAttrMsg {
			for len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			e.msg = string(v)
		}
	}
	return e
}

// dumper consumes the datagrams answering one dump request.
type dumper struct {
	seq  uint32 // the request's sequence number
	pid  uint32 // our port id; 0 accepts any
	fn   func(*snapshot.Flow) error
	flow snapshot.Flow
	seen int
}

// feed handles one datagram. over is true once the kernel has ended the
// dump (NLMSG_DONE or an NLMSG_ERROR); err is set when the dump failed,
// including when fn failed (then over may be false: the kernel still has
// the rest of the dump queued for this socket).
func (d *dumper) feed(b []byte) (over bool, err error) {
	for len(b) > 0 {
		m, rest, err := nextMessage(b)
		if err != nil {
			return false, err
		}
		b = rest
		if m.seq != d.seq || (d.pid != 0 && m.pid != d.pid) {
			return false, malformed("message for sequence %d port %d during the dump of sequence %d port %d", m.seq, m.pid, d.seq, d.pid)
		}
		if m.flags&nlmFDumpIntr != 0 {
			return false, errors.New("conntrack dump interrupted by a concurrent change (NLM_F_DUMP_INTR)")
		}
		switch m.typ {
		case nlmsgNoop:
		case nlmsgDone:
			if len(m.payload) >= 4 {
				if code := int32(native.Uint32(m.payload)); code < 0 && code >= -4095 {
					return true, &kernelError{errno: syscall.Errno(-code)}
				}
			}
			return true, nil
		case nlmsgError:
			if err := parseErrorMsg(m); err != nil {
				return true, err
			}
			return true, malformed("acknowledgement instead of a dump")
		case nlmsgOverrun:
			return false, malformed("NLMSG_OVERRUN")
		case ctMsgTypeNew:
			if err := parseFlow(m.payload, &d.flow); err != nil {
				return false, err
			}
			d.seen++
			if err := d.fn(&d.flow); err != nil {
				return false, err
			}
		default:
			return false, malformed("unexpected message type %#x in a dump", m.typ)
		}
	}
	return false, nil
}

// dumpError explains an errno met while reading the table, after seen
// entries: no permission, and no ctnetlink in the kernel (which can only be
// the answer to the request itself), get the package's and source's
// sentinel errors.
func dumpError(err error, seen int) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("conntrack dump: %w", err)
	}
	switch errno {
	case syscall.EPERM, syscall.EACCES:
		return fmt.Errorf("conntrack dump: %w: %w", ErrPermission, err)
	case syscall.EPROTONOSUPPORT, syscall.ENOENT, syscall.EOPNOTSUPP, syscall.EINVAL:
		if seen > 0 {
			break
		}
		// nfnetlink answers EINVAL to a request for a subsystem that is not
		// registered; a bare dump request has nothing else to refuse.
		return fmt.Errorf("conntrack dump: %w: nf_conntrack_netlink is not available in this kernel (%w)", source.ErrUnsupported, err)
	case syscall.ENOBUFS:
		return fmt.Errorf("conntrack dump: messages were lost (%w); the table was not read completely", err)
	}
	return fmt.Errorf("conntrack dump: %w", err)
}
