package remedy

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
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

// judgedTable is a batchTable that deletes entries as they were judged, as
// conntrack.Watch does over netlink (by reply tuple, zone and ID: an
// entry replaced, or translated elsewhere, is not found), and counts the
// entries it reads back.
type judgedTable struct {
	*batchTable
	judged, readBack int
}

func (t *judgedTable) DeleteJudgedEach(fs []snapshot.Flow, fn func(int, error)) error {
	t.judged++
	for i := range fs {
		if got, ok := t.flows[fs[i].Orig]; !ok || got.ID != fs[i].ID || got.Reply != fs[i].Reply {
			fn(i, fmt.Errorf("delete as judged: %w", syscall.ENOENT))
			continue
		}
		fn(i, t.Delete(&fs[i]))
	}
	return nil
}

func (t *judgedTable) GetEach(fs []snapshot.Flow, fn func(int, snapshot.Flow, error)) error {
	t.readBack += len(fs)
	return t.batchTable.GetEach(fs, fn)
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

	// A table that deletes as judged gets the same outcome too, in one
	// system call a batch: it reads back only the entries it did not
	// find, to tell gone from replaced. A dry run reads each back.
	for _, dry := range []bool{false, true} {
		want := (&Flows{Table: kernel()}).ActEach(context.Background(), target, dry)
		j := &judgedTable{batchTable: &batchTable{fakeTable: kernel()}}
		got := (&Flows{Table: j}).ActEach(context.Background(), target, dry)
		if got != want {
			t.Errorf("dry run %v: deleted as judged %+v, one by one %+v", dry, got, want)
		}
		switch {
		case !dry && (j.judged != 4 || j.deletes != 0 || j.readBack != want.Gone+want.Changed-1):
			// The flow without an ID is counted changed, and not asked.
			t.Errorf("%d batches deleted as judged, %d by tuple, %d entries read back; want 4, 0 and the %d gone or replaced", j.judged, j.deletes, j.readBack, want.Gone+want.Changed-1)
		case dry && (j.judged != 0 || len(j.deleted) != 0 || j.readBack != len(flows)-1):
			t.Errorf("dry run: %d batches deleted as judged, %d entries deleted, %d read back; want none, none and every flow with an ID", j.judged, len(j.deleted), j.readBack)
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

// recordNudges keeps the flows it is given; it wants those of ports not
// divisible by 3, and sends to those of even ports.
type recordNudges struct{ got []snapshot.Flow }

func (r *recordNudges) Wants(f *snapshot.Flow) bool { return f.Orig.SrcPort%3 != 0 }

func (r *recordNudges) Nudge(f *snapshot.Flow) error {
	r.got = append(r.got, *f)
	if f.Orig.SrcPort%2 == 1 {
		return ErrNotNudged
	}
	return nil
}

// The clients of the flows deleted, and of no other, are nudged, once the
// target's flows are all deleted, with the state each flow had in the
// kernel right before its delete (the target's is its state when the
// index first saw it); a dry run nudges none.
func TestActEachNudgesTheClientsOfFlowsDeleted(t *testing.T) {
	var flows []snapshot.Flow
	for i := range 2*flowBatch + 3 {
		f := staleFlow("10.244.3.47", uint16(1000+i))
		f.State = "SYN_SENT"
		flows = append(flows, f)
	}
	gone, replaced := flows[5], flows[flowBatch+1]
	for _, kind := range []string{"one by one", "batched", "judged"} {
		tab := newTable(flowsFinding(flows...))
		for k, f := range tab.flows {
			f.State = "ESTABLISHED"
			tab.flows[k] = f
		}
		delete(tab.flows, gone.Orig)
		n := tab.flows[replaced.Orig]
		n.ID += 70000
		tab.flows[replaced.Orig] = n
		var table FlowTable = tab
		switch kind {
		case "batched":
			table = &batchTable{fakeTable: tab}
		case "judged":
			table = &judgedTable{batchTable: &batchTable{fakeTable: tab}}
		}
		nudge := &recordNudges{}
		fl := &Flows{Table: table, Nudge: nudge}
		tl := fl.ActEach(context.Background(), flowsFinding(flows...).Target, false)
		even := 0
		for _, f := range nudge.got {
			if f.Orig.SrcPort%2 == 0 {
				even++
			}
			if want := map[bool]string{true: "ESTABLISHED", false: ""}[f.Orig.SrcPort%3 != 0]; kind == "judged" && f.State != want {
				t.Errorf("%s: %s nudged in state %q, want %q (read back only when wanted)", kind, &f, f.State, want)
			} else if kind != "judged" && f.State != "ESTABLISHED" {
				t.Errorf("%s: %s nudged in state %q, want its read-back's", kind, &f, f.State)
			}
		}
		if tl.Done != len(flows)-2 || len(nudge.got) != tl.Done || tl.Nudged != even {
			t.Errorf("%s: tally %+v, %d nudged; want every flow but two deleted and nudged, those of even ports counted (the fake refuses odd ones)", kind, tl, len(nudge.got))
		}
		if len(tab.deleted) != len(nudge.got) {
			t.Errorf("%s: %d deleted, %d nudged", kind, len(tab.deleted), len(nudge.got))
		}
		for i, f := range nudge.got {
			if f.Orig == gone.Orig || f.Orig == replaced.Orig || f.Orig != tab.deleted[i].Orig {
				t.Errorf("%s: nudge %d is %s, deleted %s", kind, i, &f, &tab.deleted[i])
			}
		}
	}
	tab := newTable(flowsFinding(flows...))
	nudge := &recordNudges{}
	if tl := (&Flows{Table: tab, Nudge: nudge}).ActEach(context.Background(), flowsFinding(flows...).Target, true); tl.Done != len(flows) || tl.Nudged != 0 || len(nudge.got) != 0 {
		t.Errorf("dry run: tally %+v, %d nudged; want all would-be deleted and none nudged", tl, len(nudge.got))
	}
}
