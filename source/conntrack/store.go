package conntrack

import (
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

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
