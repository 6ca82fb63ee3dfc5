package snapshot

import (
	"fmt"
	"iter"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Proto is an IP protocol number.
type Proto uint8

// The protocols the conntrack rules understand.
const (
	ProtoTCP  Proto = 6
	ProtoUDP  Proto = 17
	ProtoSCTP Proto = 132
)

// String returns "tcp", "udp", "sctp" or the number.
func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoSCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// ParseProto accepts "tcp", "udp", "sctp" in any case (Kubernetes spells them
// TCP, UDP, SCTP).
func ParseProto(s string) (Proto, bool) {
	switch s {
	case "tcp", "TCP", "Tcp":
		return ProtoTCP, true
	case "udp", "UDP", "Udp":
		return ProtoUDP, true
	case "sctp", "SCTP", "Sctp":
		return ProtoSCTP, true
	}
	return 0, false
}

// Conntrack status bits (include/uapi/linux/netfilter/nf_conntrack_common.h).
const (
	StatusExpected  uint32 = 1 << 0
	StatusSeenReply uint32 = 1 << 1
	StatusAssured   uint32 = 1 << 2
	StatusConfirmed uint32 = 1 << 3
	StatusSrcNAT    uint32 = 1 << 4
	StatusDstNAT    uint32 = 1 << 5
)

// Tuple is one direction of a flow.
type Tuple struct {
	Src     netip.Addr
	Dst     netip.Addr
	SrcPort uint16
	DstPort uint16
}

// Flow is one conntrack entry. Only the fields the rules and remedies read
// are kept.
type Flow struct {
	// ID is the kernel's conntrack ID (0 when unknown, e.g. from a text dump
	// without -o id).
	ID    uint32
	Proto Proto
	Orig  Tuple
	Reply Tuple
	// State is the protocol state as conntrack -L prints it
	// ("ESTABLISHED", "FIN_WAIT", ...); empty for UDP.
	State string
	// Status is the IPS_* bit set; from a text dump only ASSURED, UNREPLIED
	// (as !SeenReply) are known.
	Status uint32
	// Timeout is the remaining lifetime in seconds.
	Timeout uint32
	Mark    uint32
	Zone    uint16
	// Start is when the kernel created the entry; zero unless
	// net.netfilter.nf_conntrack_timestamp was enabled at that time.
	Start time.Time
	// Seen is, when Start is zero, when the agent first saw the entry (a
	// conntrack event or a dump): the flow started no later than this. It
	// is set only by the agent's index, from its own observations, and
	// kept only while no conntrack event was lost since.
	Seen time.Time
}

// DNAT reports whether the flow's destination was rewritten: the reply comes
// from another address or port than the original destination.
func (f *Flow) DNAT() bool {
	return f.Reply.Src != f.Orig.Dst || f.Reply.SrcPort != f.Orig.DstPort
}

// Backend is the address the flow was translated to: the reply source.
func (f *Flow) Backend() netip.AddrPort { return netip.AddrPortFrom(f.Reply.Src, f.Reply.SrcPort) }

// Frontend is the address the client asked for: the original destination.
func (f *Flow) Frontend() netip.AddrPort { return netip.AddrPortFrom(f.Orig.Dst, f.Orig.DstPort) }

// DeleteCommand is the conntrack(8) command that deletes this entry and no
// other: its original tuple, its zone, and the reply source it is
// translated to, so that an entry of the same tuple translated elsewhere
// since (a new connection) is left alone. (conntrack(8) cannot match the
// entry's ID; the agent deletes by ID over netlink.)
func (f *Flow) DeleteCommand() string {
	var b strings.Builder
	b.WriteString("conntrack -D")
	if f.Orig.Src.Unmap().Is6() {
		b.WriteString(" -f ipv6")
	}
	fmt.Fprintf(&b, " -p %s -s %s -d %s", f.Proto, f.Orig.Src.Unmap(), f.Orig.Dst.Unmap())
	switch f.Proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		fmt.Fprintf(&b, " --sport %d --dport %d", f.Orig.SrcPort, f.Orig.DstPort)
	}
	fmt.Fprintf(&b, " -r %s", f.Reply.Src.Unmap())
	if f.Zone != 0 {
		fmt.Fprintf(&b, " -w %d", f.Zone)
	}
	return b.String()
}

// String renders "tcp 10.244.1.50:45678 -> 10.96.100.50:5432".
func (f *Flow) String() string {
	return f.Proto.String() + " " + netip.AddrPortFrom(f.Orig.Src, f.Orig.SrcPort).String() +
		" -> " + f.Frontend().String()
}

// Conntrack is the part of the node's conntrack table the rules need: the
// entries the collector kept, those the rules that read them asked for
// (see FlowReader), held compactly (48 bytes an entry), a backend's
// together.
type Conntrack struct {
	// Seen is how many entries the table held in all.
	Seen int
	kept flowSet
}

// NewConntrack returns a table of which seen entries were read and flows
// kept.
func NewConntrack(seen int, flows ...Flow) *Conntrack {
	c := &Conntrack{Seen: seen}
	for i := range flows {
		c.Keep(&flows[i])
	}
	return c
}

// Keep adds a copy of f to the flows kept. Only the collector calls it,
// before the snapshot is shared.
func (c *Conntrack) Keep(f *Flow) { c.kept.add(f) }

// Fit gives back the room the chunks of each backend's flows have beyond
// them, once every flow is kept: a node whose workloads all died keeps a
// million flows of a hundred thousand backends, each of whose last chunk
// is partly empty. Only the collector calls it, once it has kept every
// flow, before the snapshot is shared.
func (c *Conntrack) Fit() { c.kept.fit() }

// Len returns how many flows were kept.
func (c *Conntrack) Len() int {
	if c == nil {
		return 0
	}
	return c.kept.n
}

// All yields every kept flow, a backend's together. The Flow is reused
// from one flow to the next: copy it to keep it.
func (c *Conntrack) All() iter.Seq[*Flow] {
	if c == nil {
		return func(func(*Flow) bool) {}
	}
	return c.kept.all()
}

// Backends yields each backend of a kept flow with the number of kept
// flows to it.
func (c *Conntrack) Backends() iter.Seq2[netip.Addr, int] {
	if c == nil {
		return func(func(netip.Addr, int) bool) {}
	}
	return c.kept.backends()
}

// Flows returns a copy of every kept flow, a backend's together: for a
// handful of flows (tests, small tables); a store of many reads All.
func (c *Conntrack) Flows() []Flow {
	var out []Flow
	for f := range c.All() {
		out = append(out, *f)
	}
	return out
}
