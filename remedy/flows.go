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
type Flows struct{ Table FlowTable }

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

// ActEach deletes each flow of the target that the kernel still holds as
// it was judged: the entry read back by its tuple must have the same
// conntrack ID and the same translation. An entry whose ID is unknown is
// left alone: the delete could hit a newer connection that reuses the
// tuple. With dryRun it reads each back and deletes nothing.
func (fl *Flows) ActEach(ctx context.Context, t finding.Target, dryRun bool) Tally {
	var tl Tally
	ft, ok := t.(*finding.FlowTarget)
	if !ok {
		tl.Failed, tl.Why = 1, "not a conntrack flow: "+t.Kind()
		return tl
	}
	note := func(why string) {
		if tl.Why == "" {
			tl.Why = why
		}
	}
	for want := range ft.Flows.All() {
		if err := ctx.Err(); err != nil {
			tl.Failed++
			note(err.Error())
			continue
		}
		if want.ID == 0 {
			tl.Changed++
			note(fmt.Sprintf("%s: its conntrack ID is unknown, so a newer entry with the same tuple could not be told apart", want))
			continue
		}
		got, err := fl.Table.Get(want)
		switch {
		case errors.Is(err, syscall.ENOENT):
			tl.Gone++
			note(fmt.Sprintf("the kernel no longer has %s", want))
			continue
		case err != nil:
			tl.Failed++
			note(fmt.Sprintf("reading %s back from the kernel: %v", want, err))
			continue
		case got.ID != want.ID:
			tl.Changed++
			note(fmt.Sprintf("%s was replaced since it was judged (conntrack id %d, now %d)", want, want.ID, got.ID))
			continue
		case got.Reply != want.Reply:
			tl.Changed++
			note(fmt.Sprintf("%s now translates to %s, not %s", want, got.Backend(), want.Backend()))
			continue
		}
		if dryRun {
			tl.Done++
			continue
		}
		switch err := fl.Table.Delete(want); {
		case err == nil:
			tl.Done++
		case errors.Is(err, syscall.ENOENT):
			tl.Gone++
			note(fmt.Sprintf("the kernel no longer has %s", want))
		default:
			tl.Failed++
			note(fmt.Sprintf("deleting %s: %v", want, err))
		}
	}
	return tl
}
