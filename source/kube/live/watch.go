package live

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/fresh"
)

// Watch is the cluster's objects as a long-running program keeps them
// (source.Live): informers (scoped to a node for the agent), the pods
// elsewhere that the rules ask about looked up by address (Holders), and
// quorum reads for a remedy's last re-check (source.Fresher).
type Watch struct {
	// Informers hold the cluster; Start starts them.
	Informers *Informers
	// Holders looks up the pods at the addresses the rules ask about,
	// when the Informers are scoped to a node. An answer that runs out is
	// a change of its address: the rules judge it again.
	Holders *Holders
	// Client reads afresh what a re-check names (fresh.Quorum); nil
	// refuses every re-check.
	Client kubernetes.Interface
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	api APISource

	mu      sync.Mutex
	started bool
	notify  func()
	// looked are the addresses the last pass looked up; expired those of
	// them whose answers ran out since.
	looked  []netip.Addr
	expired []netip.Addr
	timer   *time.Timer
}

// Name returns "kube".
func (w *Watch) Name() string { return kube.Name }

func (w *Watch) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

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

// Start starts the informers (source.Live).
func (w *Watch) Start(ctx context.Context) error {
	if w.Informers == nil {
		return errors.New("kube: no informers to watch the cluster with")
	}
	w.mu.Lock()
	again := w.started
	w.started = true
	w.mu.Unlock()
	if again {
		return errors.New("kube: started already: a node's informers watch once, for the life of the process")
	}
	if err := w.Informers.OnChange(w.poke); err != nil {
		return err
	}
	w.Informers.Start(ctx)
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.timer != nil {
			w.timer.Stop()
		}
	})
	return nil
}

// Ready returns nil when every informer has listed its resource and keeps
// it current (source.Live): its last list or watch did not fail,
// something was heard on its watch within the silence allowed.
func (w *Watch) Ready(now time.Time) error { return w.Informers.Stale(now) }

// Changes returns what changed since the last call (source.Live): the
// addresses the changed Pods and EndpointSlices mention, every address
// when a Service, Node or ServiceCIDR changed, and the addresses whose
// answer of who holds them ran out. The answers for the addresses a change
// mentions are dropped: who holds them is asked again.
func (w *Watch) Changes() source.Changes {
	ic := w.Informers.TakeChanges()
	c := source.Changes{All: ic.Frontends}
	if c.All {
		c.Why = "cluster"
	}
	for a := range ic.Addrs {
		c.Add(a, "cluster")
		if w.Holders != nil {
			w.Holders.Forget(a)
		}
	}
	w.mu.Lock()
	expired := w.expired
	w.expired = nil
	w.mu.Unlock()
	for _, a := range expired {
		c.Add(a, "holders")
	}
	return c
}

// Narrow records the rules that read the cluster objects
// (source.Narrower).
func (w *Watch) Narrow(readers []any) { w.api.Narrow(readers) }

// Collect sets s.Kube to what the informers hold (source.Source).
func (w *Watch) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	w.api.Informers, w.api.Holders = w.Informers, w.Holders
	return w.api.Collect(ctx, s)
}

// Resolve looks up the pods at the addresses the rules ask about
// (source.Resolver), and arms the change that comes when the first of
// those answers runs out.
func (w *Watch) Resolve(ctx context.Context, s *snapshot.Snapshot) error {
	if err := w.api.Resolve(ctx, s); err != nil {
		return err
	}
	if w.Holders == nil || s.Kube == nil {
		return nil
	}
	looked := make([]netip.Addr, 0, len(s.Kube.Looked))
	for a := range s.Kube.Looked {
		looked = append(looked, a)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.looked = looked
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if due, ok := w.Holders.Due(looked...); ok {
		w.timer = time.AfterFunc(max(due.Sub(w.now()), time.Millisecond), w.expire)
	}
	return nil
}

// expire records the looked-up addresses whose answers ran out as changed.
func (w *Watch) expire() {
	now := w.now()
	w.mu.Lock()
	for _, a := range w.looked {
		if due, ok := w.Holders.Due(a); ok && !due.After(now) {
			w.expired = append(w.expired, a)
		}
	}
	w.mu.Unlock()
	w.poke()
}

// Progress says what the lookup of holders under way has done, ""
// when none runs (source.Progresser).
func (w *Watch) Progress() string {
	if w.Holders == nil {
		return ""
	}
	return w.Holders.Progress()
}

// Describe says what the informers hold and what was looked up.
func (w *Watch) Describe(s *snapshot.Snapshot) string { return kube.Describe(s.Kube) }

// Fresh reads with quorum reads what q names into s.Kube, for a remedy's
// last re-check (source.Fresher).
func (w *Watch) Fresh(ctx context.Context, q snapshot.Query, s *snapshot.Snapshot) error {
	var fam fresh.Families
	if w.Informers != nil {
		fam = fresh.FamiliesOf(w.Informers.Pods())
	}
	return fresh.Collect(ctx, w.Client, q, fam, s)
}
