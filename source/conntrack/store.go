package conntrack

import (
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// flowChunks collects copies of flows in chunks of pointer-free records
// (snapshot.PackedFlow) and builds the []snapshot.Flow once, at its exact
// size, at the end. Appending to one []snapshot.Flow instead would copy
// what was kept several times over, allocate about five times its size,
// and, because a Flow holds pointers, make the garbage collector scan it
// and every copy pay write barriers while the heap grows: at a million
// entries that cost more than the kernel's dump itself.
type flowChunks struct {
	chunks [][]snapshot.PackedFlow
	n      int
}

const (
	firstChunk = 256
	maxChunk   = 16384
)

func (c *flowChunks) add(f *snapshot.Flow) {
	last := len(c.chunks) - 1
	if last < 0 || len(c.chunks[last]) == cap(c.chunks[last]) {
		size := min(max(c.n, firstChunk), maxChunk)
		c.chunks = append(c.chunks, make([]snapshot.PackedFlow, 0, size))
		last++
	}
	ch := &c.chunks[last]
	*ch = (*ch)[:len(*ch)+1]
	(*ch)[len(*ch)-1].Pack(f)
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
			ch[j].UnpackInto(&out[i])
			i++
		}
	}
	return out
}
