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
// together; or, lent by the collector (Lend), the entries of a store of
// its own, not copied.
type Conntrack struct {
	// Seen is how many entries the table held in all.
	Seen int
	kept flowSet
	// lent is what the collector lent; its backends come before kept's.
	lent FlowStore
}

// FlowStore is a store of flows grouped by backend that a collector lends a
// Conntrack (Lend) rather than copy into it the flows it holds already:
// the agent's index of the table holds every flow a pass keeps when a
// node's workloads all died, and a copy would double it. Its groups are
// numbered from 0, and a flow's position within its group is its own: a
// store may skip positions (flows it does not lend). It never changes
// while a Conntrack holds it.
type FlowStore interface {
	// Len returns how many flows it holds.
	Len() int
	// Groups returns how many groups (backends) it holds.
	Groups() int
	// Group returns group g's backend and how many flows it holds.
	Group(g int) (backend netip.Addr, n int)
	// Each calls fn with each flow of group g, in order, with its
	// position, in the reused f, until fn returns false; it reports
	// whether fn never did.
	Each(g int, f *Flow, fn func(pos uint32, f *Flow) bool) bool
	// At sets *f to the flow at position pos of group g, as Each gave it.
	At(g int, pos uint32, f *Flow)
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

// Lend makes the flows of store kept, without a copy, before those Keep
// adds: their backends must not be among those. Only the collector calls
// it, once, before the snapshot is shared; store must not change while
// the snapshot is read.
func (c *Conntrack) Lend(store FlowStore) { c.lent = store }

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
	if c.lent != nil {
		return c.lent.Len() + c.kept.n
	}
	return c.kept.n
}

// All yields every kept flow, a backend's together. The Flow is reused
// from one flow to the next: copy it to keep it.
func (c *Conntrack) All() iter.Seq[*Flow] {
	return func(yield func(*Flow) bool) {
		if c == nil {
			return
		}
		var f Flow
		for gi := range c.groups() {
			if !c.each(gi, &f, func(_ uint32, f *Flow) bool { return yield(f) }) {
				return
			}
		}
	}
}

// Backends yields each backend of a kept flow with the number of kept
// flows to it.
func (c *Conntrack) Backends() iter.Seq2[netip.Addr, int] {
	return func(yield func(netip.Addr, int) bool) {
		if c == nil {
			return
		}
		for gi := range c.groups() {
			if b, n := c.group(gi); n > 0 && !yield(b, n) {
				return
			}
		}
	}
}

// groups returns how many groups of flows there are: the lent ones, then
// those kept.
func (c *Conntrack) groups() int32 { return c.lentGroups() + c.kept.ngroup }

func (c *Conntrack) lentGroups() int32 {
	if c.lent == nil {
		return 0
	}
	return int32(c.lent.Groups())
}

// lentGroup reports whether group gi is lent, and its number among the
// lent groups or among those kept.
func (c *Conntrack) lentGroup(gi int32) (bool, int32) {
	if l := c.lentGroups(); gi >= l {
		return false, gi - l
	}
	return true, gi
}

// group returns group gi's backend and how many flows it holds.
func (c *Conntrack) group(gi int32) (netip.Addr, int) {
	lent, i := c.lentGroup(gi)
	if lent {
		return c.lent.Group(int(i))
	}
	g := c.kept.group(i)
	if g.routes.Len() == 0 {
		return netip.Addr{}, 0
	}
	return unpackAddr(g.backend, g.is4()), g.len()
}

// each calls fn with each flow of group gi and its position, in the reused
// f, until fn returns false; it reports whether fn never did.
func (c *Conntrack) each(gi int32, f *Flow, fn func(uint32, *Flow) bool) bool {
	lent, i := c.lentGroup(gi)
	if lent {
		return c.lent.Each(int(i), f, fn)
	}
	pos := uint32(0)
	return c.kept.each(c.kept.group(i), f, func(f *Flow) bool {
		ok := fn(pos, f)
		pos++
		return ok
	})
}

// at sets *f to the flow at position pos of group gi.
func (c *Conntrack) at(gi int32, pos uint32, f *Flow) {
	lent, i := c.lentGroup(gi)
	if lent {
		c.lent.At(int(i), pos, f)
		return
	}
	c.kept.at(c.kept.group(i), pos, f)
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
