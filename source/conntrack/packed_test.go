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
			// A dump lists each flow once: a seed puts each key once.
			seeded := map[key4]bool{}
			for k, r := range model {
				if rng.IntN(3) > 0 {
					seeded[k] = true
					r.gen = gen
					if p.putSeed(k, r) {
						t.Fatalf("step %d: seed of %v, which the store holds, added it", step, k)
					}
					model[k] = r
				}
			}
			for range rng.IntN(600) {
				k, r := key(), indexRecord{id: uint32(step), gen: gen}
				if seeded[k] {
					continue
				}
				seeded[k] = true
				_, had := model[k]
				if added := p.putSeed(k, r); added == had {
					t.Fatalf("step %d: seed of %v added %v, had %v", step, k, added, had)
				}
				model[k] = r
				if got, ok := p.get(k); !ok || got != r {
					t.Fatalf("step %d: get %v during the seed: %+v %v", step, k, got, ok)
				}
			}
			if p.len() != len(model) {
				t.Fatalf("step %d: len %d during the seed, want %d", step, p.len(), len(model))
			}
			if twice := p.settle(); twice != 0 {
				t.Fatalf("step %d: settle found %d keys added twice", step, twice)
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

// A key a seed lists twice (which a dump does not) is kept once.
func TestPackedSeedTwice(t *testing.T) {
	var p packed[key4]
	k := makeKey4([4]byte{10, 0, 0, 1}, 1, 0)
	p.putSeed(k, indexRecord{id: 1})
	p.putSeed(k, indexRecord{id: 2})
	if twice := p.settle(); twice != 1 || p.len() != 1 {
		t.Fatalf("settle: %d twice, len %d; want 1 and 1", twice, p.len())
	}
	if r, ok := p.get(k); !ok || (r.id != 1 && r.id != 2) {
		t.Errorf("get: %+v %v, want one of the two", r, ok)
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
