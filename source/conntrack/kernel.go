package conntrack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// KernelSource reads the conntrack table of the running kernel over netlink,
// in the network namespace of the calling thread. It streams the table and
// keeps only the flows Keep accepts, so its memory grows with the kept flows,
// not with the table.
type KernelSource struct {
	// Keep selects the flows to keep; nil means KeepDNAT.
	Keep Keep
}

// Name returns Name ("conntrack").
func (KernelSource) Name() string { return Name }

// Collect dumps the whole table and sets s.Conntrack to the kept flows and
// the number of entries seen. On any error (no permission, no ctnetlink in
// the kernel, a dump cut short) it leaves s untouched: a partial table is
// never reported.
func (k KernelSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	keep := k.Keep
	if keep == nil {
		keep = KeepDNAT
	}
	c, err := Open()
	if err != nil {
		return err
	}
	defer c.Close()
	var kept flowChunks
	n, err := c.Dump(ctx, func(f *snapshot.Flow) error {
		if keep(f) {
			kept.add(f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.Conntrack = &snapshot.Conntrack{Flows: kept.flows(), Seen: n}
	return nil
}

// flowChunks collects copies of flows in chunks of pointer-free records
// (keptFlow) and builds the []snapshot.Flow once, at its exact size, at the
// end. Appending to one []snapshot.Flow instead would copy what was kept
// several times over, allocate about five times its size, and, because a
// Flow holds pointers, make the garbage collector scan it and every copy pay
// write barriers while the heap grows: at a million entries that cost more
// than the kernel's dump itself.
type flowChunks struct {
	chunks [][]keptFlow
	n      int
}

const (
	firstChunk = 256
	maxChunk   = 16384
)

// keptFlow is a snapshot.Flow from parseFlow without its pointers: the
// addresses as 16 bytes, the state as its number, the start as nanoseconds.
type keptFlow struct {
	addrs                     [4][16]byte // orig src, dst, reply src, dst
	start                     int64       // Unix ns; 0: none
	ports                     [4]uint16
	id, status, timeout, mark uint32
	zone                      uint16
	proto                     snapshot.Proto
	state                     uint8 // 1 + the number in the protocol's state table; 0: none
	is4                       bool
}

func statesOf(p snapshot.Proto) []string {
	switch p {
	case snapshot.ProtoTCP:
		return tcpStates[:]
	case snapshot.ProtoSCTP:
		return sctpStates[:]
	}
	return nil
}

func (k *keptFlow) pack(f *snapshot.Flow) {
	addrs := [4]netip.Addr{f.Orig.Src, f.Orig.Dst, f.Reply.Src, f.Reply.Dst}
	for i, a := range addrs {
		k.addrs[i] = a.As16()
	}
	k.is4 = f.Orig.Src.Is4()
	k.ports = [4]uint16{f.Orig.SrcPort, f.Orig.DstPort, f.Reply.SrcPort, f.Reply.DstPort}
	k.id, k.status, k.timeout, k.mark, k.zone, k.proto = f.ID, f.Status, f.Timeout, f.Mark, f.Zone, f.Proto
	k.state = 0
	if f.State != "" {
		if n, ok := stateNumber(statesOf(f.Proto), f.State); ok {
			k.state = n + 1
		}
	}
	k.start = 0
	if !f.Start.IsZero() {
		k.start = f.Start.UnixNano()
	}
}

func (k *keptFlow) unpack(f *snapshot.Flow) {
	addr := func(i int) netip.Addr {
		if k.is4 {
			return netip.AddrFrom4([4]byte(k.addrs[i][12:]))
		}
		return netip.AddrFrom16(k.addrs[i])
	}
	*f = snapshot.Flow{
		ID: k.id, Proto: k.proto,
		Orig:   snapshot.Tuple{Src: addr(0), Dst: addr(1), SrcPort: k.ports[0], DstPort: k.ports[1]},
		Reply:  snapshot.Tuple{Src: addr(2), Dst: addr(3), SrcPort: k.ports[2], DstPort: k.ports[3]},
		Status: k.status, Timeout: k.timeout, Mark: k.mark, Zone: k.zone,
	}
	if k.state != 0 {
		f.State = statesOf(k.proto)[k.state-1]
	}
	if k.start != 0 {
		f.Start = time.Unix(0, k.start)
	}
}

func (c *flowChunks) add(f *snapshot.Flow) {
	last := len(c.chunks) - 1
	if last < 0 || len(c.chunks[last]) == cap(c.chunks[last]) {
		size := min(max(c.n, firstChunk), maxChunk)
		c.chunks = append(c.chunks, make([]keptFlow, 0, size))
		last++
	}
	ch := &c.chunks[last]
	*ch = (*ch)[:len(*ch)+1]
	(*ch)[len(*ch)-1].pack(f)
	c.n++
}

func (c *flowChunks) flows() []snapshot.Flow {
	if c.n == 0 {
		return nil
	}
	out := make([]snapshot.Flow, c.n)
	i := 0
	for _, ch := range c.chunks {
		for j := range ch {
			ch[j].unpack(&out[i])
			i++
		}
	}
	return out
}

// The wire format, from the kernel UAPI headers linux/netlink.h,
// linux/netfilter/nfnetlink.h, linux/netfilter/nfnetlink_conntrack.h and
// linux/netfilter/nf_conntrack_{tcp,sctp}.h. They are spelled out here rather
// than taken from x/sys/unix so that the parser builds, and can be fuzzed, on
// every platform.
const (
	nlmsgHdrLen = 16 // struct nlmsghdr
	nlaHdrLen   = 4  // struct nlattr
	nfgenLen    = 4  // struct nfgenmsg

	nlmsgNoop    = 0x1
	nlmsgError   = 0x2
	nlmsgDone    = 0x3
	nlmsgOverrun = 0x4

	nlmFRequest  = 0x1
	nlmFMulti    = 0x2
	nlmFAck      = 0x4
	nlmFDumpIntr = 0x10
	nlmFDump     = 0x300 // NLM_F_ROOT|NLM_F_MATCH
	nlmFExcl     = 0x200
	nlmFCreate   = 0x400

	// Flags of an NLMSG_ERROR message.
	nlmFCapped  = 0x100 // the request is not echoed
	nlmFAckTLVs = 0x200 // extended ack attributes follow

	nlmsgerrAttrMsg = 1 // NLMSGERR_ATTR_MSG: a NUL-terminated string

	nlaFNested  = 0x8000
	nlaTypeMask = 0x3fff

	afUnspec = 0
	afInet   = 2
	afInet6  = 10

	nfnetlinkV0 = 0

	nfnlSubsysCTNetlink = 1

	ctMsgNew    = 0
	ctMsgGet    = 1
	ctMsgDelete = 2

	ctMsgTypeNew    = nfnlSubsysCTNetlink<<8 | ctMsgNew
	ctMsgTypeGet    = nfnlSubsysCTNetlink<<8 | ctMsgGet
	ctMsgTypeDelete = nfnlSubsysCTNetlink<<8 | ctMsgDelete

	// enum ctattr_type
	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaStatus     = 3
	ctaProtoinfo  = 4
	ctaTimeout    = 7
	ctaMark       = 8
	ctaID         = 12
	ctaZone       = 18
	ctaTimestamp  = 20

	// enum ctattr_tuple
	ctaTupleIP    = 1
	ctaTupleProto = 2

	// enum ctattr_ip
	ctaIPv4Src = 1
	ctaIPv4Dst = 2
	ctaIPv6Src = 3
	ctaIPv6Dst = 4

	// enum ctattr_l4proto
	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3

	// enum ctattr_protoinfo
	ctaProtoinfoTCP  = 1
	ctaProtoinfoSCTP = 3

	// enum ctattr_protoinfo_tcp
	ctaProtoinfoTCPState = 1

	// enum ctattr_protoinfo_sctp
	ctaProtoinfoSCTPState     = 1
	ctaProtoinfoSCTPVtagOrig  = 2
	ctaProtoinfoSCTPVtagReply = 3

	// enum ctattr_tstamp
	ctaTimestampStart = 1

	// IPS_DYING, and the status bits the kernel refuses to see changed
	// (include/uapi/linux/netfilter/nf_conntrack_common.h).
	statusDying      uint32 = 1 << 9
	statusUnsettable        = snapshot.StatusExpected | snapshot.StatusConfirmed | statusDying
)

// tcpStates and sctpStates are the names `conntrack -L` prints for each
// state number (libnetfilter_conntrack's tables); a number past the end is
// printed as NONE.
var (
	tcpStates = [...]string{
		"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT",
		"CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2",
	}
	sctpStates = [...]string{
		"NONE", "CLOSED", "COOKIE_WAIT", "COOKIE_ECHOED", "ESTABLISHED",
		"SHUTDOWN_SENT", "SHUTDOWN_RECD", "SHUTDOWN_ACK_SENT",
		"HEARTBEAT_SENT", "HEARTBEAT_ACKED",
	}
)

// StateNumber is the kernel's number for a TCP or SCTP state as a Flow
// names it; ok is false for another protocol or an unknown name.
func StateNumber(p snapshot.Proto, name string) (n uint8, ok bool) {
	switch p {
	case snapshot.ProtoTCP:
		return stateNumber(tcpStates[:], name)
	case snapshot.ProtoSCTP:
		return stateNumber(sctpStates[:], name)
	}
	return 0, false
}

// StateName is the inverse of StateNumber: "" for a protocol without
// states.
func StateName(p snapshot.Proto, n uint8) string {
	switch p {
	case snapshot.ProtoTCP:
		return stateName(tcpStates[:], n)
	case snapshot.ProtoSCTP:
		return stateName(sctpStates[:], n)
	}
	return ""
}

func stateName(table []string, n uint8) string {
	if int(n) < len(table) {
		return table[n]
	}
	return table[0]
}

// stateNumber is the inverse of stateName; ok is false for a name not in
// table.
func stateNumber(table []string, name string) (uint8, bool) {
	for i, s := range table {
		if s == name {
			return uint8(i), true
		}
	}
	return 0, false
}

// errMalformed is wrapped by every error the parser returns.
var errMalformed = errors.New("malformed conntrack netlink message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
}

var native = binary.NativeEndian

func align4(n int) int { return (n + 3) &^ 3 }

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
		switch f.Proto {
		case snapshot.ProtoTCP:
			f.State = stateName(tcpStates[:], state)
		case snapshot.ProtoSCTP:
			f.State = stateName(sctpStates[:], state)
		}
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
			n, ok := stateNumber(tcpStates[:], f.State)
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
			if n, ok = stateNumber(sctpStates[:], f.State); !ok {
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
	family, err := flowFamily(&snapshot.Flow{Orig: f.Orig, Reply: snapshot.Tuple{Src: f.Orig.Dst, Dst: f.Orig.Src}})
	if err != nil {
		return b, errors.New("the original addresses must both be IPv4 or both IPv6")
	}
	start := len(b)
	b = appendMsgHeader(b, ctMsgTypeDelete, nlmFRequest|nlmFAck, seq)
	b = appendNfgen(b, family)
	b = appendTuple(b, ctaTupleOrig, &f.Orig, f.Proto)
	if f.Zone != 0 {
		b = appendBE16(b, ctaZone, f.Zone)
	}
	if f.ID != 0 {
		b = appendBE32(b, ctaID, f.ID)
	}
	return finishMsg(b, start), nil
}
