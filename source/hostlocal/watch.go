package hostlocal

import (
	"log/slog"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/source"
)

// Watch is the host-local ledger kept live: Source, read at every audit as
// before, and watched between them, so that the agent audits when
// host-local hands out or releases an address, or when its store is
// wiped (seed 003), not at its next scheduled audit. It watches the CNI
// configurations' directory, each data directory and its parent, and
// each network's store, with inotify. Each directory is opened under the
// host root first, no link followed out of it (nodefs.OpenDirIn), and
// watched through the descriptor, so that a link planted on the node
// cannot have the agent watch, or be woken by, anything else.
//
// A change says every address may be concerned (a wiped store concerns
// them all). Without inotify (its limits reached), the ledger is read at
// audits alone, and Log says so.
type Watch struct {
	Source
	// Log, when set, says when the store cannot be watched.
	Log *slog.Logger

	mu      sync.Mutex
	fn      func()
	changed bool
	// noted are the names of the last entries the events named, newest
	// last.
	noted []string
	// warned is the last error logged.
	warned string
}

// maxNoted bounds Watch.noted.
const maxNoted = 64

var _ source.Live = (*Watch)(nil)

// warn logs err, once until it changes: a directory that cannot be
// watched would otherwise be said at every change.
func (w *Watch) warn(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == w.warned {
		return
	}
	w.warned = msg
	if err != nil && w.Log != nil {
		w.Log.Warn("host-local's store is read at audits only, not watched between them", "err", err)
	}
}

var _ source.Unsure = (*Watch)(nil)

// Unsure reports whether the store may have changed unseen: it could not
// be watched, last time the watch was set up (source.Unsure).
func (w *Watch) Unsure() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warned != ""
}

// Ready is always nil: what Collect reads, it reads at each audit.
func (w *Watch) Ready(time.Time) error { return nil }

// Changes says every address may be concerned when the store or the
// configurations changed since the last call.
func (w *Watch) Changes() source.Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changed {
		return source.Changes{}
	}
	w.changed = false
	return source.Changes{All: true, Why: Name}
}

// OnChange sets fn, called after each batch of changes.
func (w *Watch) OnChange(fn func()) {
	w.mu.Lock()
	w.fn = fn
	w.mu.Unlock()
}
