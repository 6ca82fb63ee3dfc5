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

// Flows deletes exact conntrack entries (finding.FlowTarget).
type Flows struct{ Table FlowTable }

// Kind returns finding.FlowKind.
func (*Flows) Kind() string { return finding.FlowKind }

// Verify reads the entry back from the kernel by its tuple: it must still
// be the entry the finding was judged on, with the same conntrack ID and
// the same translation. An entry whose ID is unknown is refused: without
// it, the delete could hit a newer connection that reuses the tuple.
func (fl *Flows) Verify(_ context.Context, t finding.Target) error {
	want, err := flowTarget(t)
	if err != nil {
		return err
	}
	if want.ID == 0 {
		return errors.New("the entry's conntrack ID is unknown, so a newer entry with the same tuple could not be told apart")
	}
	got, err := fl.Table.Get(want)
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: the kernel no longer has %s", ErrGone, t)
	}
	if err != nil {
		return fmt.Errorf("reading the entry back from the kernel: %w", err)
	}
	switch {
	case got.ID != want.ID:
		return fmt.Errorf("the entry was replaced since it was judged (conntrack id %d, now %d)", want.ID, got.ID)
	case got.Reply != want.Reply:
		return fmt.Errorf("the entry now translates to %s, not %s", got.Backend(), want.Backend())
	}
	return nil
}

// Act deletes the entry, by tuple, zone and ID.
func (fl *Flows) Act(_ context.Context, t finding.Target) error {
	f, err := flowTarget(t)
	if err != nil {
		return err
	}
	err = fl.Table.Delete(f)
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: the kernel no longer has %s", ErrGone, t)
	}
	return err
}

func flowTarget(t finding.Target) (*snapshot.Flow, error) {
	ft, ok := t.(*finding.FlowTarget)
	if !ok {
		return nil, fmt.Errorf("not a conntrack flow: %s", t.Kind())
	}
	return &ft.Flow, nil
}
