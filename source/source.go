package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ErrUnsupported is returned (wrapped) by a source whose ledger does not exist
// on this host or cluster. The snapshot records it as StatusUnsupported, a
// normal result rather than a failure.
var ErrUnsupported = errors.New("unsupported")

// Unsupported returns an error that is ErrUnsupported and reads as the
// message alone: the report already says "unsupported".
func Unsupported(format string, args ...any) error {
	return unsupported(fmt.Sprintf(format, args...))
}

type unsupported string

func (e unsupported) Error() string        { return string(e) }
func (e unsupported) Is(target error) bool { return target == ErrUnsupported }

// ErrNotGiven is returned (wrapped) by a source of a scan of saved evidence
// that was given no file of its ledger. The snapshot records it as
// StatusNotGiven; it is ErrUnsupported too: nothing of the ledger is
// judged, and that is no failure.
var ErrNotGiven = errors.New("not given")

// NotGiven returns an error that is ErrNotGiven and reads as the message
// alone, which says how to give the ledger.
func NotGiven(format string, args ...any) error {
	return notGiven(fmt.Sprintf(format, args...))
}

type notGiven string

func (e notGiven) Error() string { return string(e) }
func (e notGiven) Is(target error) bool {
	return target == ErrNotGiven || target == ErrUnsupported
}

// Absent is a source of a ledger a scan of saved evidence was given no
// file of: it collects nothing, and says how to give it (Why).
type Absent struct {
	Source string
	Why    string
}

// Name returns the ledger's source name.
func (a Absent) Name() string { return a.Source }

// Collect returns ErrNotGiven, saying Why.
func (a Absent) Collect(context.Context, *snapshot.Snapshot) error { return NotGiven("%s", a.Why) }

// Source reads one ledger into the snapshot.
type Source interface {
	// Name is the source's stable name: "kube", "conntrack", ...
	Name() string
	// Collect fills its part of s. It must leave s untouched when it returns
	// an error.
	Collect(ctx context.Context, s *snapshot.Snapshot) error
}

// Narrower is a Source that can keep less than its whole ledger. Before
// each Collect it is given the rules that will read what it collects (as
// rule.ReadersOf returns them); it keeps what their opt-in contracts ask
// for (snapshot.FlowReader for conntrack) and everything when one of them
// asks for nothing in particular. A source that keeps everything need not
// implement it.
type Narrower interface {
	Narrow(readers []any)
}

// Describer is a Source that can say what a complete collection read, in a
// few words for reports ("120 pods, 14 services").
type Describer interface {
	Describe(s *snapshot.Snapshot) string
}

// Resolver is a Source whose collection completes once every source of
// the pass has collected: a node agent's cluster source looks up the
// holders of the addresses the rules ask about (snapshot.HolderReader),
// which ledgers read after it (the conntrack table) name. Resolve runs
// only after a Collect that succeeded. On error it must leave s as
// Collect left it, and the source's status becomes the error.
type Resolver interface {
	Resolve(ctx context.Context, s *snapshot.Snapshot) error
}

// Resolve runs Resolve on each source that is a Resolver and collected
// completely into s, in order, and records a failure in the source's
// status, with the time it took added to its duration.
func Resolve(ctx context.Context, now func() time.Time, s *snapshot.Snapshot, sources ...Source) {
	for _, src := range sources {
		r, ok := src.(Resolver)
		if !ok {
			continue
		}
		i := slices.IndexFunc(s.Sources, func(st snapshot.SourceStatus) bool { return st.Name == src.Name() })
		if i < 0 || s.Sources[i].Status != snapshot.StatusOK {
			continue
		}
		start := now()
		err := r.Resolve(ctx, s)
		st := &s.Sources[i]
		st.Duration += now().Sub(start)
		switch {
		case err != nil:
			st.Status, st.Detail = snapshot.StatusError, err.Error()
		default:
			if d, ok := src.(Describer); ok {
				st.Detail = d.Describe(s)
			}
		}
	}
}

// Collect runs each source in order into a new snapshot taken at now. Every
// source runs even if an earlier one failed; the outcome of each is recorded
// in Snapshot.Sources.
func Collect(ctx context.Context, now func() time.Time, nodeName string, sources ...Source) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Taken: now(), NodeName: nodeName}
	CollectInto(ctx, now, s, sources...)
	return s
}

// CollectInto runs more sources into an existing snapshot, for sources that
// are configured from what earlier ones collected.
func CollectInto(ctx context.Context, now func() time.Time, s *snapshot.Snapshot, sources ...Source) {
	for _, src := range sources {
		start := now()
		err := src.Collect(ctx, s)
		st := snapshot.SourceStatus{Name: src.Name(), Status: snapshot.StatusOK, Duration: now().Sub(start)}
		switch {
		case errors.Is(err, ErrNotGiven):
			st.Status, st.Detail = snapshot.StatusNotGiven, err.Error()
		case errors.Is(err, ErrUnsupported):
			st.Status, st.Detail = snapshot.StatusUnsupported, err.Error()
		case err != nil:
			st.Status, st.Detail = snapshot.StatusError, err.Error()
		default:
			if d, ok := src.(Describer); ok {
				st.Detail = d.Describe(s)
			}
		}
		s.Sources = append(s.Sources, st)
	}
}
