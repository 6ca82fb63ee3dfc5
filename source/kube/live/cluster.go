package live

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/informer"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/fresh"
)

// ClusterWatched lists the resources a ClusterWatch lists and watches, as
// RBAC rules name them: every Pod and every Node.
func ClusterWatched() []schema.GroupResource {
	return []schema.GroupResource{{Resource: kube.ResourcePods}, {Resource: kube.ResourceNodes}}
}

// ClusterWatch is every Pod and every Node of the cluster as the
// leader-elected controller keeps them (source.Live): one informer of each,
// the pods also in an index of who holds each pod IP, kept per event
// (snapshot.PodIndex), so that a pass over a large cluster neither copies
// the pods nor indexes them again. Collect lends the index's records
// (source.Lender): pod events wait until Return. It is started again each
// time the controller leads, with empty caches.
type ClusterWatch struct {
	// Client lists and watches the Pods and Nodes, and reads afresh what
	// a re-check names (fresh.Quorum).
	Client kubernetes.Interface
	// KeepAnnotations are the prefixes of the pod annotations the
	// informer keeps for OnPod's handlers (the gossip annotations); none
	// is kept otherwise.
	KeepAnnotations []string
	// Pods and Nodes, when set, list and watch in place of Client (tests,
	// benchmarks).
	Pods, Nodes *informer.ListWatch
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// APIClock, when set, says how far the API server's clock runs from
	// ours, as measured from its answers (skew.Meter): a snapshot's
	// Kube.APIClock. Unset, it is not measured, and no proof compares the
	// objects' times with ours.
	APIClock func() snapshot.Clock

	mu      sync.Mutex
	term    *clusterTerm
	notify  func()
	changed bool
	onPod   []func(p *corev1.Pod, deleted bool)
	// families is what the pods of the last Collect show of the pod
	// address families, for a re-check's quorum reads.
	families fresh.Families

	// lent is the term whose index the last Collect lent, until Return;
	// only the program's pass touches it.
	lent *clusterTerm
}

// clusterTerm is what one Start watches, until its ctx ends.
type clusterTerm struct {
	ctx         context.Context
	pods, nodes *informer.Informer
	// pulse tells a hung API server from a quiet cluster; nil when the
	// informers are given (no client to ask).
	pulse *Pulse
	// podsHandled says when the index and OnPod's handlers have been
	// handed every pod of the first list.
	podsHandled cache.ResourceEventHandlerRegistration

	// handlers are OnPod's; poke says a change came.
	handlers []func(*corev1.Pod, bool)
	poke     func()

	// mu guards idx: pod events write it; a pass holds it from Collect
	// to Return.
	mu  sync.Mutex
	idx *snapshot.PodIndex
}

// setPod records a pod added or changed, as the informer keeps it.
func (t *clusterTerm) setPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	sp := kube.Pod(p)
	t.mu.Lock()
	t.idx.Set(&sp)
	t.mu.Unlock()
	for _, fn := range t.handlers {
		fn(p, false)
	}
	t.poke()
}

// deletePod forgets a pod deleted.
func (t *clusterTerm) deletePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	t.idx.Delete(string(p.UID))
	t.mu.Unlock()
	for _, fn := range t.handlers {
		fn(p, true)
	}
	t.poke()
}

// Name returns "kube".
func (w *ClusterWatch) Name() string { return kube.Name }

func (w *ClusterWatch) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// OnChange sets the function called after each change (source.Live).
func (w *ClusterWatch) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = fn
}

// OnPod registers fn, called with each pod as the informer keeps it (with
// the annotations KeepAnnotations names) once it is added or changed, and
// with deleted true once it is gone. Register before Start.
func (w *ClusterWatch) OnPod(fn func(p *corev1.Pod, deleted bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onPod = append(w.onPod, fn)
}

// poke records a change and says so.
func (w *ClusterWatch) poke() {
	w.mu.Lock()
	w.changed = true
	fn := w.notify
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// current returns the term being watched, nil before Start.
func (w *ClusterWatch) current() *clusterTerm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.term
}

// Start starts the informers of Pods and Nodes, afresh, until ctx ends
// (source.Live). It refuses while the last Start's ctx has not ended.
func (w *ClusterWatch) Start(ctx context.Context) error {
	if w.Client == nil && (w.Pods == nil || w.Nodes == nil) {
		return errors.New("kube: no client to watch the cluster with")
	}
	w.mu.Lock()
	if w.term != nil && w.term.ctx.Err() == nil {
		w.mu.Unlock()
		return errors.New("kube: the cluster is being watched already")
	}
	handlers := slices.Clone(w.onPod)
	w.mu.Unlock()

	t := &clusterTerm{ctx: ctx, idx: snapshot.NewPodIndex()}
	pods, nodes := w.Pods, w.Nodes
	if pods == nil {
		core := w.Client.CoreV1()
		pods = &informer.ListWatch{
			List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Pods("").List(ctx, o)
			},
			Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Pods("").Watch(ctx, o)
			},
		}
	}
	if nodes == nil {
		core := w.Client.CoreV1()
		nodes = &informer.ListWatch{
			List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Nodes().List(ctx, o)
			},
			Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			},
		}
	}
	t.pods = informer.New(kube.ResourcePods, *pods, &corev1.Pod{}, informer.Options{
		Transform: kube.TrimPodKeeping(w.KeepAnnotations...), Now: w.Now, Changed: w.poke})
	t.nodes = informer.New(kube.ResourceNodes, *nodes, &corev1.Node{}, informer.Options{
		Transform: informer.Keep(func(obj any) (snapshot.Node, bool) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return snapshot.Node{}, false
			}
			return kube.Node(n), true
		}), Now: w.Now, Changed: w.poke})
	t.handlers, t.poke = handlers, w.poke
	var err error
	if t.podsHandled, err = t.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.setPod,
		UpdateFunc: func(_, obj any) { t.setPod(obj) },
		DeleteFunc: t.deletePod,
	}); err != nil {
		return fmt.Errorf("kube: watching pods: %w", err)
	}
	changed := func(any) { w.poke() }
	if _, err := t.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: changed,
	}); err != nil {
		return fmt.Errorf("kube: watching nodes: %w", err)
	}
	if w.Client != nil {
		t.pulse = &Pulse{Client: w.Client, Now: w.Now, Heard: func() time.Time {
			p, n := t.pods.Heard(), t.nodes.Heard()
			if n.After(p) {
				return n
			}
			return p
		}}
		t.pulse.OnChange(w.poke)
		t.pulse.Start(ctx)
	}
	w.mu.Lock()
	w.term = t
	w.mu.Unlock()
	go t.pods.Run(ctx)
	go t.nodes.Run(ctx)
	// A resource listed empty has no event to announce it.
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), t.podsHandled.HasSynced, t.nodes.HasSynced) {
			w.poke()
		}
	}()
	return nil
}

// Ready returns nil when both informers have listed their resource and
// keep it current (source.Live).
func (w *ClusterWatch) Ready(now time.Time) error {
	t := w.current()
	if t == nil {
		return errors.New("kube: not watching the cluster")
	}
	return t.ready(now)
}

// ready is Ready for one term: both informers ready, the API server heard
// from within the pulse's bound, and every pod listed in the index.
func (t *clusterTerm) ready(now time.Time) error {
	err := errors.Join(t.pods.Ready(now), t.nodes.Ready(now))
	if t.pulse != nil && err == nil {
		err = t.pulse.Ready(now)
	}
	if err == nil && !t.podsHandled.HasSynced() {
		err = errors.New("pods: listed, not all indexed yet")
	}
	return err
}

// Settled reports whether both informers have listed their resource, and
// every pod listed is in the index (source.Settler): their failures, if
// any, are then reported by Ready.
func (w *ClusterWatch) Settled() bool {
	t := w.current()
	return t != nil && t.podsHandled.HasSynced() && t.nodes.HasSynced()
}

// Listed reports whether every pod has been listed once and handed to the
// index and to OnPod's handlers.
func (w *ClusterWatch) Listed() bool {
	t := w.current()
	return t != nil && t.podsHandled.HasSynced()
}

// Reporting returns how many unfinished pods report a now, hostNetwork
// pods included (snapshot.PodIndex.Reporting).
func (w *ClusterWatch) Reporting(a netip.Addr) int {
	t := w.current()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.idx.Reporting(a)
}

// Changes returns whether anything changed since the last call
// (source.Live): a cluster-wide pass judges every address again.
func (w *ClusterWatch) Changes() source.Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changed {
		return source.Changes{}
	}
	w.changed = false
	return source.Changes{All: true, Why: "cluster"}
}

// Collect sets s.Kube to every Pod and Node the informers hold
// (source.Source), the pods being the index's own records: they stay as
// they are, and pod events wait, until Return.
func (w *ClusterWatch) Collect(_ context.Context, s *snapshot.Snapshot) error {
	t := w.current()
	if t == nil {
		return errors.New("not watching the cluster")
	}
	if err := t.ready(s.Taken); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	nodes := informer.Values[snapshot.Node](t.nodes)
	t.mu.Lock()
	w.lent = t
	s.Kube = &snapshot.Kube{Pods: t.idx.Pods(), Nodes: nodes, Index: t.idx, APIClock: w.apiClock()}
	fam := fresh.FamiliesOf(s.Kube.Pods)
	w.mu.Lock()
	w.families = fam
	w.mu.Unlock()
	return nil
}

// apiClock is the API server's clock as measured now.
func (w *ClusterWatch) apiClock() snapshot.Clock {
	if w.APIClock == nil {
		return snapshot.Clock{Name: "the API server's"}
	}
	return w.APIClock()
}

// Return ends the loan of the pods the last Collect lent (source.Lender).
func (w *ClusterWatch) Return() {
	if t := w.lent; t != nil {
		w.lent = nil
		t.mu.Unlock()
	}
}

// Describe says how many Pods and Nodes the informers hold.
func (w *ClusterWatch) Describe(s *snapshot.Snapshot) string {
	if s.Kube == nil {
		return ""
	}
	return text.Count(len(s.Kube.Pods), "pod", "pods") + ", " + text.Count(len(s.Kube.Nodes), "node", "nodes")
}

// Fresh reads with quorum reads the cluster objects q names into s.Kube,
// for a remedy's last re-check (source.Fresher); it leaves s as it is when
// q names none.
func (w *ClusterWatch) Fresh(ctx context.Context, q snapshot.Query, s *snapshot.Snapshot) error {
	w.mu.Lock()
	fam := w.families
	w.mu.Unlock()
	if err := fresh.Collect(ctx, w.Client, q, fam, s); err != nil {
		return err
	}
	if s.Kube != nil {
		// Measured after the reads: their answers count.
		s.Kube.APIClock = w.apiClock()
	}
	return nil
}
