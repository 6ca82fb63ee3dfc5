package conntrack

import (
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestFlowChunks(t *testing.T) {
	samples := sampleFlows()
	// Parsed, as Collect sees them: the only flows it keeps.
	for i := range samples {
		if err := parseFlow(kernelPayload(t, &samples[i]), &samples[i]); err != nil {
			t.Fatal(err)
		}
	}
	samples = append(samples, snapshot.Flow{Proto: 1, // ICMP: no ports, no state
		Orig:  snapshot.Tuple{Src: mustAddr("10.0.0.1"), Dst: mustAddr("10.0.0.2")},
		Reply: snapshot.Tuple{Src: mustAddr("10.0.0.2"), Dst: mustAddr("10.0.0.1")}})
	for _, n := range []int{0, 1, firstChunk, firstChunk + 1, 3*maxChunk + 7} {
		var c flowChunks
		var f snapshot.Flow
		for i := 0; i < n; i++ {
			f = samples[i%len(samples)] // the same Flow, changed between calls, as in a dump
			f.ID = uint32(i)
			c.add(&f)
		}
		got := c.flows()
		if len(got) != n || cap(got) != n {
			t.Fatalf("%d flows: got %d (capacity %d)", n, len(got), cap(got))
		}
		for i := range got {
			want := samples[i%len(samples)]
			want.ID = uint32(i)
			if !flowsEqual(&got[i], &want) || got[i].Orig.Src.Is4() != want.Orig.Src.Is4() {
				t.Fatalf("%d flows: flow %d is\n %+v\nwant\n %+v", n, i, got[i], want)
			}
		}
	}
}

// BenchmarkFlowChunks keeps 80,000 flows as Collect does, then builds the
// []snapshot.Flow: the part of a collection that is not the kernel's dump
// and its parsing.
func BenchmarkFlowChunks(b *testing.B) {
	samples := sampleFlows()
	b.ReportAllocs()
	for b.Loop() {
		var c flowChunks
		var f snapshot.Flow
		for i := 0; i < 80000; i++ {
			f = samples[i%len(samples)]
			f.ID = uint32(i)
			c.add(&f)
		}
		if len(c.flows()) != 80000 {
			b.Fatal("lost flows")
		}
	}
}
