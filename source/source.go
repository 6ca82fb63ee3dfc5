package source

import (
	"context"
	"errors"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ErrUnsupported is returned (wrapped) by a source whose ledger does not exist
// on this host or cluster. The snapshot records it as StatusUnsupported, a
// normal result rather than a failure.
var ErrUnsupported = errors.New("unsupported")

// Source reads one ledger into the snapshot.
type Source interface {
	// Name is the source's stable name: "kube", "conntrack", ...
	Name() string
	// Collect fills its part of s. It must leave s untouched when it returns
	// an error.
	Collect(ctx context.Context, s *snapshot.Snapshot) error
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
		case errors.Is(err, ErrUnsupported):
			st.Status, st.Detail = snapshot.StatusUnsupported, err.Error()
		case err != nil:
			st.Status, st.Detail = snapshot.StatusError, err.Error()
		}
		s.Sources = append(s.Sources, st)
	}
}
