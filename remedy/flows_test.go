package remedy

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// batchTable is a fakeTable that reads back and deletes in batches, as
// conntrack.Watch does over netlink, and counts its batches.
type batchTable struct {
	*fakeTable
	gets, deletes int
}

func (t *batchTable) GetEach(fs []snapshot.Flow, fn func(int, snapshot.Flow, error)) error {
	t.gets++
	for i := range fs {
		got, err := t.Get(&fs[i])
		fn(i, got, err)
	}
	return nil
}

func (t *batchTable) DeleteEach(fs []snapshot.Flow, fn func(int, error)) error {
	t.deletes++
	for i := range fs {
		fn(i, t.Delete(&fs[i]))
	}
	return nil
}

// A table that batches gets the same outcome, flow by flow, as one that
// does not: the same flows deleted, the same tally, the same first reason,
// in a few batches.
func TestActEachBatchesAsItActsOneByOne(t *testing.T) {
	var flows []snapshot.Flow
	for i := range 3*flowBatch + 7 {
		flows = append(flows, staleFlow("10.244.3.47", uint16(1000+i)))
	}
	// What the kernel holds by the time the remedy acts: some entries are
	// gone, some replaced, some translated elsewhere, one never had an ID.
	kernel := func() *fakeTable {
		tab := newTable(flowsFinding(flows...))
		for i, fl := range flows {
			switch i % 50 {
			case 7:
				delete(tab.flows, fl.Orig)
			case 11:
				n := tab.flows[fl.Orig]
				n.ID += 70000
				tab.flows[fl.Orig] = n
			case 13:
				n := tab.flows[fl.Orig]
				n.Reply.Src = netip.MustParseAddr("10.244.3.48")
				tab.flows[fl.Orig] = n
			}
		}
		return tab
	}
	flows[3*flowBatch].ID = 0
	target := flowsFinding(flows...).Target
	for _, dry := range []bool{false, true} {
		one := kernel()
		want := (&Flows{Table: one}).ActEach(context.Background(), target, dry)
		many := &batchTable{fakeTable: kernel()}
		got := (&Flows{Table: many}).ActEach(context.Background(), target, dry)
		if got != want {
			t.Errorf("dry run %v: batched %+v, one by one %+v", dry, got, want)
		}
		if want.Done == 0 || want.Gone == 0 || want.Changed == 0 {
			t.Errorf("dry run %v: %+v: every outcome should occur", dry, want)
		}
		if len(many.deleted) != len(one.deleted) || len(many.flows) != len(one.flows) {
			t.Errorf("dry run %v: batched deleted %d and left %d, one by one %d and %d", dry, len(many.deleted), len(many.flows), len(one.deleted), len(one.flows))
		}
		if wantBatches := 4; many.gets != wantBatches || (!dry && many.deletes != wantBatches) || (dry && many.deletes != 0) {
			t.Errorf("dry run %v: %d read-back batches and %d delete batches, want %d each (none deleting in a dry run)", dry, many.gets, many.deletes, wantBatches)
		}
	}

	// A context that ends stops the batches: nothing more is read or
	// deleted, and every flow left is counted failed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	many := &batchTable{fakeTable: kernel()}
	tl := (&Flows{Table: many}).ActEach(ctx, target, false)
	if tl.Failed != len(flows) || many.gets != 0 || len(many.deleted) != 0 {
		t.Errorf("cancelled: %+v after %d batches, %d deleted", tl, many.gets, len(many.deleted))
	}
}
