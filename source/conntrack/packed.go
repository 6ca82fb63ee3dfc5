package conntrack

import (
	"cmp"
	"maps"
	"slices"
)

// orderedKey is a key of a packed store: comparable, and ordered by its
// compare method.
type orderedKey[K any] interface {
	comparable
	compare(K) int
}

// packed holds records by key in little more memory than the records
// themselves take: most of them in base, sorted by key, with no room
// between them and no pointer for the garbage collector to follow; the
// keys added since base was last rebuilt in over, a map, until there are
// enough of them to merge. A key lives in base or in over, never in both.
// A record removed from base is marked dead and dropped at the next
// rebuild.
//
// For a million flows the agent indexes, that is about 26 bytes a flow
// (IPv4) where a map of the same records takes about 52: a map keeps
// between an eighth and half of its slots empty, and a control byte for
// each.
//
// During a seed, keys new to the store are appended to adds, unsorted
// (a dump lists each flow once), and settle merges them in when the seed
// ends: one sort and one merge a backend, rather than a map's growth and
// the merges of its overflow, for the million flows of a first seed.
type packed[K orderedKey[K]] struct {
	base []entry[K]
	dead int
	over map[K]indexRecord
	adds []entry[K]
}

type entry[K any] struct {
	k K
	r indexRecord
}

// directMax is the size up to which base takes new keys in place (a copy
// of at most a few KiB each); beyond it they wait in over, and are merged
// when over holds an eighth as many.
const directMax = 256

// A nil store is empty: a backend's store of IPv6 flows is made only
// when it has one.

func (p *packed[K]) len() int {
	if p == nil {
		return 0
	}
	return len(p.base) - p.dead + len(p.over) + len(p.adds)
}

// added returns where k is in adds, or -1. Linear: adds is only looked
// into between a seed's start and its end, when nothing else runs.
func (p *packed[K]) added(k K) int {
	for i := range p.adds {
		if p.adds[i].k == k {
			return i
		}
	}
	return -1
}

// find returns k's position in base and whether it is there (dead or not).
func (p *packed[K]) find(k K) (int, bool) {
	return slices.BinarySearchFunc(p.base, k, func(e entry[K], k K) int { return e.k.compare(k) })
}

func (p *packed[K]) get(k K) (indexRecord, bool) {
	if p == nil {
		return indexRecord{}, false
	}
	if i, ok := p.find(k); ok {
		return p.base[i].r, !p.base[i].r.dead()
	}
	if r, ok := p.over[k]; ok {
		return r, true
	}
	if len(p.adds) > 0 {
		if i := p.added(k); i >= 0 {
			return p.adds[i].r, true
		}
	}
	return indexRecord{}, false
}

// setBase sets k's record when base holds k, dead or not (found), and
// reports whether it was dead (revived: k is new again); else i is where k
// would go in base.
func (p *packed[K]) setBase(k K, r indexRecord) (i int, found, revived bool) {
	i, found = p.find(k)
	if !found {
		return i, false, false
	}
	if revived = p.base[i].r.dead(); revived {
		p.dead--
	}
	p.base[i].r = r
	return i, true, revived
}

// putSeed is put during a seed: a key new to the store is appended to
// adds, to be merged in by settle.
func (p *packed[K]) putSeed(k K, r indexRecord) (added bool) {
	if _, found, revived := p.setBase(k, r); found {
		return revived
	}
	if _, ok := p.over[k]; ok {
		p.over[k] = r
		return false
	}
	if len(p.adds) == cap(p.adds) {
		// A large store doubles: half the garbage of append's growth by
		// a quarter, which copies it five times over as it grows; the
		// room left is given back when the seed ends (fit). A small one
		// grows by a quarter: a node whose workloads all died holds a
		// hundred thousand backends of a few flows each, whose room left
		// would all wait for the seed's end at once.
		grow := max(len(p.adds)/4, 4)
		if len(p.adds) >= directMax {
			grow = len(p.adds)
		}
		// Made here: append's own growth would double a small one.
		adds := make([]entry[K], len(p.adds), len(p.adds)+grow)
		copy(adds, p.adds)
		p.adds = adds
	}
	p.adds = append(p.adds, entry[K]{k, r})
	return true
}

// settle merges the keys a seed added into base, and returns how many of
// them were added twice (which a dump does not do; one of the two stays).
// A store that held nothing else takes the sorted additions as its base.
func (p *packed[K]) settle() (twice int) {
	if p == nil || len(p.adds) == 0 {
		return 0
	}
	slices.SortFunc(p.adds, func(a, b entry[K]) int { return a.k.compare(b.k) })
	out := p.adds[:0]
	for i := range p.adds {
		if len(out) > 0 && out[len(out)-1].k == p.adds[i].k {
			out[len(out)-1] = p.adds[i]
			twice++
			continue
		}
		out = append(out, p.adds[i])
	}
	p.adds = nil
	if len(p.base) == 0 && len(p.over) == 0 {
		p.base, p.dead = out, 0
		return twice
	}
	p.rebuildWith(out)
	return twice
}

// put sets k's record and reports whether k is new.
func (p *packed[K]) put(k K, r indexRecord) (added bool) {
	if i, found, revived := p.setBase(k, r); found {
		return revived
	} else if len(p.base) < directMax && p.over == nil {
		p.base = slices.Insert(p.base, i, entry[K]{k, r})
		return true
	}
	if p.over == nil {
		p.over = map[K]indexRecord{}
	}
	_, had := p.over[k]
	p.over[k] = r
	if len(p.over) >= len(p.base)/8 {
		p.rebuild()
	}
	return !had
}

// remove drops k's record and reports whether there was one.
func (p *packed[K]) remove(k K) bool {
	if p == nil {
		return false
	}
	if i, ok := p.find(k); ok {
		if p.base[i].r.dead() {
			return false
		}
		if p.over == nil && p.dead == 0 && len(p.base) <= directMax {
			p.base = slices.Delete(p.base, i, i+1)
			return true
		}
		p.base[i].r.flags |= recordDead
		p.dead++
		if p.dead > len(p.base)/4 {
			p.rebuild()
		}
		return true
	}
	if _, ok := p.over[k]; ok {
		delete(p.over, k)
		return true
	}
	if len(p.adds) > 0 {
		if i := p.added(k); i >= 0 {
			p.adds = slices.Delete(p.adds, i, i+1)
			return true
		}
	}
	return false
}

// sweep removes the records of other generations than gen, and returns
// how many it removed.
func (p *packed[K]) sweep(gen uint8) int {
	if p == nil {
		return 0
	}
	n := 0
	for i := range p.base {
		if r := &p.base[i].r; !r.dead() && r.gen != gen {
			r.flags |= recordDead
			p.dead++
			n++
		}
	}
	for k, r := range p.over {
		if r.gen != gen {
			delete(p.over, k)
			n++
		}
	}
	if p.dead > 0 {
		p.rebuild()
	}
	return n
}

// fit gives back the room base has beyond its records, when that is more
// than an eighth of them.
func (p *packed[K]) fit() {
	if p != nil && cap(p.base)-len(p.base) > len(p.base)/8 {
		p.base = slices.Clone(p.base)
	}
}

// clone returns a copy of p that shares nothing with it.
func (p *packed[K]) clone() packed[K] {
	return packed[K]{base: slices.Clone(p.base), dead: p.dead, over: maps.Clone(p.over), adds: slices.Clone(p.adds)}
}

// compact reports whether base holds every record, none of them dead.
func (p *packed[K]) compact() bool {
	return p == nil || (p.dead == 0 && len(p.over) == 0 && len(p.adds) == 0)
}

// compactNow puts every record in base, none dead, and returns how many
// keys a seed added twice (settle).
func (p *packed[K]) compactNow() (twice int) {
	if p.compact() {
		return 0
	}
	twice = p.settle()
	if !p.compact() {
		p.rebuild()
	}
	return twice
}

// each calls fn with every live key and record.
func (p *packed[K]) each(fn func(K, indexRecord)) {
	if p == nil {
		return
	}
	for _, e := range p.base {
		if !e.r.dead() {
			fn(e.k, e.r)
		}
	}
	for k, r := range p.over {
		fn(k, r)
	}
	for _, e := range p.adds {
		fn(e.k, e.r)
	}
}

// rebuild merges over into base and drops the dead records: a new base
// of exactly the live records.
func (p *packed[K]) rebuild() {
	added := make([]entry[K], 0, len(p.over))
	for k, r := range p.over {
		added = append(added, entry[K]{k, r})
	}
	slices.SortFunc(added, func(a, b entry[K]) int { return a.k.compare(b.k) })
	p.over = nil
	p.rebuildWith(added)
}

// rebuildWith merges added (sorted, none of its keys in base or over) and
// over into base, and drops the dead records.
func (p *packed[K]) rebuildWith(added []entry[K]) {
	if len(p.over) > 0 {
		for k, r := range p.over {
			added = append(added, entry[K]{k, r})
		}
		slices.SortFunc(added, func(a, b entry[K]) int { return a.k.compare(b.k) })
	}
	merged := make([]entry[K], 0, len(p.base)-p.dead+len(added))
	i, j := 0, 0
	for i < len(p.base) || j < len(added) {
		if i < len(p.base) && p.base[i].r.dead() {
			i++
			continue
		}
		if j == len(added) || (i < len(p.base) && p.base[i].k.compare(added[j].k) < 0) {
			merged = append(merged, p.base[i])
			i++
			continue
		}
		merged = append(merged, added[j])
		j++
	}
	p.base, p.dead, p.over = merged, 0, nil
	if len(merged) == 0 {
		p.base = nil
	}
}

// key4 is what tells a backend's IPv4 flows apart: the client, its port
// and the route (snapshot.FrontendKey, the address at its size), in one
// word ordered as those three.
type key4 uint64

func makeKey4(src [4]byte, srcPort, route uint16) key4 {
	return key4(uint64(src[0])<<56 | uint64(src[1])<<48 | uint64(src[2])<<40 | uint64(src[3])<<32 | uint64(srcPort)<<16 | uint64(route))
}

func (k key4) compare(o key4) int { return cmp.Compare(k, o) }

func (k key4) parts() (src [4]byte, srcPort, route uint16) {
	return [4]byte{byte(k >> 56), byte(k >> 48), byte(k >> 40), byte(k >> 32)}, uint16(k >> 16), uint16(k)
}

// key6 is key4 for IPv6 clients.
type key6 struct {
	src            [16]byte
	srcPort, route uint16
}

func (k key6) compare(o key6) int {
	for i := range k.src {
		if c := cmp.Compare(k.src[i], o.src[i]); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(k.srcPort, o.srcPort); c != 0 {
		return c
	}
	return cmp.Compare(k.route, o.route)
}
