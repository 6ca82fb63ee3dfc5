package snapshot

import (
	"net/netip"
	"time"
)

// FlowKey is what identifies a conntrack entry to the kernel: the
// protocol, the original tuple (with its address family) and the zone. No
// two entries in a table have the same key at once. An entry that ends and
// a new one with the same original tuple share the key; their IDs tell
// them apart, except when the new one takes the old one's memory at once
// (the kernel derives the ID from the entry's address and original tuple):
// what must act on exactly the entry it read compares the reply too.
//
// It holds no pointers and is comparable: a map keyed by it is not scanned
// by the garbage collector.
type FlowKey struct {
	src, dst         [16]byte // an IPv4 address as IPv4-mapped IPv6
	srcPort, dstPort uint16
	zone             uint16
	proto            Proto
	is4              bool
}

// Key returns the key of the entry f is: its protocol, original tuple and
// zone. An IPv6 address's scope zone (which conntrack entries do not have)
// is not part of it.
func (f *Flow) Key() FlowKey {
	return FlowKey{src: f.Orig.Src.As16(), dst: f.Orig.Dst.As16(),
		srcPort: f.Orig.SrcPort, dstPort: f.Orig.DstPort,
		zone: f.Zone, proto: f.Proto, is4: f.Orig.Src.Is4()}
}

// Proto is the entry's protocol.
func (k FlowKey) Proto() Proto { return k.proto }

// Orig is the entry's original tuple.
func (k FlowKey) Orig() Tuple {
	return Tuple{Src: unpackAddr(k.src, k.is4), Dst: unpackAddr(k.dst, k.is4), SrcPort: k.srcPort, DstPort: k.dstPort}
}

// Zone is the entry's conntrack zone.
func (k FlowKey) Zone() uint16 { return k.zone }

// FlowDetails is the part of a PackedFlow besides its key, its reply
// source, its timeout and its mark: the reply's destination and ports, the
// ID, the status, the state and the start time. A store of flows by
// backend keeps only these under the key, under the reply source.
type FlowDetails struct {
	replyDst                   [16]byte
	start                      int64 // Unix ns; 0: none
	id, status                 uint32
	replySrcPort, replyDstPort uint16
	state                      uint8 // 1 + the state's number (StateNumber); 0: none
	// seen is true when start holds the flow's Seen, not its Start.
	seen bool
}

// ID is the entry's conntrack ID (0 when unknown).
func (d FlowDetails) ID() uint32 { return d.id }

// Seen is the flow's Seen (the zero time when it has none).
func (d FlowDetails) Seen() time.Time {
	if !d.seen || d.start == 0 {
		return time.Time{}
	}
	return time.Unix(0, d.start)
}

// PackedFlow is a Flow without pointers, in 104 bytes: the addresses in
// their 16-byte form, the state as its number, the start as nanoseconds.
// Large numbers of them (a table of a million flows) cost the garbage
// collector nothing to keep.
//
// Its parts can be kept apart: FlowKey names the entry and can key a map;
// ReplySrc is the reply's source address, which for a DNATed flow is the
// backend; FlowDetails is the rest a rule reads and a remedy needs to
// delete exactly this entry (with the key: the ID). Timeout and Mark are
// what the entry said when it was read; a store that outlives that moment
// can leave them 0.
//
// Pack and Unpack keep every field of a Flow read from the kernel (by
// netlink or from a listing) except a state name that StateNumber does not
// know, which unpacks as "", and an IPv6 scope zone.
type PackedFlow struct {
	FlowKey
	// ReplySrc is the reply's source address, an IPv4 one as IPv4-mapped
	// IPv6 (as netip.Addr.As16 gives it).
	ReplySrc [16]byte
	FlowDetails
	Timeout uint32
	Mark    uint32
}

// Pack packs f. Its four addresses are taken to be of one family, the
// original source's, as in every entry the kernel reports.
func Pack(f *Flow) PackedFlow {
	var p PackedFlow
	p.Pack(f)
	return p
}

// Pack sets p to f packed, as the function Pack does, in place: where
// PackedFlows are kept by the hundred thousand, it saves a copy of each.
func (p *PackedFlow) Pack(f *Flow) {
	// Field by field: a composite literal would be built aside and copied.
	p.FlowKey = f.Key()
	p.ReplySrc = f.Reply.Src.As16()
	p.replyDst = f.Reply.Dst.As16()
	p.id, p.status = f.ID, f.Status
	p.replySrcPort, p.replyDstPort = f.Reply.SrcPort, f.Reply.DstPort
	p.Timeout, p.Mark = f.Timeout, f.Mark
	p.state = 0
	if f.State != "" {
		if n, ok := StateNumber(f.Proto, f.State); ok {
			p.state = n + 1
		}
	}
	p.start, p.seen = 0, false
	switch {
	case !f.Start.IsZero():
		p.start = f.Start.UnixNano()
	case !f.Seen.IsZero():
		p.start, p.seen = f.Seen.UnixNano(), true
	}
}

// Key returns the key of the entry p is.
func (p *PackedFlow) Key() FlowKey { return p.FlowKey }

// Unpack returns the Flow p holds.
func (p *PackedFlow) Unpack() Flow {
	var f Flow
	p.UnpackInto(&f)
	return f
}

// UnpackInto sets every field of *f to the Flow p holds.
func (p *PackedFlow) UnpackInto(f *Flow) {
	is4 := p.is4
	*f = Flow{
		ID: p.id, Proto: p.proto,
		Orig: Tuple{Src: unpackAddr(p.src, is4), Dst: unpackAddr(p.dst, is4), SrcPort: p.srcPort, DstPort: p.dstPort},
		Reply: Tuple{Src: unpackAddr(p.ReplySrc, is4), Dst: unpackAddr(p.replyDst, is4),
			SrcPort: p.replySrcPort, DstPort: p.replyDstPort},
		Status: p.status, Timeout: p.Timeout, Mark: p.Mark, Zone: p.zone,
	}
	if p.state != 0 {
		f.State = StateName(p.proto, p.state-1)
	}
	switch {
	case p.start != 0 && p.seen:
		f.Seen = time.Unix(0, p.start)
	case p.start != 0:
		f.Start = time.Unix(0, p.start)
	}
}

func unpackAddr(b [16]byte, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}
