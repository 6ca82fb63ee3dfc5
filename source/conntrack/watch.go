package conntrack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Table is a node's conntrack table: Conn is one.
type Table interface {
	// Dump reads every entry, calling fn with each (a Flow reused for the
	// next: fn must not keep the pointer), and returns how many it read.
	Dump(ctx context.Context, fn func(*snapshot.Flow) error) (int, error)
	// Get returns the entry with f's original tuple and zone; an error
	// wrapping syscall.ENOENT when there is none.
	Get(f *snapshot.Flow) (snapshot.Flow, error)
	// Delete removes the entry with f's original tuple and zone, and only
	// if it still has f's ID when that is not 0.
	Delete(f *snapshot.Flow) error
}

// Batcher is a Table that reads back and deletes many entries a system
// call, each answered on its own (Conn is one).
type Batcher interface {
	// GetEach reads back each of fs as Get does and calls fn with each
	// answer, in order.
	GetEach(fs []snapshot.Flow, fn func(i int, got snapshot.Flow, err error)) error
	// DeleteEach deletes each of fs as Delete does and calls fn with each
	// outcome, in order.
	DeleteEach(fs []snapshot.Flow, fn func(i int, err error)) error
}

// JudgedDeleter deletes entries as they were judged: by reply tuple, zone
// and ID (Conn.DeleteJudged), many a system call.
type JudgedDeleter interface {
	DeleteJudgedEach(fs []snapshot.Flow, fn func(i int, err error)) error
}

// EventStream streams a table's new and destroy events: a Subscription.
type EventStream interface {
	Run(ctx context.Context, fn func(Event) error) error
}

// DefaultNewFlowInterval is Watch.NewFlowInterval when it is zero.
const DefaultNewFlowInterval = time.Second

// Watch is the node's conntrack table as the agent keeps it (source.Live,
// source.Focuser): with events, an index of its DNATed flows by backend,
// seeded by every full dump and kept current by NEW and DESTROY events, so
// that between full dumps a pass reads from the index only the flows whose
// backend changed; without events, a dump at every pass.
//
// What a focused pass reads: the flows to the backends the changes
// mention; the flows to the backends of the flows the last pass kept (what
// became of their pods may reach no watched object); the flows created
// since; and every indexed flow when a change may concern any (a Service
// or Node changed, the host's addresses changed), or when a rule that
// reads the table does not promise that its verdicts depend on the flow's
// backend alone (snapshot.BackendLocal).
//
// It is also the table a remedy acts on (Get, Delete): a deleted flow
// leaves the index at once.
type Watch struct {
	// Table is dumped at full passes, and read back and deleted from by a
	// remedy.
	Table Table
	// Events, when set, streams the table's events; subscribe before Start,
	// so that nothing falls between the subscription and the first dump.
	Events EventStream
	// NewFlowInterval is how often flows created since the last pass are
	// looked at: those the rules would judge are a change. Default
	// DefaultNewFlowInterval.
	NewFlowInterval time.Duration
	// Metrics, when set, count indexed flows and lost events.
	Metrics *Metrics
	// Log receives structured logs; nil discards them.
	Log *slog.Logger
	// Now is the clock that stamps when a flow was first seen; nil means
	// time.Now.
	Now func() time.Time

	readers
	index   *flowIndex
	once    sync.Once
	started atomic.Bool

	// What the agent's loop sets and reads, in turn.
	focus    source.Changes
	full     bool
	lastFull bool
	// local is true when every reader promises backend-local verdicts.
	local bool
	// suspects are the backends of the flows the last pass kept; local
	// the host addresses it read.
	suspects  []netip.Addr
	lastLocal []netip.Addr
	lastKeep  func(*snapshot.Flow) bool
	kept      int
	// fresh is the flows created since the last Changes, reused.
	fresh []snapshot.Flow

	// release is set by a full dump: its memory is given back at the
	// next tick.
	release atomic.Bool
	// gc runs the collector eagerly while passes keep many flows.
	gc eagerGC

	mu     sync.Mutex
	notify func()
	lost   bool
}

// Metrics are the series a Watch keeps.
type Metrics struct {
	// IndexFlows is how many flows the index holds (with events), or the
	// last pass kept (without).
	IndexFlows prometheus.Gauge
	// EventsLost counts the times events were lost.
	EventsLost prometheus.Counter
}

// NewMetrics creates a Watch's series, named under namespace, and
// registers them with reg.
func NewMetrics(reg prometheus.Registerer, namespace string) *Metrics {
	m := &Metrics{
		IndexFlows: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "index_flows",
			Help: "Flows the agent indexes by backend (DNATed, and untranslated UDP; with conntrack events), or flows the last audit kept for the rules (without)."}),
		EventsLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "conntrack_events_lost_total",
			Help: "Times conntrack events were lost (socket overflow or failure); each makes the next audit read the whole table."}),
	}
	reg.MustRegister(m.IndexFlows, m.EventsLost)
	return m
}

func (w *Watch) init() {
	w.once.Do(func() {
		if w.Now == nil {
			w.Now = time.Now
		}
		if w.Log == nil {
			w.Log = slog.New(slog.DiscardHandler)
		}
		if w.NewFlowInterval <= 0 {
			w.NewFlowInterval = DefaultNewFlowInterval
		}
		w.index = newFlowIndex(w.Now)
	})
}

// Name returns Name ("conntrack").
func (*Watch) Name() string { return Name }

// OnChange sets the function called after each change (source.Live).
func (w *Watch) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = fn
}

func (w *Watch) poke() {
	w.mu.Lock()
	fn := w.notify
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// Narrow records the rules that read the table (source.Narrower).
func (w *Watch) Narrow(list []any) {
	w.readers.Narrow(list)
	w.local = true
	for _, r := range list {
		if _, ok := r.(snapshot.BackendLocal); !ok {
			w.local = false
		}
	}
}

// Start follows the table's events, when there are any, until ctx ends
// (source.Live).
func (w *Watch) Start(ctx context.Context) error {
	w.init()
	if w.Table == nil {
		return errors.New("conntrack: no table to watch")
	}
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("conntrack: started already: the table's events are followed once, for the life of the process")
	}
	if w.Events == nil {
		return nil
	}
	go w.follow(ctx)
	go w.tick(ctx)
	return nil
}

// follow feeds events to the index until ctx ends. When events are lost,
// the index is no longer trusted: the next pass reads the whole table,
// which seeds it again.
func (w *Watch) follow(ctx context.Context) {
	for {
		err := w.Events.Run(ctx, func(e Event) error {
			w.index.apply(e)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		w.index.invalidate()
		if m := w.Metrics; m != nil && m.EventsLost != nil {
			m.EventsLost.Inc()
		}
		w.mu.Lock()
		w.lost = true
		w.mu.Unlock()
		w.poke()
		if errors.Is(err, ErrOverflow) {
			w.Log.Warn("conntrack events lost: the next audit reads the whole table", "err", err)
			continue
		}
		w.Log.Error("conntrack events failed: audits read the whole table until they work again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// tick says, every NewFlowInterval, that flows were created: Changes tells
// whether a rule would judge any.
func (w *Watch) tick(ctx context.Context) {
	t := time.NewTicker(w.NewFlowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.release.Swap(false) {
				debug.FreeOSMemory()
			}
			if w.index.hasDirty() {
				w.poke()
			}
		}
	}
}

// Ready returns nil (source.Live): a pass always reads the table, from the
// kernel when the index cannot be trusted, and a dump that fails fails its
// collection.
func (w *Watch) Ready(time.Time) error { return nil }

// Changes returns what changed since the last call (source.Live): the
// backends of flows created since that a rule would judge (by the last
// pass's filter: a connection opened through a rule kube-proxy has not yet
// removed), and every flow when events were lost.
func (w *Watch) Changes() source.Changes {
	w.init()
	var c source.Changes
	w.mu.Lock()
	lost := w.lost
	w.lost = false
	w.mu.Unlock()
	if lost {
		c.All, c.Why = true, "events-lost"
	}
	if w.Events == nil || w.lastKeep == nil {
		w.index.takeDirty()
		return c
	}
	// The flows created since: those the rules would judge make their
	// backend a change. When more came than the index holds, every flow of
	// their backends is looked at instead.
	var backends []netip.Addr
	var complete bool
	w.fresh, backends, complete = w.index.takeFresh(w.fresh)
	if complete {
		for i := range w.fresh {
			if w.lastKeep(&w.fresh[i]) {
				c.Add(w.fresh[i].Reply.Src.Unmap(), "new-flow")
			}
		}
		return c
	}
	for _, b := range backends {
		found := false
		w.index.each([]netip.Addr{b}, false, func(f *snapshot.Flow) {
			found = found || w.lastKeep(f)
		})
		if found {
			c.Add(b, "new-flow")
		}
	}
	return c
}

// Focus says what the next Collect reads (source.Focuser).
func (w *Watch) Focus(c source.Changes, full bool) { w.focus, w.full = c, full }

// Collect reads the table into s.Conntrack: the whole table when the pass
// is full, when there are no events or when the index cannot be trusted
// (seeding the index on the way); else, from the index, the flows that may
// have changed verdict. On error s is left untouched.
func (w *Watch) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	w.init()
	keep := w.keep(s)
	w.lastKeep, _ = Filter(w.list, s)
	if !w.narrowed {
		w.lastKeep = func(*snapshot.Flow) bool { return true }
	}
	full := w.full || w.Events == nil || !w.index.isValid()
	w.lastFull = full
	var kept *snapshot.Conntrack
	if full {
		kept = &snapshot.Conntrack{}
		if w.Events != nil {
			w.index.beginSeed()
			if w.index.len() == 0 {
				// A first seed grows every backend's list from nothing:
				// collect its leftovers ten times as often while it
				// runs (and after, while passes keep many flows), so
				// that they do not pile up to the index's size again
				// before the collector comes.
				w.gc.set(true)
			}
		}
		// With events, the flows the index holds are kept where they
		// are, marked by the seed and lent once it ends; the others are
		// copied.
		n, err := w.Table.Dump(ctx, func(f *snapshot.Flow) error {
			if w.Events != nil && w.index.seed(f, keep) {
				return nil
			}
			if keep(f) {
				kept.Keep(f)
			}
			return nil
		})
		if w.Events != nil && !w.index.endSeed(err == nil) && err == nil {
			// Too many events came while the table was read: the index
			// is not current, and the next pass reads the table again.
			w.mu.Lock()
			w.lost = true
			w.mu.Unlock()
			defer w.poke()
		}
		if err != nil {
			w.gc.set(w.kept >= manyKept)
			return err
		}
		kept.Seen = n
		switch {
		case w.Events == nil:
		case kept.Len() == 0:
			kept.Lend(w.index.lendSeeded(kept))
		default:
			kept = withCopies(kept, w.index.lendSeeded(nil))
		}
		// A full dump streams the whole table through memory: give what
		// it and the audit that reads it leave behind back to the node
		// soon rather than minutes later, when the runtime would. With
		// events, at the next new-flow tick, once that audit is over (a
		// seed of the index, the first of which follows the informers'
		// initial lists, or a scheduled pass); without, at once, once per
		// scheduled pass, not per change when every pass dumps.
		switch {
		case w.Events != nil:
			w.release.Store(true)
		case w.full:
			defer debug.FreeOSMemory()
		}
	} else {
		kept = &snapshot.Conntrack{Seen: w.index.len()}
		all := w.focus.All || !w.local || !slices.Equal(s.LocalAddresses, w.lastLocal)
		var cands []netip.Addr
		if !all {
			for a := range w.focus.Addrs {
				cands = append(cands, a)
			}
			cands = append(cands, w.suspects...)
			cands = append(cands, w.index.takeDirty()...)
		} else {
			w.index.takeDirty()
		}
		kept.Lend(w.index.lendJudged(cands, all, keep, kept))
	}
	w.lastLocal = slices.Clone(s.LocalAddresses)
	w.suspects = w.suspects[:0]
	for b := range kept.Backends() {
		w.suspects = append(w.suspects, b)
	}
	w.kept = kept.Len()
	// While passes keep many flows (a node whose workloads all died),
	// what they keep and what the rules make of it are most of the heap,
	// and the collector's default would let the heap grow to twice that
	// between collections: it runs ten times as eagerly until passes
	// keep few again.
	w.gc.set(w.kept >= manyKept)
	w.count()
	kept.Fit()
	s.Conntrack = kept
	return nil
}

// withCopies returns a table that holds copies of the flows of kept and of
// v: kept holds copies already (flows the index does not hold, which the
// rules kept: only a rule that reads every flow keeps those), and a
// backend's flows must stay together.
func withCopies(kept *snapshot.Conntrack, v *indexView) *snapshot.Conntrack {
	all := &snapshot.Conntrack{Seen: kept.Seen}
	for f := range kept.All() {
		all.Keep(f)
	}
	var f snapshot.Flow
	for g := range v.Groups() {
		v.Each(g, &f, func(_ uint32, f *snapshot.Flow) bool {
			all.Keep(f)
			return true
		})
	}
	return all
}

// manyKept is how many flows a pass keeps for the rules beyond which the
// collector runs eagerly (eagerGC): 2 MiB of flows; a million in a mass
// failure.
const manyKept = 1 << 16

// eagerGCPercent is the garbage collector's percent (GOGC) while it runs
// eagerly: the heap grows a tenth past what is kept between collections,
// where the default lets it double.
const eagerGCPercent = 10

// eagerGC runs the garbage collector eagerly (eagerGCPercent), or as it
// did before, as a collection that keeps many flows says.
type eagerGC struct {
	on  bool
	was int
}

// set makes the collector run eagerly, or as it did before.
func (g *eagerGC) set(on bool) {
	if on == g.on {
		return
	}
	g.on = on
	if on {
		g.was = debug.SetGCPercent(eagerGCPercent)
		return
	}
	debug.SetGCPercent(g.was)
}

// count sets the gauge of indexed flows: the index's, or with no events
// what the last pass kept.
func (w *Watch) count() {
	m := w.Metrics
	if m == nil || m.IndexFlows == nil {
		return
	}
	if w.Events != nil {
		m.IndexFlows.Set(float64(w.index.len()))
	} else {
		m.IndexFlows.Set(float64(w.kept))
	}
}

// Describe says what the last pass read and kept.
func (w *Watch) Describe(s *snapshot.Snapshot) string {
	if w.lastFull {
		return w.describe(s)
	}
	return fmt.Sprintf("%s indexed, %d judged and kept for the rules", text.Count(w.index.len(), "flow", "flows"), w.kept)
}

// Get reads the entry with f's tuple back from the table; one that is gone
// leaves the index.
func (w *Watch) Get(f *snapshot.Flow) (snapshot.Flow, error) {
	got, err := w.Table.Get(f)
	if errors.Is(err, syscall.ENOENT) && w.index != nil {
		w.index.forget(f)
		w.count()
	}
	return got, err
}

// Delete deletes the entry with f's tuple and ID; it leaves the index too.
func (w *Watch) Delete(f *snapshot.Flow) error {
	err := w.Table.Delete(f)
	if (err == nil || errors.Is(err, syscall.ENOENT)) && w.index != nil {
		w.index.forget(f)
		w.count()
	}
	return err
}

// GetEach reads each of fs back, as Get does: many a system call when the
// table is a Batcher, else one at a time. An entry that is gone leaves the
// index.
func (w *Watch) GetEach(fs []snapshot.Flow, fn func(i int, got snapshot.Flow, err error)) error {
	defer w.count()
	seen := func(i int, got snapshot.Flow, err error) {
		if errors.Is(err, syscall.ENOENT) && w.index != nil {
			w.index.forget(&fs[i])
		}
		fn(i, got, err)
	}
	if bt, ok := w.Table.(Batcher); ok {
		return bt.GetEach(fs, seen)
	}
	for i := range fs {
		got, err := w.Table.Get(&fs[i])
		seen(i, got, err)
	}
	return nil
}

// DeleteJudgedEach deletes each of fs as it was judged, and no other
// entry: by its reply tuple, zone and ID (Conn.DeleteJudged), many a
// system call, when the table is a JudgedDeleter; else each read back and
// deleted by its original tuple and ID only when it still has f's ID and
// reply tuple. An entry gone or replaced gives an error wrapping
// syscall.ENOENT. Each deleted or gone entry leaves the index.
func (w *Watch) DeleteJudgedEach(fs []snapshot.Flow, fn func(i int, err error)) error {
	defer w.count()
	deleted := func(i int, err error) {
		if (err == nil || errors.Is(err, syscall.ENOENT)) && w.index != nil {
			w.index.forget(&fs[i])
		}
		fn(i, err)
	}
	if jd, ok := w.Table.(JudgedDeleter); ok {
		return jd.DeleteJudgedEach(fs, deleted)
	}
	for i := range fs {
		got, err := w.Table.Get(&fs[i])
		switch {
		case err != nil:
		case got.ID != fs[i].ID || got.Reply != fs[i].Reply:
			err = fmt.Errorf("conntrack: delete as judged %v: replaced: %w", &fs[i], syscall.ENOENT)
		default:
			err = w.Table.Delete(&fs[i])
		}
		deleted(i, err)
	}
	return nil
}

// DeleteEach deletes each of fs, as Delete does: many a system call when
// the table is a Batcher, else one at a time. Each deleted or gone entry
// leaves the index.
func (w *Watch) DeleteEach(fs []snapshot.Flow, fn func(i int, err error)) error {
	defer w.count()
	deleted := func(i int, err error) {
		if (err == nil || errors.Is(err, syscall.ENOENT)) && w.index != nil {
			w.index.forget(&fs[i])
		}
		fn(i, err)
	}
	if bt, ok := w.Table.(Batcher); ok {
		return bt.DeleteEach(fs, deleted)
	}
	for i := range fs {
		deleted(i, w.Table.Delete(&fs[i]))
	}
	return nil
}
