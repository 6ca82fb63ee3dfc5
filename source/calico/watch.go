package calico

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/informer"
)

// DefaultRediscover is Watch.Rediscover when it is zero: discovery is one
// request, and Calico installed after the watch started is seen within a
// minute.
const DefaultRediscover = time.Minute

// Watch is Calico's IPAM ledger as the controller keeps it (source.Live):
// it asks discovery whether the API server serves the ledger, again every
// Rediscover while it does not, and once it does, watches each resource
// with an informer that converts each object when its event comes, as a
// scan reads it, so that a pass assembles the ledger without converting
// anything. A cluster without Calico is no failure: Ready says so with
// nil, Collect with source.ErrUnsupported. It implements source.Live,
// source.Settler and source.Describer.
type Watch struct {
	// Discovery says whether the API server serves crd.projectcalico.org
	// (Served).
	Discovery discovery.DiscoveryInterface
	// Dynamic lists and watches the ledger's objects.
	Dynamic dynamic.Interface
	// Rediscover is how often discovery is asked again while the API
	// server does not serve the ledger (Calico installed later); zero
	// means DefaultRediscover.
	Rediscover time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log says when the ledger starts being watched, once per Start;
	// nil discards.
	Log *slog.Logger

	// mu guards what follows, and every field of the watching it points
	// to.
	mu sync.Mutex
	// cur is what the last Start watches; nil before the first.
	cur *watching
	// changed is whether anything changed since the last Changes.
	changed bool
	notify  func()
}

// watching is what one Start watches, until its ctx ends. A later Start
// starts afresh rather than reuse its informers: their caches stopped
// being kept current when the ctx ended.
type watching struct {
	ctx context.Context
	// asked is whether discovery answered.
	asked bool
	// err is why the ledger is not watched: source.ErrUnsupported when
	// the API server does not serve it, another error when discovery
	// failed or Calico's CRDs are incomplete; nil once it is watched.
	err error
	// kinds are the informers of the ledger, once it is watched.
	kinds []*kind
}

// kind is the informer of one kind of the ledger.
type kind struct {
	kind string
	w    *informer.Informer
	// announced is whether the informer's list was announced as a
	// change: once it is, the watch may settle, and a program that takes
	// the changes once it settled is told of every list.
	announced bool
}

var (
	_ source.Live      = (*Watch)(nil)
	_ source.Settler   = (*Watch)(nil)
	_ source.Describer = (*Watch)(nil)
)

// Name returns "calico".
func (w *Watch) Name() string { return Name }

func (w *Watch) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

func (w *Watch) log() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}

// OnChange sets the function called after each change (source.Live).
func (w *Watch) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = fn
}

// change records a change of what r watches, and says so.
func (w *Watch) change(r *watching) {
	w.mu.Lock()
	fn := w.changedLocked(r)
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// changedLocked records a change of what r watches, w.mu held, in the
// same critical section as the change itself: whoever sees the change sees
// it announced. It returns the function to call once w.mu is let go. A
// change of a watch that a later Start replaced is nobody's.
func (w *Watch) changedLocked(r *watching) func() {
	if w.cur != r {
		return nil
	}
	w.changed = true
	return w.notify
}

// Start asks discovery whether the API server serves the ledger, again
// every Rediscover until it does, and then watches it until ctx ends
// (source.Live). It returns at once. Started again once the ctx of the
// last Start ended (the controller watches only while it leads), it starts
// afresh: discovery asked again, new informers, empty caches.
func (w *Watch) Start(ctx context.Context) error {
	if w.Discovery == nil || w.Dynamic == nil {
		return errors.New("calico: a discovery client and a dynamic client are needed to watch the ledger")
	}
	r := &watching{ctx: ctx}
	w.mu.Lock()
	if w.cur != nil && w.cur.ctx.Err() == nil {
		w.mu.Unlock()
		return errors.New("calico: watching already: start again once the last start's context has ended")
	}
	w.cur, w.changed = r, false
	w.mu.Unlock()
	go w.discoverUntilServed(r)
	return nil
}

// discoverUntilServed asks discovery, every Rediscover, until the ledger
// is watched or r's ctx ends. A cluster without Calico may install it
// later; incomplete CRDs may be completed; discovery that failed may
// answer.
func (w *Watch) discoverUntilServed(r *watching) {
	every := w.Rediscover
	if every <= 0 {
		every = DefaultRediscover
	}
	for r.ctx.Err() == nil && !w.discover(r) {
		t := time.NewTimer(every)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// discover asks discovery whether the API server serves the ledger and,
// when it does, starts its informers. It reports whether it watches the
// ledger now; when not, r says why, and a change is announced when that
// answer is not the last one (the first answer is one: a pass says it).
func (w *Watch) discover(r *watching) bool {
	rs, err := Served(w.Discovery)
	if err == nil {
		if err = w.watch(r, rs); err == nil {
			return true
		}
	}
	w.mu.Lock()
	same := r.asked && r.err != nil && r.err.Error() == err.Error()
	r.asked, r.err = true, err
	var fn func()
	if !same {
		fn = w.changedLocked(r)
	}
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
	return false
}

// watch starts an informer of each of rs, until r's ctx ends.
func (w *Watch) watch(r *watching, rs []Resource) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	changed := func() { w.change(r) }
	var kinds []*kind
	for _, res := range rs {
		convert, ok := converts[res.Kind]
		if !ok {
			return fmt.Errorf("no conversion of Calico's %s", res.Kind)
		}
		ri := w.Dynamic.Resource(res.GroupVersionResource)
		i := informer.New(res.Resource+"."+res.Group, informer.ListWatch{
			List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return ri.List(ctx, o)
			},
			Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return ri.Watch(ctx, o)
			},
		}, &unstructured.Unstructured{}, informer.Options{Transform: convert, Now: w.Now, Changed: changed})
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(_, _ any) { changed() },
			DeleteFunc: func(any) { changed() },
		}); err != nil {
			return fmt.Errorf("watching %s: %w", i.Resource, err)
		}
		kinds = append(kinds, &kind{kind: res.Kind, w: i})
	}
	w.mu.Lock()
	r.asked, r.err, r.kinds = true, nil, kinds
	fn := w.changedLocked(r)
	w.mu.Unlock()
	for _, k := range kinds {
		go k.w.Run(r.ctx)
		// A resource listed empty has no event to announce it: a pass
		// must still run once it is listed.
		go func() {
			if !synced(r.ctx, k.w) {
				return
			}
			w.mu.Lock()
			k.announced = true
			fn := w.changedLocked(r)
			w.mu.Unlock()
			if fn != nil {
				fn()
			}
		}()
	}
	w.log().Info("watching Calico's IPAM ledger", "resources", len(kinds))
	if fn != nil {
		fn()
	}
	return nil
}

// synced polls until i has listed its resource (true) or ctx ends
// (false): the informer announces no list, only the objects in it.
func synced(ctx context.Context, i *informer.Informer) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !i.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// converts keeps each kind of the ledger converted by this package's
// functions, as a scan reads it.
var converts = map[string]cache.TransformFunc{
	KindIPAMBlock:     informer.Keep(fromUnstructured(Block)),
	KindIPAMHandle:    informer.Keep(fromUnstructured(Handle)),
	KindBlockAffinity: informer.Keep(fromUnstructured(Affinity)),
	KindIPPool:        informer.Keep(fromUnstructured(Pool)),
	// kube-controllers reads only the configuration named "default":
	// the others are kept as nil.
	KindKubeControllers: informer.Keep(fromUnstructured(func(obj map[string]any) *snapshot.LeakGC {
		if gc, ok := LeakGC(obj); ok {
			return &gc
		}
		return nil
	})),
}

// fromUnstructured applies convert to the unstructured objects the dynamic
// client returns.
func fromUnstructured[T any](convert func(map[string]any) T) func(any) (T, bool) {
	return func(obj any) (T, bool) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			var zero T
			return zero, false
		}
		return convert(u.Object), true
	}
}

// Changes returns every address as changed, because of "calico", when
// anything changed since the last call: an object of the ledger, an
// informer's list or error, discovery's answer (source.Live). The rules
// judge the ledger whole: a change says a pass is due, not what it
// concerns.
func (w *Watch) Changes() source.Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changed {
		return source.Changes{}
	}
	w.changed = false
	return source.Changes{All: true, Why: Name}
}

// Settled reports whether the watch has its first answer (source.Settler):
// discovery answered, and each informer listed its resource (and that was
// announced as a change) or failed to; or the ledger was found not served,
// or discovery failed. Rules are not reported skipped while the caches
// fill.
func (w *Watch) Settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.cur
	switch {
	case r == nil || r.ctx.Err() != nil || !r.asked:
		return false
	case r.err != nil:
		return true
	}
	for _, k := range r.kinds {
		if !k.announced && k.w.Err() == nil {
			return false
		}
	}
	return true
}

// Ready returns nil when the ledger is watched and every informer keeps
// its resource current at now, or when the API server does not serve the
// ledger: that is no failure, and Collect says so (source.Live). Otherwise
// it says why not.
func (w *Watch) Ready(now time.Time) error {
	_, err := w.state(now)
	if errors.Is(err, source.ErrUnsupported) {
		return nil
	}
	return err
}

// state returns the informers of the ledger when each keeps its resource
// current at now, and otherwise why not: source.ErrUnsupported when the
// API server does not serve the ledger, discovery's error, that it did not
// answer yet, or each informer's NotReady, on one line as a source's
// status reads.
func (w *Watch) state(now time.Time) ([]*kind, error) {
	w.mu.Lock()
	r := w.cur
	var asked bool
	var why error
	var kinds []*kind
	if r != nil {
		asked, why, kinds = r.asked, r.err, r.kinds
	}
	w.mu.Unlock()
	switch {
	case r == nil:
		return nil, errors.New("not started")
	case r.ctx.Err() != nil:
		return nil, errors.New("not watching: the last watch ended")
	case why != nil:
		return nil, why
	case !asked:
		return nil, errors.New("not asked yet whether the API server serves " + Group)
	}
	var errs []error
	for _, k := range kinds {
		errs = append(errs, k.w.Ready(now))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, oneLine{err}
	}
	return kinds, nil
}

// oneLine is a joined error read on one line, its errors separated by
// "; ", as a source's status is.
type oneLine struct{ err error }

func (e oneLine) Error() string { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }
func (e oneLine) Unwrap() error { return e.err }

// Collect sets s.Calico to the ledger the informers hold (source.Source).
// It returns source.ErrUnsupported when the API server does not serve the
// ledger, and why the ledger is not current when it is not (Ready), leaving
// s untouched.
func (w *Watch) Collect(_ context.Context, s *snapshot.Snapshot) error {
	kinds, err := w.state(w.now())
	if err != nil {
		return err
	}
	s.Calico = ledgerOf(kinds)
	return nil
}

// ledgerOf assembles the ledger the informers hold.
func ledgerOf(kinds []*kind) *snapshot.Calico {
	c := &snapshot.Calico{}
	for _, k := range kinds {
		switch k.kind {
		case KindIPAMBlock:
			c.Blocks = informer.Values[snapshot.IPAMBlock](k.w)
		case KindIPAMHandle:
			c.Handles = informer.Values[snapshot.IPAMHandle](k.w)
		case KindBlockAffinity:
			c.Affinities = informer.Values[snapshot.BlockAffinity](k.w)
		case KindIPPool:
			c.Pools = informer.Values[snapshot.IPPool](k.w)
		case KindKubeControllers:
			for _, gc := range informer.Values[*snapshot.LeakGC](k.w) {
				if gc != nil {
					c.LeakGC = gc
				}
			}
		}
	}
	// Sorted by name, as the API server lists them (Sort). Names are
	// unique in an informer's store: an unstable sort gives the same
	// order, without the stable sort's merging, the most of a pass over
	// a handle per pod.
	slices.SortFunc(c.Blocks, func(a, b snapshot.IPAMBlock) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Handles, func(a, b snapshot.IPAMHandle) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Affinities, func(a, b snapshot.BlockAffinity) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Pools, func(a, b snapshot.IPPool) int { return strings.Compare(a.Name, b.Name) })
	return c
}

// Describe says how many objects of each kind the ledger holds
// (source.Describer): counts only, since it runs at every pass, where
// APISource's Describe, for a scan, walks every block's allocations.
func (w *Watch) Describe(s *snapshot.Snapshot) string {
	c := s.Calico
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%d blocks, %d handles, %d affinities, %d pools", len(c.Blocks), len(c.Handles), len(c.Affinities), len(c.Pools))
}
