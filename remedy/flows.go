package remedy

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// FlowTable reads and deletes single conntrack entries by their original
// tuple and zone (conntrack.Conn does).
type FlowTable interface {
	// Get returns the kernel's current entry with f's original tuple; an
	// error wrapping syscall.ENOENT when there is none.
	Get(f *snapshot.Flow) (snapshot.Flow, error)
	// Delete removes the entry with f's original tuple, and only if it
	// still has f's ID when f.ID is not 0.
	Delete(f *snapshot.Flow) error
}

// Flows deletes exact conntrack entries: the flows of a
// finding.FlowTarget, each read back by its tuple right before it is
// deleted by tuple and ID (Counting).
type Flows struct {
	Table FlowTable
	// Nudge, when set, is given each flow deleted, once all of a
	// target's are, so that its client notices the connection is gone
	// without waiting for its next retransmission.
	Nudge Nudger
}

// Kind returns finding.FlowKind.
func (*Flows) Kind() string { return finding.FlowKind }

// Verify is not used: ActEach reads each entry back right before deleting
// it.
func (fl *Flows) Verify(context.Context, finding.Target) error { return nil }

// Act deletes the target's flows, as ActEach does; it fails unless each
// was deleted or gone.
func (fl *Flows) Act(ctx context.Context, t finding.Target) error {
	tl := fl.ActEach(ctx, t, false)
	switch {
	case tl.Done == 0 && tl.Failed == 0 && tl.Changed == 0:
		return fmt.Errorf("%w: %s", ErrGone, tl.Why)
	case tl.Failed > 0 || tl.Changed > 0:
		return errors.New(tl.Why)
	}
	return nil
}

// FlowBatchTable is a FlowTable that reads back and deletes many entries
// a system call, each answered on its own (conntrack.Watch is one).
type FlowBatchTable interface {
	FlowTable
	// GetEach reads back each of fs as Get does and calls fn with each
	// answer, in order.
	GetEach(fs []snapshot.Flow, fn func(i int, got snapshot.Flow, err error)) error
	// DeleteEach deletes each of fs as Delete does and calls fn with each
	// outcome, in order.
	DeleteEach(fs []snapshot.Flow, fn func(i int, err error)) error
}

// FlowJudgedTable deletes entries as they were judged: by reply tuple,
// zone and ID, which names the entry judged and no other (a client that
// reconnected from the same port has another reply tuple), so that no
// read-back is needed first (conntrack.Watch is one).
type FlowJudgedTable interface {
	FlowTable
	// DeleteJudgedEach deletes each of fs as it was judged and calls fn
	// with each outcome, in order: an error wrapping syscall.ENOENT for
	// an entry gone or replaced.
	DeleteJudgedEach(fs []snapshot.Flow, fn func(i int, err error)) error
}

// flowBatch is how many flows a FlowJudgedTable deletes, or a
// FlowBatchTable reads back and then deletes, at a time: for the latter,
// the time between an entry's read-back and its delete stays under a
// millisecond or two.
const flowBatch = 256

// ActEach deletes each flow of the target that the kernel still holds as
// it was judged: the same conntrack ID and the same translation. A
// FlowJudgedTable deletes flowBatch entries a system call by their reply
// tuple, zone and ID, which only the entry judged has, and reads back only
// those the kernel did not find, to tell one gone from one replaced.
// Another table reads each entry back by its tuple, then deletes it by
// tuple and ID when the read-back has the same ID and translation (a
// FlowBatchTable flowBatch entries at a time). An entry whose ID is
// unknown is left alone: the delete could hit a newer connection that
// reuses the tuple. With dryRun it reads each back and deletes nothing.
func (fl *Flows) ActEach(ctx context.Context, t finding.Target, dryRun bool) Tally {
	var tl Tally
	ft, ok := t.(*finding.FlowTarget)
	if !ok {
		tl.Failed, tl.Why = 1, "not a conntrack flow: "+t.Kind()
		return tl
	}
	// done are the flows deleted, for the Nudger.
	var done []snapshot.Flow
	deleted := func(f *snapshot.Flow, err error) {
		tl.deleted(f, err)
		if err == nil && fl.Nudge != nil {
			done = append(done, *f)
		}
	}
	bt, batched := fl.Table.(FlowBatchTable)
	jt, judged := fl.Table.(FlowJudgedTable)
	judged = judged && !dryRun
	// passed are the entries of a chunk read back as judged; missed,
	// those a delete as judged did not find.
	var chunk, passed, missed []snapshot.Flow
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		defer func() { chunk = chunk[:0] }()
		if err := ctx.Err(); err != nil {
			tl.Failed += len(chunk)
			tl.note(err.Error())
			return
		}
		passed, missed = passed[:0], missed[:0]
		if judged {
			fl.readStates(chunk, bt, batched)
			// One system call for the batch; those the kernel did not
			// find as judged are read back, to tell gone from replaced.
			jt.DeleteJudgedEach(chunk, func(i int, err error) {
				if errors.Is(err, syscall.ENOENT) {
					missed = append(missed, chunk[i])
					return
				}
				deleted(&chunk[i], err)
			})
			refused := func(want *snapshot.Flow, got snapshot.Flow, err error) {
				if tl.readBack(want, got, err) {
					// There as judged, yet not deleted as judged.
					tl.Failed++
					tl.note(fmt.Sprintf("deleting %s: the kernel did not find it by its reply tuple and ID, yet holds it", want))
				}
			}
			if batched {
				bt.GetEach(missed, func(i int, got snapshot.Flow, err error) { refused(&missed[i], got, err) })
				return
			}
			for i := range missed {
				got, err := fl.Table.Get(&missed[i])
				refused(&missed[i], got, err)
			}
			return
		}
		bt.GetEach(chunk, func(i int, got snapshot.Flow, err error) {
			if tl.readBack(&chunk[i], got, err) {
				chunk[i].State = got.State
				passed = append(passed, chunk[i])
			}
		})
		if dryRun {
			tl.Done += len(passed)
			return
		}
		bt.DeleteEach(passed, func(i int, err error) { deleted(&passed[i], err) })
	}
	for want := range ft.Flows.All() {
		if err := ctx.Err(); err != nil {
			tl.Failed++
			tl.note(err.Error())
			continue
		}
		if want.ID == 0 {
			tl.Changed++
			tl.note(fmt.Sprintf("%s: its conntrack ID is unknown, so a newer entry with the same tuple could not be told apart", want))
			continue
		}
		if batched || judged {
			chunk = append(chunk, *want)
			if len(chunk) == flowBatch {
				flush()
			}
			continue
		}
		got, err := fl.Table.Get(want)
		if !tl.readBack(want, got, err) {
			continue
		}
		if dryRun {
			tl.Done++
			continue
		}
		w := *want
		w.State = got.State
		deleted(&w, fl.Table.Delete(want))
	}
	flush()
	for i := range done {
		if fl.Nudge.Nudge(&done[i]) == nil {
			tl.Nudged++
		}
	}
	return tl
}

// note keeps the first reason given.
func (tl *Tally) note(why string) {
	if tl.Why == "" {
		tl.Why = why
	}
}

// readBack counts want's read-back (got, err) when it fails, and reports
// whether it passed: the kernel still holds want, with its ID and its
// translation.
func (tl *Tally) readBack(want *snapshot.Flow, got snapshot.Flow, err error) bool {
	switch {
	case errors.Is(err, syscall.ENOENT):
		tl.Gone++
		tl.note(fmt.Sprintf("the kernel no longer has %s", want))
	case err != nil:
		tl.Failed++
		tl.note(fmt.Sprintf("reading %s back from the kernel: %v", want, err))
	case got.ID != want.ID:
		tl.Changed++
		tl.note(fmt.Sprintf("%s was replaced since it was judged (conntrack id %d, now %d)", want, want.ID, got.ID))
	case got.Reply != want.Reply:
		tl.Changed++
		tl.note(fmt.Sprintf("%s now translates to %s, not %s", want, got.Backend(), want.Backend()))
	default:
		return true
	}
	return false
}

// deleted counts the outcome of deleting want.
func (tl *Tally) deleted(want *snapshot.Flow, err error) {
	switch {
	case err == nil:
		tl.Done++
	case errors.Is(err, syscall.ENOENT):
		tl.Gone++
		tl.note(fmt.Sprintf("the kernel no longer has %s", want))
	default:
		tl.Failed++
		tl.note(fmt.Sprintf("deleting %s: %v", want, err))
	}
}

// readStates sets the State of each flow of fs the Nudger wants to what
// the kernel holds now, read back (many a system call when batched), or
// to "" when the kernel holds it no more, or not as judged: a table
// indexed from conntrack's events knows a flow's state when it began.
func (fl *Flows) readStates(fs []snapshot.Flow, bt FlowBatchTable, batched bool) {
	if fl.Nudge == nil {
		return
	}
	var want []int
	var read []snapshot.Flow
	for i := range fs {
		if fl.Nudge.Wants(&fs[i]) {
			want = append(want, i)
			read = append(read, fs[i])
		} else {
			fs[i].State = ""
		}
	}
	set := func(k int, got snapshot.Flow, err error) {
		f := &fs[want[k]]
		f.State = ""
		if err == nil && got.ID == f.ID && got.Reply == f.Reply {
			f.State = got.State
		}
	}
	if batched {
		bt.GetEach(read, set)
		return
	}
	for k := range read {
		got, err := fl.Table.Get(&read[k])
		set(k, got, err)
	}
}
