package live

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/informer"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Watched lists the resources Informers lists and watches, as RBAC rules
// name them: the ClusterRole of anything that uses Informers must grant list
// and watch on each.
func Watched() []schema.GroupResource {
	return []schema.GroupResource{
		{Resource: kube.ResourcePods},
		{Resource: kube.ResourceServices},
		{Group: discoveryv1.GroupName, Resource: kube.ResourceEndpointSlices},
		{Resource: kube.ResourceNodes},
		{Group: networkingv1.GroupName, Resource: kube.ResourceServiceCIDRs},
	}
}

// InformerOptions tunes Informers. The zero value is usable.
type InformerOptions struct {
	// Resync is the informers' resync period; 0 for none.
	Resync time.Duration
	// Now is the clock that stamps list and watch errors and what was last
	// heard from the API server; nil means time.Now.
	Now func() time.Time
	// Silence is how long a watch may stay silent (no event, no bookmark,
	// no list) before the caches are no longer trusted. The API server
	// sends a bookmark on every watch about once a minute (and 2s before
	// the watch times out) even when nothing changes, so a longer silence
	// means the watch is stuck without having returned an error. Default
	// 2m30s: one bookmark may be late or lost.
	Silence time.Duration
	// Pulse is how often the API server must be heard from: when no watch
	// has heard from it that long, it is asked GET /readyz (Pulse), and
	// the caches are not trusted once it has been silent twice that long.
	// DefaultPulse when zero; negative never asks.
	Pulse time.Duration
	// Node, when set, watches what kube-proxy on that node watches, and
	// the node's own pods: every Service, EndpointSlice and ServiceCIDR,
	// the Node called Node (field selector metadata.name) and the pods
	// bound to it (field selector spec.nodeName). The snapshot's pods are
	// then partial (snapshot.Kube.PodsPartial): the holders of other
	// addresses are looked up when a rule needs them (Holders). Empty
	// watches every Pod and Node of the cluster.
	Node string
}

// DefaultSilence is InformerOptions.Silence when it is zero.
const DefaultSilence = informer.DefaultSilence

// Informers watches Pods (trimmed by kube.TrimPod), Services, the
// EndpointSlices kube-proxy reads (those of a Service, headless ones
// aside), Nodes (trimmed to their addresses and pod CIDRs) and ServiceCIDRs
// in every namespace, and converts what they hold into a snapshot.Kube on
// demand.
// Scoped to a node (InformerOptions.Node), it watches that Node and its
// pods only, as a node agent must. It is meant to live as long as the
// process: the one-shot scan and the long-running agent use it alike.
type Informers struct {
	watched []*informer.Informer // pods, services, endpointslices, nodes, servicecidrs
	wake    chan struct{}
	once    sync.Once
	started atomic.Bool
	now     func() time.Time
	// node is the node the pods and Nodes are scoped to; "" for none.
	node string
	// since records, for a node's informers, when each address was
	// first seen listed for its pod (snapshot.Endpoint.Since).
	since *endpointSince

	// pulse tells a hung API server from a quiet cluster; nil when
	// InformerOptions.Pulse is negative.
	pulse *Pulse

	// changes, once OnChange is called, gathers what changed.
	tracking atomic.Bool
	chMu     sync.Mutex
	changes  Changes
}

// NewInformers sets up the informers; nothing is requested from the API
// server until Start.
func NewInformers(client kubernetes.Interface, opts InformerOptions) *Informers {
	i := &Informers{wake: make(chan struct{}, 1), now: opts.Now, node: opts.Node}
	if i.now == nil {
		i.now = time.Now
	}
	idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	// The slices kube-proxy reads: those of a Service, and of a Service
	// with a cluster IP (the EndpointSlice controller labels a headless
	// Service's slices): no flow is translated to another.
	onlyServices := func(o *metav1.ListOptions) { o.LabelSelector = sliceSelector }
	// A node's informers ask for its own Node and pods only.
	onlyNode := func(o *metav1.ListOptions, field string) {
		if opts.Node != "" {
			o.FieldSelector = fields.OneTermEqualSelector(field, opts.Node).String()
		}
	}
	if opts.Node != "" {
		i.since = &endpointSince{}
	}
	if opts.Pulse >= 0 {
		i.pulse = &Pulse{Client: client, Interval: opts.Pulse, Now: opts.Now, Heard: i.heard}
	}
	core, disc, netw := client.CoreV1(), client.DiscoveryV1(), client.NetworkingV1()
	for _, w := range []struct {
		resource  string
		object    runtime.Object
		list      func(context.Context, metav1.ListOptions) (runtime.Object, error)
		watch     func(context.Context, metav1.ListOptions) (watch.Interface, error)
		indexers  cache.Indexers
		transform cache.TransformFunc
	}{
		{kube.ResourcePods, &corev1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				onlyNode(&o, "spec.nodeName")
				return core.Pods("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				onlyNode(&o, "spec.nodeName")
				return core.Pods("").Watch(ctx, o)
			},
			idx, kube.TrimPod},
		{kube.ResourceServices, &corev1.Service{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return core.Services("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Services("").Watch(ctx, o)
			},
			idx, kube.TrimMeta},
		{kube.ResourceEndpointSlices, &discoveryv1.EndpointSlice{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				onlyServices(&o)
				return disc.EndpointSlices("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				onlyServices(&o)
				return disc.EndpointSlices("").Watch(ctx, o)
			},
			idx, keepEndpoints},
		{kube.ResourceNodes, &corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				onlyNode(&o, "metadata.name")
				return core.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				onlyNode(&o, "metadata.name")
				return core.Nodes().Watch(ctx, o)
			},
			cache.Indexers{}, kube.TrimNode},
		{kube.ResourceServiceCIDRs, &networkingv1.ServiceCIDR{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return netw.ServiceCIDRs().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return netw.ServiceCIDRs().Watch(ctx, o)
			},
			cache.Indexers{}, kube.TrimMeta},
	} {
		wd := informer.New(w.resource, informer.ListWatch{List: w.list, Watch: w.watch}, w.object, informer.Options{
			Transform: w.transform, Indexers: w.indexers, Silence: opts.Silence, Now: i.now,
			Optional: w.resource == kube.ResourceServiceCIDRs,
			Empty:    &networkingv1.ServiceCIDRList{ListMeta: metav1.ListMeta{ResourceVersion: "0"}},
			Changed:  func() { signal(i.wake) },
		})
		if w.resource == kube.ResourceEndpointSlices && i.since != nil {
			_, _ = wd.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { i.since.update() },
				UpdateFunc: func(any, any) { i.since.update() },
				DeleteFunc: func(any) { i.since.update() },
			})
		}
		i.watched = append(i.watched, wd)
	}
	return i
}

// signal wakes a waiter without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// keptSlice is what the informer of EndpointSlices keeps of one: its
// endpoints, converted once as the slice arrives (kube.Endpoints), and not
// the API object: a node holds every endpoint of the cluster's Services,
// and the conversion is about half the trimmed object's size.
type keptSlice = informer.Converted[[]snapshot.Endpoint]

// keepEndpoints is the transform of the informer of EndpointSlices.
var keepEndpoints = informer.Keep(func(obj any) ([]snapshot.Endpoint, bool) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || es == nil {
		return nil, false
	}
	return kube.Endpoints(es), true
})

// sliceSelector selects the EndpointSlices kube-proxy reads: those
// labelled with their Service, but a headless Service's.
var sliceSelector = discoveryv1.LabelServiceName + ",!" + corev1.IsHeadlessService

// Node returns the node the informers are scoped to, "" for none.
func (i *Informers) Node() string { return i.node }

// Start starts the informers; they stop when ctx ends. Later calls do
// nothing.
func (i *Informers) Start(ctx context.Context) {
	i.once.Do(func() {
		for _, w := range i.watched {
			go w.Run(ctx)
		}
		if i.pulse != nil {
			i.pulse.Start(ctx)
		}
		i.started.Store(true)
	})
}

// heard is when a watch last heard from the API server.
func (i *Informers) heard() time.Time {
	var last time.Time
	for _, w := range i.watched {
		if h := w.Heard(); h.After(last) {
			last = h
		}
	}
	return last
}

// WaitForSync waits until every informer has listed its resource. It
// returns a *SyncError when ctx ends first, or at once when a resource
// fails in a way waiting will not mend (401 Unauthorized, 403 Forbidden,
// 404 Not Found); the informers keep retrying in the background either way.
func (i *Informers) WaitForSync(ctx context.Context) error {
	if !i.started.Load() {
		return errors.New("the informers were not started")
	}
	begin := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending []*informer.Informer
		permanent := false
		for _, w := range i.watched {
			if !w.HasSynced() {
				pending = append(pending, w)
				permanent = permanent || isPermanent(w.Err())
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if permanent || ctx.Err() != nil {
			e := &SyncError{Waited: time.Since(begin)}
			if !permanent {
				e.Err = ctx.Err()
			}
			for _, w := range pending {
				e.Resources = append(e.Resources, w.Resource)
				e.Errs = append(e.Errs, w.Err())
			}
			return e
		}
		select {
		case <-ctx.Done():
		case <-i.wake:
		case <-tick.C:
		}
	}
}

// isPermanent reports an error that retrying within one scan will not mend.
func isPermanent(err error) bool {
	return err != nil && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err))
}

// Changes is what changed in the cluster between two calls of TakeChanges:
// the addresses that the changed Pods and EndpointSlices mention, before
// and after the change, and whether a Service or a Node changed (then any
// flow may address another frontend).
type Changes struct {
	Addrs     map[netip.Addr]struct{}
	Frontends bool
}

// OnChange calls fn after any Pod, Service, EndpointSlice or Node is added,
// updated or deleted, and from then on gathers the Changes that
// TakeChanges returns. fn must not block.
func (i *Informers) OnChange(fn func()) error {
	i.tracking.Store(true)
	if i.pulse != nil {
		// The API server falling silent, or answering again, changes
		// what may be trusted.
		i.pulse.OnChange(fn)
	}
	for _, w := range i.watched {
		resource := w.Resource
		h := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { i.changed(resource, nil, obj); fn() },
			UpdateFunc: func(old, obj any) { i.changed(resource, old, obj); fn() },
			DeleteFunc: func(obj any) { i.changed(resource, obj, nil); fn() },
		}
		if _, err := w.AddEventHandler(h); err != nil {
			return fmt.Errorf("watching %s: %w", w.Resource, err)
		}
	}
	return nil
}

// changed records what a change of one object mentions.
func (i *Informers) changed(resource string, objs ...any) {
	i.chMu.Lock()
	defer i.chMu.Unlock()
	if i.changes.Addrs == nil {
		i.changes.Addrs = map[netip.Addr]struct{}{}
	}
	add := func(s string) {
		if a, ok := kube.ParseIP(s); ok {
			i.changes.Addrs[a.Unmap()] = struct{}{}
		}
	}
	for _, obj := range objs {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			add(o.Status.PodIP)
			for _, ip := range o.Status.PodIPs {
				add(ip.IP)
			}
		case *keptSlice:
			for _, ep := range o.V {
				i.changes.Addrs[ep.Address.Unmap()] = struct{}{}
			}
		case *corev1.Service, *corev1.Node, *networkingv1.ServiceCIDR:
			i.changes.Frontends = true
		}
	}
}

// TakeChanges returns what changed since the last call, and forgets it.
// Take the changes before the Snapshot they are to be judged against: a
// change that lands in between is then both in the snapshot and in the
// next changes, never in neither.
func (i *Informers) TakeChanges() Changes {
	i.chMu.Lock()
	defer i.chMu.Unlock()
	c := i.changes
	i.changes = Changes{}
	return c
}

// Stale returns an error when an informer has not synced, its last list or
// watch failed and no list or watch has succeeded since (reflectors retry
// at least every 30 seconds while the API server is unreachable), it
// has heard nothing from the API server for longer than the silence
// allowed (a watch stuck without an error), or the server has answered
// neither a watch nor a pulse for twice the pulse's interval (a hung
// server). Nil means the caches may be
// trusted. The error names each resource and the cause.
func (i *Informers) Stale(now time.Time) error {
	var bad []string
	for _, w := range i.watched {
		if err := w.Ready(now); err != nil {
			var nr *informer.NotReady
			if errors.As(err, &nr) {
				nr.Describe = kube.DescribeError
			}
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("informer caches not current: %s", strings.Join(bad, "; "))
	}
	if i.pulse != nil {
		if err := i.pulse.Ready(now); err != nil {
			return fmt.Errorf("informer caches not current: %w", err)
		}
	}
	return nil
}

// Pods converts the pods the informers hold (a node's, when scoped to one).
func (i *Informers) Pods() []snapshot.Pod {
	var out []snapshot.Pod
	for _, w := range i.watched {
		for _, obj := range w.Store().List() {
			if p, ok := obj.(*corev1.Pod); ok {
				out = append(out, kube.Pod(p))
			}
		}
	}
	return out
}

// HasSynced reports whether every informer has listed its resource.
func (i *Informers) HasSynced() bool {
	for _, w := range i.watched {
		if !w.HasSynced() {
			return false
		}
	}
	return true
}

// Snapshot converts what the informers hold now, sorted by namespace and
// name. Before WaitForSync succeeds it may be incomplete. A node's
// snapshots share their Endpoints until a slice changes: a reader that
// would change one copies them first.
func (i *Informers) Snapshot() *snapshot.Kube {
	k := &snapshot.Kube{}
	// A node's informers keep the endpoints they converted last, dated and
	// sorted, until a slice changes (endpointSince): every audit's
	// snapshot shares them.
	var gen uint64
	cached := false
	if i.since != nil {
		gen = i.since.generation()
		k.Endpoints, cached = i.since.cached(gen)
	}
	for _, w := range i.watched {
		for _, obj := range w.Store().List() {
			switch o := obj.(type) {
			case *corev1.Pod:
				k.Pods = append(k.Pods, kube.Pod(o))
			case *corev1.Service:
				k.Services = append(k.Services, kube.Service(o))
			case *keptSlice:
				if !cached {
					k.Endpoints = append(k.Endpoints, o.V...)
				}
			case *corev1.Node:
				k.Nodes = append(k.Nodes, kube.Node(o))
			case *networkingv1.ServiceCIDR:
				k.ServiceCIDRs = append(k.ServiceCIDRs, kube.ServiceCIDR(o))
			}
		}
		if w.Unserved() {
			k.NoServiceCIDRAPI = true
		}
	}
	if i.node != "" {
		k.PodsPartial, k.PodNode = true, i.node
	}
	if !cached {
		sort.Slice(k.Endpoints, func(a, b int) bool { return compareEndpoints(&k.Endpoints[a], &k.Endpoints[b]) < 0 })
		if i.since != nil {
			i.since.date(k.Endpoints, i.now())
			i.since.keep(gen, k.Endpoints)
		}
	}
	sort.Slice(k.Pods, func(a, b int) bool { return refLess(k.Pods[a].Ref(), k.Pods[b].Ref()) })
	sort.Slice(k.Services, func(a, b int) bool { return refLess(k.Services[a].Ref(), k.Services[b].Ref()) })
	sort.Slice(k.Nodes, func(a, b int) bool { return k.Nodes[a].Name < k.Nodes[b].Name })
	sort.Slice(k.ServiceCIDRs, func(a, b int) bool { return k.ServiceCIDRs[a].Name < k.ServiceCIDRs[b].Name })
	return k
}

func refLess(a, b snapshot.ObjectRef) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// SyncError says which resources the informers had not listed when
// WaitForSync gave up, and why.
type SyncError struct {
	// Resources are those not listed yet: "pods", "services",
	// "endpointslices", "nodes".
	Resources []string
	// Errs holds the last list or watch error of each resource, nil when
	// none was reported (the request has not been answered).
	Errs []error
	// Waited is how long the wait lasted.
	Waited time.Duration
	// Err is why the wait ended: the context's error, or nil when a
	// resource failed in a way that waiting would not mend.
	Err error
}

// Error renders "could not list/watch pods within 30s: <why>", or "could
// not list pods: <why>" for a failure that waiting would not mend.
func (e *SyncError) Error() string {
	var groups []string
	byWhy := map[string][]string{}
	for n, r := range e.Resources {
		why := "no answer from the API server"
		if e.Errs[n] != nil {
			why = kube.DescribeError(e.Errs[n], r)
		} else if e.Err == nil {
			continue // not failed yet; another resource ended the wait
		}
		if _, ok := byWhy[why]; !ok {
			groups = append(groups, why)
		}
		byWhy[why] = append(byWhy[why], r)
	}
	var parts []string
	for _, why := range groups {
		rs := strings.Join(byWhy[why], ", ")
		switch {
		case e.Err == nil:
			parts = append(parts, fmt.Sprintf("could not list %s: %s", rs, why))
		case errors.Is(e.Err, context.DeadlineExceeded):
			parts = append(parts, fmt.Sprintf("could not list/watch %s within %s: %s", rs, roundWait(e.Waited), why))
		default:
			parts = append(parts, fmt.Sprintf("stopped (%v) before %s were listed: %s", e.Err, rs, why))
		}
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns the errors behind e, so that errors.Is and errors.As see
// the context's error and the API errors.
func (e *SyncError) Unwrap() []error {
	var errs []error
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func roundWait(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
