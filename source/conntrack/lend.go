package conntrack

import (
	"bytes"
	"net/netip"
	"slices"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A pass that reads its flows from the index keeps them for the rules
// where they are: it marks the records of the flows it keeps (recordKept)
// and lends the stores that hold them to its snapshot (an indexView, a
// snapshot.FlowStore), rather than copying them into it. When a node's
// workloads all die, every indexed flow is kept, and a copy would double
// the index: a million flows to a hundred thousand dead backends took 32
// MiB more, and as much again while the copy was fitted.
//
// A lent store never changes again: the index changes a copy of it in its
// place (flowIndex.own), once, when an event or the next seed first
// touches that backend, and the snapshot's store goes with the snapshot.

// indexView is the flows a pass kept, in the index's stores it lent.
type indexView struct {
	groups []viewGroup
	n      int
}

// viewGroup is one lent backend's store: its flows marked kept (of
// generation gen, when gen is not anyGen), at their positions in its
// base stores (IPv4, then IPv6).
type viewGroup struct {
	backend [16]byte
	b       *backendFlows
	n       int32
	gen     int16
}

// anyGen is a viewGroup's gen when it lends kept records of any
// generation.
const anyGen = -1

func (g *viewGroup) lends(r indexRecord) bool {
	return r.flags&recordKept != 0 && (g.gen == anyGen || int16(r.gen) == g.gen) && !r.dead()
}

// Len, Groups, Group, Each and At are snapshot.FlowStore's.

func (v *indexView) Len() int    { return v.n }
func (v *indexView) Groups() int { return len(v.groups) }

func (v *indexView) Group(g int) (netip.Addr, int) {
	vg := &v.groups[g]
	if len(vg.b.v4.base) > 0 {
		// The backend of IPv4 flows, as JoinFlow unpacks it.
		return netip.AddrFrom4([4]byte(vg.backend[12:])), int(vg.n)
	}
	return netip.AddrFrom16(vg.backend), int(vg.n)
}

func (v *indexView) Each(g int, f *snapshot.Flow, fn func(uint32, *snapshot.Flow) bool) bool {
	vg := &v.groups[g]
	b := vg.b
	pos := uint32(0)
	for _, e := range b.v4.base {
		if vg.lends(e.r) {
			b.join4(vg.backend, e.k, e.r, f)
			if !fn(pos, f) {
				return false
			}
		}
		pos++
	}
	if b.v6 == nil {
		return true
	}
	for _, e := range b.v6.base {
		if vg.lends(e.r) {
			b.join6(vg.backend, e.k, e.r, f)
			if !fn(pos, f) {
				return false
			}
		}
		pos++
	}
	return true
}

func (v *indexView) At(g int, pos uint32, f *snapshot.Flow) {
	vg := &v.groups[g]
	b := vg.b
	n4 := uint32(len(b.v4.base))
	if pos < n4 {
		e := &b.v4.base[pos]
		b.join4(vg.backend, e.k, e.r, f)
		return
	}
	e := &b.v6.base[pos-n4]
	b.join6(vg.backend, e.k, e.r, f)
}

// compactLocked returns backend's flows with every record in its base
// stores, none dead: b, or the index's copy of it.
func (ix *flowIndex) compactLocked(backend [16]byte, b *backendFlows) *backendFlows {
	if b.v4.compact() && b.v6.compact() {
		return b
	}
	b = ix.own(backend, b)
	ix.n -= b.v4.compactNow() + b.v6.compactNow()
	return b
}

// lend adds b, compact, to v with its n kept flows, and marks it lent.
func (v *indexView) lend(backend [16]byte, b *backendFlows, n int, gen int16) {
	b.lent = true
	v.groups = append(v.groups, viewGroup{backend: backend, b: b, n: int32(n), gen: gen})
	v.n += n
}

// sort orders the groups by backend, so that a pass reads them in the
// same order whatever the index's map.
func (v *indexView) sort() {
	slices.SortFunc(v.groups, func(a, b viewGroup) int { return bytes.Compare(a.backend[:], b.backend[:]) })
}

// lendMin is the size of a backend's store from which a pass that keeps
// fewer than a quarter of its flows copies them rather than lending the
// store: lent, a busy backend's store with a few stale flows among its
// hundred thousand would be copied whole by the next event that touches
// it, every pass.
const lendMin = 1024

// copies reports whether a pass that keeps n of a backend's total flows
// copies them (into a table that takes copies) rather than lending them.
func copies(into *snapshot.Conntrack, n, total int) bool {
	return into != nil && total >= lendMin && 4*n < total
}

// lendSeeded lends the flows the last seed marked kept, as the dump read
// them; after endSeed, complete or not (the records of earlier seeds
// that an incomplete one could not sweep are not of its generation). Of
// a large store it keeps a few flows of, it copies those into into
// instead, when into is not nil.
func (ix *flowIndex) lendSeeded(into *snapshot.Conntrack) *indexView {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	gen := uint8(ix.gen)
	v := &indexView{}
	var f snapshot.Flow
	for backend, b := range ix.byBackend {
		n := 0
		lends := func(r indexRecord) bool { return r.flags&recordKept != 0 && r.gen == gen }
		b.v4.each(func(_ key4, r indexRecord) {
			if lends(r) {
				n++
			}
		})
		b.v6.each(func(_ key6, r indexRecord) {
			if lends(r) {
				n++
			}
		})
		switch {
		case n == 0:
		case copies(into, n, b.len()):
			b.v4.each(func(k key4, r indexRecord) {
				if lends(r) {
					b.join4(backend, k, r, &f)
					into.Keep(&f)
				}
			})
			b.v6.each(func(k key6, r indexRecord) {
				if lends(r) {
					b.join6(backend, k, r, &f)
					into.Keep(&f)
				}
			})
		default:
			v.lend(backend, ix.compactLocked(backend, b), n, int16(gen))
		}
	}
	v.sort()
	return v
}

// lendJudged judges with keep every indexed flow to backends (every
// indexed flow when all is true), marks those it keeps, and lends them;
// of a large store it keeps a few flows of, it copies those into into
// instead, when into is not nil. keep is called under the index's lock:
// it must not call the index.
func (ix *flowIndex) lendJudged(backends []netip.Addr, all bool, keep func(*snapshot.Flow) bool, into *snapshot.Conntrack) *indexView {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	v := &indexView{}
	var f snapshot.Flow
	var kept []bool
	visit := func(backend [16]byte, b *backendFlows) {
		b = ix.compactLocked(backend, b)
		n4 := len(b.v4.base)
		kept = slices.Grow(kept[:0], b.len())
		n := 0
		for _, e := range b.v4.base {
			b.join4(backend, e.k, e.r, &f)
			k := keep(&f)
			kept = append(kept, k)
			if k {
				n++
			}
		}
		if b.v6 != nil {
			for _, e := range b.v6.base {
				b.join6(backend, e.k, e.r, &f)
				k := keep(&f)
				kept = append(kept, k)
				if k {
					n++
				}
			}
		}
		if n == 0 {
			return
		}
		record := func(i int) *indexRecord {
			if i < n4 {
				return &b.v4.base[i].r
			}
			return &b.v6.base[i-n4].r
		}
		if copies(into, n, len(kept)) {
			for i, k := range kept {
				if k {
					if i < n4 {
						b.join4(backend, b.v4.base[i].k, b.v4.base[i].r, &f)
					} else {
						b.join6(backend, b.v6.base[i-n4].k, b.v6.base[i-n4].r, &f)
					}
					into.Keep(&f)
				}
			}
			return
		}
		for i, k := range kept {
			if k != (record(i).flags&recordKept != 0) {
				b = ix.own(backend, b)
				break
			}
		}
		for i, k := range kept {
			if r := record(i); k != (r.flags&recordKept != 0) {
				r.flags ^= recordKept
			}
		}
		v.lend(backend, b, n, anyGen)
	}
	ix.visitLocked(backends, all, visit)
	v.sort()
	return v
}
