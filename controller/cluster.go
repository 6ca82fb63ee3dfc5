package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/informer"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Watched lists the resources the leader lists and watches, as RBAC rules
// name them: Pods and Nodes, and Calico's ledger when the API server
// serves it. The controller's ClusterRole must grant list and watch on
// each, and nothing more of them.
func Watched() []schema.GroupResource {
	return append([]schema.GroupResource{{Resource: "pods"}, {Resource: "nodes"}}, calico.Listed()...)
}

// Sources are the sources the leader reads: every Pod and Node (kube),
// Calico's IPAM ledger (calico), and the member lists of the gossip
// clusters whose pods are annotated ghostwatch.io/gossip (gossip).
var Sources = []string{kube.Name, calico.Name, sourcegossip.Name}

// Rules splits the cluster rules of rules into those the controller runs,
// whose sources it reads (for a rule with Ledgers: its Sources and one of
// its cluster ledgers), and the others, which need a source it does not
// read; ghostwatch scan runs those.
func Rules(rules []rule.Rule) (runs, others []rule.Rule) {
	for _, r := range rule.InScope(rules, rule.ScopeCluster) {
		info := r.Info()
		ok := !slices.ContainsFunc(info.Sources, func(s string) bool { return !slices.Contains(Sources, s) })
		if len(info.Ledgers) > 0 {
			ok = ok && slices.ContainsFunc(info.Ledgers, func(l rule.Ledger) bool {
				return l.Scope == rule.ScopeCluster && slices.Contains(Sources, l.Source)
			})
		}
		if ok {
			runs = append(runs, r)
		} else {
			others = append(others, r)
		}
	}
	return runs, others
}

// cluster is what the leader knows of the cluster: every Pod, in the index
// of pod IPs kept per event; every Node; and Calico's ledger, each object
// converted once per event. A pass assembles a snapshot of it.
type cluster struct {
	// mu guards idx: pod events write it, a pass reads it.
	mu  sync.Mutex
	idx *snapshot.PodIndex

	pods, nodes *informer.Informer

	// calicoMu guards the Calico informers and why there are none.
	calicoMu sync.Mutex
	calico   []calicoKind
	// calicoErr is why the ledger is not watched: source.ErrUnsupported
	// when the API server does not serve it, another error when
	// discovery failed; nil once it is watched.
	calicoErr error

	// gossipMu guards gossip: the running pods annotated as gossip
	// members, by UID.
	gossipMu sync.Mutex
	gossip   map[string]gossipPod
	// reader reads the gossip clusters' views; nil reads none.
	reader *gossipReader

	changed func()
	// run starts an informer until the leader stops.
	run func(*informer.Informer)
	now func() time.Time
}

// calicoKind is the informer of one kind of Calico's ledger.
type calicoKind struct {
	kind string
	w    *informer.Informer
}

// newCluster sets up the informers of Pods and Nodes; run starts each
// informer, changed is called after every change of what they hold; now is
// the clock.
func newCluster(client kubernetes.Interface, changed func(), run func(*informer.Informer), now func() time.Time) *cluster {
	core := client.CoreV1()
	return newClusterOf(informer.ListWatch{
		List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Pods("").List(ctx, o)
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Pods("").Watch(ctx, o)
		},
	}, informer.ListWatch{
		List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Nodes().List(ctx, o)
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Nodes().Watch(ctx, o)
		},
	}, changed, run, now)
}

// trimPod is the pods informer's transform: what the rules read of a pod,
// and the annotations that name its gossip agent, which the leader reads
// (gossip.go).
var trimPod = kube.TrimPodKeeping(sourcegossip.AnnotationPrefix)

// newClusterOf is newCluster with the lists and watches of Pods and Nodes
// given.
func newClusterOf(pods, nodes informer.ListWatch, changed func(), run func(*informer.Informer), now func() time.Time) *cluster {
	c := &cluster{idx: snapshot.NewPodIndex(), changed: changed, run: run, now: now}
	c.pods = informer.New("pods", pods, &corev1.Pod{}, informer.Options{Transform: trimPod, Now: now, Changed: changed})
	c.nodes = informer.New("nodes", nodes, &corev1.Node{}, informer.Options{Transform: informer.Keep(func(obj any) (snapshot.Node, bool) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return snapshot.Node{}, false
		}
		return kube.Node(n), true
	}), Now: now, Changed: changed})
	return c
}

// start registers the event handlers and starts the informers of Pods and
// Nodes.
func (c *cluster) start() error {
	if err := c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.setPod,
		UpdateFunc: func(_, obj any) { c.setPod(obj) },
		DeleteFunc: c.deletePod,
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	if err := onChange(c.nodes, c.changed); err != nil {
		return err
	}
	c.run(c.pods)
	c.run(c.nodes)
	return nil
}

// setPod records a Pod added or changed, as the informer keeps it.
func (c *cluster) setPod(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		sp := kube.Pod(p)
		c.mu.Lock()
		c.idx.Set(&sp)
		c.mu.Unlock()
		c.setGossipPod(p)
		c.changed()
	}
}

// deletePod forgets a Pod deleted.
func (c *cluster) deletePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		c.mu.Lock()
		c.idx.Delete(string(p.UID))
		c.mu.Unlock()
		c.deleteGossipPod(string(p.UID))
		c.changed()
	}
}

// onChange calls changed at every change of what w holds.
func onChange(w *informer.Informer, changed func()) error {
	if err := w.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(_, _ any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return fmt.Errorf("watching %s: %w", w.Resource, err)
	}
	return nil
}

// settled reports whether Pods and Nodes are listed, the gossip clusters
// read once, and Calico's ledger listed, failing, or found not to be
// served.
func (c *cluster) settled() bool {
	if !c.pods.HasSynced() || !c.nodes.HasSynced() {
		return false
	}
	if c.reader != nil && !c.reader.hasRead() {
		return false
	}
	c.calicoMu.Lock()
	kinds, why := c.calico, c.calicoErr
	c.calicoMu.Unlock()
	if len(kinds) == 0 {
		return why != nil
	}
	for _, k := range kinds {
		if !k.w.HasSynced() && k.w.Err() == nil {
			return false
		}
	}
	return true
}

// discoverCalico asks discovery whether the API server serves Calico's
// ledger and, when it does, starts its informers. It reports whether it
// watches the ledger now; when not, the snapshot says why.
func (c *cluster) discoverCalico(d discovery.DiscoveryInterface, dyn dynamic.Interface) bool {
	rs, err := calico.Served(d)
	if err == nil {
		if err = c.watchCalico(rs, dyn); err == nil {
			return true
		}
	}
	c.calicoMu.Lock()
	c.calicoErr = err
	c.calicoMu.Unlock()
	c.changed()
	return false
}

// watchCalico starts an informer of each of rs.
func (c *cluster) watchCalico(rs []calico.Resource, dyn dynamic.Interface) error {
	var kinds []calicoKind
	for _, r := range rs {
		convert, ok := calicoConverts[r.Kind]
		if !ok {
			return fmt.Errorf("no conversion of Calico's %s", r.Kind)
		}
		res := dyn.Resource(r.GroupVersionResource)
		w := informer.New(r.Resource+"."+r.Group, informer.ListWatch{
			List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return res.List(ctx, o)
			},
			Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return res.Watch(ctx, o)
			},
		}, &unstructured.Unstructured{}, informer.Options{Transform: convert, Now: c.now, Changed: c.changed})
		if err := onChange(w, c.changed); err != nil {
			return err
		}
		kinds = append(kinds, calicoKind{kind: r.Kind, w: w})
	}
	c.calicoMu.Lock()
	c.calico, c.calicoErr = kinds, nil
	c.calicoMu.Unlock()
	for _, k := range kinds {
		c.run(k.w)
	}
	c.changed()
	return nil
}

// calicoConverts keeps each kind of Calico's ledger converted by
// source/calico's functions, as a scan reads it.
var calicoConverts = map[string]cache.TransformFunc{
	calico.KindIPAMBlock:     informer.Keep(fromUnstructured(calico.Block)),
	calico.KindIPAMHandle:    informer.Keep(fromUnstructured(calico.Handle)),
	calico.KindBlockAffinity: informer.Keep(fromUnstructured(calico.Affinity)),
	calico.KindIPPool:        informer.Keep(fromUnstructured(calico.Pool)),
	// kube-controllers reads only the configuration named "default":
	// the others are kept as nil.
	calico.KindKubeControllers: informer.Keep(fromUnstructured(func(obj map[string]any) *snapshot.LeakGC {
		if gc, ok := calico.LeakGC(obj); ok {
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

// snapshot assembles what the leader knows into a snapshot taken at now.
// Its pods are the index's own records: c.mu must be held until the rules
// are done with it.
func (c *cluster) snapshot(now time.Time) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Taken: now}
	start := time.Now()
	st := snapshot.SourceStatus{Name: kube.Name, Status: snapshot.StatusOK}
	if err := errors.Join(c.pods.Ready(now), c.nodes.Ready(now)); err != nil {
		st.Status, st.Detail = snapshot.StatusError, oneLine(err)
	} else {
		pods := c.idx.Pods()
		nodes := informer.Values[snapshot.Node](c.nodes)
		s.Kube = &snapshot.Kube{Pods: pods, Nodes: nodes, Index: c.idx}
		st.Detail = fmt.Sprintf("%d pods, %d nodes", len(pods), len(nodes))
	}
	st.Duration = time.Since(start)
	s.Sources = append(s.Sources, st)

	start = time.Now()
	st = snapshot.SourceStatus{Name: calico.Name, Status: snapshot.StatusOK}
	c.calicoMu.Lock()
	kinds, why := c.calico, c.calicoErr
	c.calicoMu.Unlock()
	var errs []error
	for _, k := range kinds {
		errs = append(errs, k.w.Ready(now))
	}
	switch err := errors.Join(errs...); {
	case errors.Is(why, source.ErrUnsupported):
		st.Status, st.Detail = snapshot.StatusUnsupported, why.Error()
	case why != nil:
		st.Status, st.Detail = snapshot.StatusError, why.Error()
	case len(kinds) == 0:
		st.Status, st.Detail = snapshot.StatusError, "not asked yet whether the API server serves "+calico.Group
	case err != nil:
		st.Status, st.Detail = snapshot.StatusError, oneLine(err)
	default:
		s.Calico = calicoLedger(kinds)
		st.Detail = fmt.Sprintf("%d blocks, %d handles, %d affinities, %d pools", len(s.Calico.Blocks), len(s.Calico.Handles), len(s.Calico.Affinities), len(s.Calico.Pools))
	}
	st.Duration = time.Since(start)
	s.Sources = append(s.Sources, st)

	if c.reader != nil {
		start = time.Now()
		st, s.Gossip = c.reader.snapshot()
		st.Duration = time.Since(start)
		s.Sources = append(s.Sources, st)
	}
	return s
}

// calicoLedger assembles the ledger the informers hold.
func calicoLedger(kinds []calicoKind) *snapshot.Calico {
	c := &snapshot.Calico{}
	for _, k := range kinds {
		switch k.kind {
		case calico.KindIPAMBlock:
			c.Blocks = informer.Values[snapshot.IPAMBlock](k.w)
		case calico.KindIPAMHandle:
			c.Handles = informer.Values[snapshot.IPAMHandle](k.w)
		case calico.KindBlockAffinity:
			c.Affinities = informer.Values[snapshot.BlockAffinity](k.w)
		case calico.KindIPPool:
			c.Pools = informer.Values[snapshot.IPPool](k.w)
		case calico.KindKubeControllers:
			for _, gc := range informer.Values[*snapshot.LeakGC](k.w) {
				if gc != nil {
					c.LeakGC = gc
				}
			}
		}
	}
	// Sorted by name, as the API server lists them (calico.Sort). Names
	// are unique in an informer's store: an unstable sort gives the same
	// order, without the stable sort's merging, the most of a pass over
	// a handle per pod.
	slices.SortFunc(c.Blocks, func(a, b snapshot.IPAMBlock) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Handles, func(a, b snapshot.IPAMHandle) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Affinities, func(a, b snapshot.BlockAffinity) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Pools, func(a, b snapshot.IPPool) int { return strings.Compare(a.Name, b.Name) })
	return c
}

// oneLine joins a joined error's lines with "; ".
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
