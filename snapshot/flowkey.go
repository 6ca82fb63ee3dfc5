package snapshot

import (
	"net/netip"
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

func unpackAddr(b [16]byte, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}
