package conntrack

import (
	"hash/maphash"
	"runtime"
	"testing"
)

// The set holds what was added, and nothing else, through its growth; a
// hash of 0 is one like any other.
func TestHashSet(t *testing.T) {
	var s hashSet
	seed := maphash.MakeSeed()
	hash := func(i int) uint64 { return maphash.Comparable(seed, i) }
	const n = 100000
	for i := range n {
		if s.add(hash(i)) {
			t.Fatalf("%d: had it before it was added", i)
		}
	}
	for i := range n {
		if !s.add(hash(i)) {
			t.Fatalf("%d: added, then not had", i)
		}
	}
	if s.add(0) || !s.add(0) || s.n != n+1 {
		t.Errorf("0: %d hashes, want %d", s.n, n+1)
	}
}

// A million hashes take at most 20 bytes each (16.8: two million slots),
// where a Go map of them took 38.
func TestHashSetOfAMillion(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 1000000
	before := heap()
	var s hashSet
	seed := maphash.MakeSeed()
	for i := range n {
		s.add(maphash.Comparable(seed, i))
	}
	if each := float64(heap()-before) / n; each > 20 {
		t.Errorf("a million hashes take %.1f bytes each, want at most 20", each)
	}
	runtime.KeepAlive(&s)
}
