package conntrack

import "math/bits"

// hashSet is a set of 64-bit hashes: a scan keeps in one the hashes of
// the tuples it has read, to refuse a listing that holds a flow twice. A
// listing of a million stale flows holds a million: 16 MiB here, 8 bytes
// a slot at most three quarters full, where a Go map of them takes about
// 38 (it keeps a word beside each key, struct{} or not, and its tables
// are often half empty).
type hashSet struct {
	// slots hold the hashes, 0 for none (a hash of 0 is kept as 1), by
	// linear probing from the slot of their top bits.
	slots []uint64
	n     int
	shift uint
}

// add adds h and reports whether it was there already.
func (s *hashSet) add(h uint64) (had bool) {
	if h == 0 {
		h = 1
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := h >> s.shift; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			s.n++
			return false
		}
	}
}

// grow doubles the slots (from 1024) and puts every hash in again.
func (s *hashSet) grow() {
	size := max(2*len(s.slots), 1024)
	old := s.slots
	s.slots = make([]uint64, size)
	s.shift = uint(64 - bits.TrailingZeros(uint(size)))
	s.n = 0
	for _, h := range old {
		if h != 0 {
			s.add(h)
		}
	}
}
