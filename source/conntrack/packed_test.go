package conntrack

import (
	"maps"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// A packed store answers as a map of the same records would, through
// puts, removes, sweeps and the rebuilds they cause.
func TestPackedIsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p packed[key4]
	model := map[key4]indexRecord{}
	key := func() key4 {
		return makeKey4([4]byte{10, 0, 0, byte(rng.IntN(8))}, uint16(rng.IntN(400)), uint16(rng.IntN(2)))
	}
	gen := uint8(1)
	for step := range 200000 {
		switch op := rng.IntN(100); {
		case op < 55:
			k, r := key(), indexRecord{id: uint32(step), gen: gen, start: uint32(rng.IntN(5))}
			_, had := model[k]
			if added := p.put(k, r); added == had {
				t.Fatalf("step %d: put %v added %v, had %v", step, k, added, had)
			}
			model[k] = r
		case op < 90:
			k := key()
			_, had := model[k]
			if removed := p.remove(k); removed != had {
				t.Fatalf("step %d: remove %v: %v, had %v", step, k, removed, had)
			}
			delete(model, k)
		case op < 91:
			// A seed: some records seen again in a new generation, the
			// others swept.
			gen++
			for k, r := range model {
				if rng.IntN(3) > 0 {
					r.gen = gen
					p.put(k, r)
					model[k] = r
				}
			}
			want := 0
			for k, r := range model {
				if r.gen != gen {
					delete(model, k)
					want++
				}
			}
			if n := p.sweep(gen); n != want {
				t.Fatalf("step %d: swept %d, want %d", step, n, want)
			}
		default:
			k := key()
			r, ok := p.get(k)
			if w, had := model[k]; ok != had || (ok && r != w) {
				t.Fatalf("step %d: get %v: %+v %v, want %+v %v", step, k, r, ok, w, had)
			}
		}
		if p.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, p.len(), len(model))
		}
	}
	got := map[key4]indexRecord{}
	p.each(func(k key4, r indexRecord) {
		if _, dup := got[k]; dup {
			t.Fatalf("each: %v twice", k)
		}
		got[k] = r
	})
	if !maps.Equal(got, model) {
		t.Fatalf("each: %d records, want %d", len(got), len(model))
	}
}

// The records stay as small as the index's memory figures say.
func TestPackedRecordSizes(t *testing.T) {
	if n := unsafe.Sizeof(entry[key4]{}); n != 24 {
		t.Errorf("IPv4 entry: %d bytes, want 24", n)
	}
	if n := unsafe.Sizeof(entry[key6]{}); n != 36 {
		t.Errorf("IPv6 entry: %d bytes, want 36", n)
	}
}

// key4 orders as its parts do, and gives them back.
func TestKey4(t *testing.T) {
	a, b := makeKey4([4]byte{10, 0, 0, 1}, 65535, 7), makeKey4([4]byte{10, 0, 0, 2}, 1, 0)
	if a.compare(b) >= 0 || b.compare(a) <= 0 || a.compare(a) != 0 {
		t.Errorf("compare: %v %v", a, b)
	}
	if src, port, route := a.parts(); src != [4]byte{10, 0, 0, 1} || port != 65535 || route != 7 {
		t.Errorf("parts: %v %d %d", src, port, route)
	}
}
