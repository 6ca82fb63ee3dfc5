package whereabouts

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/informer"
)

// Name is the source's stable name.
const Name = "whereabouts"

// IPPools is the resource the source lists and watches: the controller's
// ClusterRole must grant list and watch on it.
var IPPools = schema.GroupVersionResource{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Resource: "ippools"}

// Watch keeps Whereabouts' IPPools as the controller reads them
// (source.Live): one informer, each pool converted once per event.
type Watch struct {
	Dynamic dynamic.Interface
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	pools   *informer.Informer
	notify  func()
	changed bool
}

// Name returns Name.
func (w *Watch) Name() string { return Name }

// OnChange sets the function called after each change (source.Live).
func (w *Watch) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = fn
}

func (w *Watch) poke() {
	w.mu.Lock()
	w.changed = true
	fn := w.notify
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (w *Watch) current() *informer.Informer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pools
}

// Start starts the informer afresh until ctx ends (source.Live): the
// controller starts its sources each time it leads.
func (w *Watch) Start(ctx context.Context) error {
	res := w.Dynamic.Resource(IPPools)
	i := informer.New(IPPools.Resource+"."+IPPools.Group, informer.ListWatch{
		List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, o)
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, o)
		},
	}, &unstructured.Unstructured{}, informer.Options{
		Transform: informer.Keep(convert),
		// Not served where Whereabouts is not installed: a ledger that
		// does not exist here, not a failure.
		Optional: true,
		Empty:    &unstructured.UnstructuredList{Object: map[string]any{"metadata": map[string]any{"resourceVersion": "0"}}},
		Now:      w.Now,
		Changed:  w.poke,
	})
	if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.poke() }, UpdateFunc: func(any, any) { w.poke() }, DeleteFunc: func(any) { w.poke() },
	}); err != nil {
		return err
	}
	w.mu.Lock()
	w.pools = i
	w.mu.Unlock()
	go i.Run(ctx)
	// A resource listed empty has no event to announce it.
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
			w.poke()
		}
	}()
	return nil
}

// Ready returns nil when the pools are listed and kept current.
func (w *Watch) Ready(now time.Time) error {
	i := w.current()
	if i == nil {
		return fmt.Errorf("%s: not watching", Name)
	}
	return i.Ready(now)
}

// Settled reports whether the pools were listed or failed (source.Settler).
func (w *Watch) Settled() bool {
	i := w.current()
	return i != nil && (i.HasSynced() || i.Err() != nil)
}

// Changes says whether anything changed since the last call: a
// cluster-wide pass judges everything again.
func (w *Watch) Changes() source.Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changed {
		return source.Changes{}
	}
	w.changed = false
	return source.Changes{All: true, Why: Name}
}

// Collect attaches the pools the informer holds to s.
func (w *Watch) Collect(_ context.Context, s *snapshot.Snapshot) error {
	i := w.current()
	switch {
	case i == nil:
		return fmt.Errorf("not watching")
	case i.Unserved():
		return source.Unsupported("the API server serves no %s: Whereabouts is not installed", IPPools.GroupResource())
	}
	if err := i.Ready(s.Taken); err != nil {
		return err
	}
	pools := informer.Values[Pool](i)
	sort.Slice(pools, func(a, b int) bool { return pools[a].Name < pools[b].Name })
	snapshot.Attach(s, Name, &Pools{Pools: pools})
	return nil
}

// Describe says what a complete collection read.
func (w *Watch) Describe(s *snapshot.Snapshot) string {
	if p := snapshot.LedgerOf[Pools](s, Name); p != nil {
		return text.Count(len(p.Pools), "pool", "pools")
	}
	return ""
}

// convert keeps of an IPPool what the rules read. The allocations are
// keyed by the address's offset in the range, in decimal; an offset or a
// range that does not parse leaves the allocation out and says so in the
// pool's name, never a guess.
func convert(obj any) (Pool, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return Pool{}, false
	}
	p := Pool{Name: u.GetName()}
	rng, _, _ := unstructured.NestedString(u.Object, "spec", "range")
	prefix, err := netip.ParsePrefix(rng)
	if err != nil {
		return p, true
	}
	p.Range = prefix.Masked()
	allocs, _, _ := unstructured.NestedMap(u.Object, "spec", "allocations")
	base := new(big.Int).SetBytes(p.Range.Addr().AsSlice())
	for off, v := range allocs {
		n, err := strconv.ParseUint(off, 10, 64)
		a, ok := v.(map[string]any)
		if err != nil || !ok {
			continue
		}
		b := new(big.Int).Add(base, new(big.Int).SetUint64(n)).FillBytes(make([]byte, len(p.Range.Addr().AsSlice())))
		ip, _ := netip.AddrFromSlice(b)
		if !p.Range.Contains(ip) {
			continue
		}
		id, _ := a["id"].(string)
		ref, _ := a["podref"].(string)
		p.Allocations = append(p.Allocations, Allocation{IP: ip, ContainerID: id, PodRef: ref})
	}
	sort.Slice(p.Allocations, func(i, j int) bool { return p.Allocations[i].IP.Less(p.Allocations[j].IP) })
	return p, true
}
