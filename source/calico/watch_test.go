package calico

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/informer"
)

// waitFor polls cond until it holds, and fails the test when it does not
// within poll.Patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(poll.Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// plurals are the ledger's five resources.
func plurals() []string {
	var out []string
	for _, r := range resources {
		out = append(out, r.plural)
	}
	return out
}

// servingDiscovery is discovery of an API server that serves the ledger's
// resources, and that a test can change: answer err instead (Calico not
// installed yet, discovery failing), or hold every answer until released.
// It counts the questions.
type servingDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu   sync.Mutex
	err  error
	held chan struct{}
	asks int
}

func newServingDiscovery(t *testing.T) *servingDiscovery {
	d := &servingDiscovery{FakeDiscovery: calicoDiscovery(plurals()...)}
	d.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		d.mu.Lock()
		d.asks++
		held, err := d.held, d.err
		d.mu.Unlock()
		if held != nil {
			<-held
		}
		return err != nil, nil, err
	})
	t.Cleanup(d.release)
	return d
}

// answer makes discovery answer err from now on; nil serves the ledger.
func (d *servingDiscovery) answer(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// hold makes discovery's answers wait for release.
func (d *servingDiscovery) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = make(chan struct{})
}

func (d *servingDiscovery) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held != nil {
		close(d.held)
		d.held = nil
	}
}

func (d *servingDiscovery) asked() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asks
}

// notInstalled is what discovery answers about crd.projectcalico.org/v1
// where Calico is not installed.
var notInstalled = apierrors.NewNotFound(schema.GroupResource{}, "")

// start starts w until the test ends, and returns the function that ends
// it sooner.
func start(t *testing.T, w *Watch) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return cancel
}

// blockObject is a /26 whose ordinal 5 is allocated to pod default/web-0,
// booked under bookedNode, with the other ordinals free.
func blockObject(name, cidr, bookedNode string) *unstructured.Unstructured {
	allocs := make([]any, 64)
	var free []any
	for i := range allocs {
		if i != 5 {
			free = append(free, int64(i))
		}
	}
	allocs[5] = int64(0)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion, "kind": KindIPAMBlock,
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"cidr": cidr, "affinity": "host:node-a", "strictAffinity": false, "deleted": false,
			"allocations": allocs, "unallocated": free,
			"attributes": []any{map[string]any{
				"handle_id": "k8s-pod-network.c0ffee",
				"secondary": map[string]any{"node": bookedNode, "namespace": "default", "pod": "web-0", "timestamp": stampWritten},
			}},
			"sequenceNumber": int64(7), "sequenceNumberForAllocation": map[string]any{"5": int64(6)},
		},
	}}
}

func kubeControllers(name, grace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion, "kind": KindKubeControllers, "metadata": map[string]any{"name": name},
		"spec": map[string]any{"controllers": map[string]any{"node": map[string]any{"leakGracePeriod": grace}}},
	}}
}

func collectWatch(w *Watch) (*snapshot.Snapshot, error) {
	s := &snapshot.Snapshot{}
	err := w.Collect(context.Background(), s)
	return s, err
}

func blockNames(c *snapshot.Calico) []string {
	var out []string
	for _, b := range c.Blocks {
		out = append(out, b.Name)
	}
	return out
}

// The watch reads the same ledger as a scan (seed 002's, the collector's
// configuration from the "default" one only), each object converted by
// the same functions when its event comes, sorted by name; every change
// is announced.
func TestWatchReadsTheLedger(t *testing.T) {
	var objs []runtime.Object
	for _, f := range []string{"ipamblocks.json", "ipamhandles.json", "blockaffinities.json"} {
		objs = append(objs, unstructuredObjects(t, filepath.Join(seed002, f))...)
	}
	objs = append(objs, kubeControllers("other", "1h"), kubeControllers("default", "5s"))
	dyn := fakeClient(objs...)
	var calls atomic.Int64
	w := &Watch{Discovery: calicoDiscovery(plurals()...), Dynamic: dyn}
	w.OnChange(func() { calls.Add(1) })
	if w.Name() != "calico" {
		t.Errorf("Name() = %q", w.Name())
	}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	if err := w.Ready(time.Now()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	s, err := collectWatch(w)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger(t, seed002, true)
	want.LeakGC = &snapshot.LeakGC{GracePeriod: 5e9, From: "spec.controllers.node.leakGracePeriod"}
	// A kind listed empty reads as an empty list (informer.Values), not
	// as nil.
	want.Pools = []snapshot.IPPool{}
	if !reflect.DeepEqual(s.Calico, want) {
		t.Errorf("got  %+v\nwant %+v", s.Calico, want)
	}
	if d, want := w.Describe(s), "3 blocks, 3 handles, 3 affinities, 0 pools"; d != want {
		t.Errorf("Describe = %q, want %q", d, want)
	}
	if c := w.Changes(); !c.All || c.Why != "calico" {
		t.Errorf("Changes = %+v, want every address, because of calico", c)
	}
	waitFor(t, "OnChange called", func() bool { return calls.Load() > 0 })

	ctx := context.Background()
	blocks := dyn.Resource(gvr("ipamblocks"))
	for _, b := range []*unstructured.Unstructured{blockObject("zz-10-244-9-0-26", "10.244.9.0/26", "node-a"), blockObject("aa-10-244-8-0-26", "10.244.8.0/26", "node-a")} {
		if _, err := blocks.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the new blocks collected", func() bool {
		s, err := collectWatch(w)
		return err == nil && len(s.Calico.Blocks) == 5
	})
	waitFor(t, "the new blocks announced", func() bool { return w.Changes().All })
	s, _ = collectWatch(w)
	if names := blockNames(s.Calico); !slices.IsSorted(names) {
		t.Errorf("blocks %v, want them sorted by name", names)
	}

	// An update is converted when it comes.
	fixed := blockObject("zz-10-244-9-0-26", "10.244.9.0/26", "node-b")
	b, err := blocks.Get(ctx, fixed.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.SetResourceVersion(b.GetResourceVersion())
	if _, err := blocks.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantBlock := Block(fixed.DeepCopy().Object)
	waitFor(t, "the update collected", func() bool {
		s, err := collectWatch(w)
		return err == nil && reflect.DeepEqual(s.Calico.Blocks[len(s.Calico.Blocks)-1], wantBlock)
	})
	if err := blocks.Delete(ctx, fixed.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion collected", func() bool {
		s, err := collectWatch(w)
		return err == nil && !slices.Contains(blockNames(s.Calico), fixed.GetName())
	})
	waitFor(t, "the update and deletion announced", func() bool { return w.Changes().All })
}

// Without Calico's CRDs the watch has its answer at once: settled, ready
// (not serving the ledger is no failure), one change for the pass that
// says so; the dynamic client is never asked anything.
func TestWatchNotServed(t *testing.T) {
	dyn := fakeClient()
	w := &Watch{Discovery: calicoDiscovery(), Dynamic: dyn}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	if err := w.Ready(time.Now()); err != nil {
		t.Errorf("Ready = %v, want nil: unsupported is no failure", err)
	}
	if c := w.Changes(); !c.All || c.Why != "calico" {
		t.Errorf("Changes = %+v, want the answer announced", c)
	}
	if c := w.Changes(); !c.Empty() {
		t.Errorf("Changes again = %+v, want them forgotten", c)
	}
	if a := dyn.Actions(); len(a) != 0 {
		t.Errorf("the dynamic client was asked %v", a)
	}
}

// Collect says the ledger is unsupported in the words a scan uses, and
// leaves the snapshot as it was; the status reads unsupported.
func TestWatchCollectUnsupported(t *testing.T) {
	w := &Watch{Discovery: calicoDiscovery(), Dynamic: fakeClient()}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	s := &snapshot.Snapshot{NodeName: "node-a"}
	err := w.Collect(context.Background(), s)
	const msg = "the API server serves no crd.projectcalico.org/v1 IPAM resources: Calico is not installed, or keeps its IPAM in etcd rather than in the kubernetes datastore"
	if err == nil || err.Error() != msg || !errors.Is(err, source.ErrUnsupported) {
		t.Errorf("Collect = %v, want unsupported: %s", err, msg)
	}
	if !reflect.DeepEqual(s, &snapshot.Snapshot{NodeName: "node-a"}) || s.Calico != nil {
		t.Errorf("Collect changed the snapshot: %+v", s)
	}
	got := source.Collect(context.Background(), time.Now, "", w)
	if st := got.Sources[0]; st.Status != snapshot.StatusUnsupported || st.Detail != msg || got.Calico != nil {
		t.Errorf("status %+v, ledger %v; want unsupported: %s", st, got.Calico, msg)
	}
}

// Discovery that fails is no answer that Calico is missing: the watch
// settles (the first pass need not wait), is not ready, and says why; it
// asks again, and watches the ledger once discovery answers. Incomplete
// CRDs are a failure too.
func TestWatchDiscoveryFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		// err is what discovery answers; served what it serves
		// otherwise.
		err    error
		served []string
		want   string
	}{
		{name: "discovery fails", err: apierrors.NewInternalError(errors.New("etcd is gone")), served: plurals(),
			want: "asking the API server which crd.projectcalico.org/v1 resources it serves: Internal error occurred: etcd is gone (500 InternalError)"},
		{name: "incomplete CRDs", served: []string{"ipamblocks", "blockaffinities", "ippools"},
			want: "the API server serves crd.projectcalico.org/v1 but not ipamhandles.crd.projectcalico.org: Calico's CRDs are incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newServingDiscovery(t)
			d.Resources = calicoDiscovery(tc.served...).Resources
			d.answer(tc.err)
			w := &Watch{Discovery: d, Dynamic: fakeClient(), Rediscover: 10 * time.Millisecond}
			start(t, w)
			waitFor(t, "the watch settled", w.Settled)
			if err := w.Ready(time.Now()); err == nil || err.Error() != tc.want || errors.Is(err, source.ErrUnsupported) {
				t.Errorf("Ready = %v, want %s", err, tc.want)
			}
			s := &snapshot.Snapshot{}
			if err := w.Collect(context.Background(), s); err == nil || err.Error() != tc.want || errors.Is(err, source.ErrUnsupported) {
				t.Errorf("Collect = %v, want %s", err, tc.want)
			}
			if s.Calico != nil {
				t.Error("Collect set a ledger")
			}
			if tc.err != nil {
				// Discovery answers again: the ledger is watched.
				d.answer(nil)
				waitFor(t, "the ledger watched", func() bool {
					s, err := collectWatch(w)
					return err == nil && s.Calico != nil
				})
			}
		})
	}
}

// Calico installed after the watch started is watched once discovery is
// asked again: before, passes say it is not served (the answer repeated is
// no change), after, they read its ledger.
func TestWatchRediscovers(t *testing.T) {
	d := newServingDiscovery(t)
	d.answer(notInstalled)
	dyn := fakeClient(blockObject("10-244-0-0-26", "10.244.0.0/26", "node-a"))
	w := &Watch{Discovery: d, Dynamic: dyn, Rediscover: 10 * time.Millisecond}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	if _, err := collectWatch(w); !errors.Is(err, source.ErrUnsupported) {
		t.Errorf("Collect before Calico is installed = %v, want unsupported", err)
	}
	if c := w.Changes(); !c.All {
		t.Errorf("Changes = %+v, want the first answer announced", c)
	}
	// Once an answer was asked after that one, that one was recorded.
	n := d.asked()
	waitFor(t, "discovery asked again", func() bool { return d.asked() >= n+2 })
	if c := w.Changes(); !c.Empty() {
		t.Errorf("Changes = %+v after the same answer again, want none", c)
	}
	if a := dyn.Actions(); len(a) != 0 {
		t.Errorf("the dynamic client was asked %v before Calico was installed", a)
	}

	d.answer(nil)
	waitFor(t, "the ledger collected", func() bool {
		s, err := collectWatch(w)
		return err == nil && len(s.Calico.Blocks) == 1
	})
	waitFor(t, "the watch settled on the ledger", w.Settled)
	if err := w.Ready(time.Now()); err != nil {
		t.Errorf("Ready = %v", err)
	}
	if c := w.Changes(); !c.All || c.Why != "calico" {
		t.Errorf("Changes = %+v, want Calico's arrival announced", c)
	}
}

// A resource of the ledger the watch may not list leaves it not ready,
// saying which and why, every one on one line; it settles all the same.
func TestWatchNotListable(t *testing.T) {
	dyn := fakeClient()
	for _, plural := range []string{"ipamhandles", "ippools"} {
		dyn.PrependReactor("list", plural, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: plural}, "", errors.New("no RBAC"))
		})
	}
	w := &Watch{Discovery: calicoDiscovery(plurals()...), Dynamic: dyn}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	err := w.Ready(time.Now())
	if err == nil {
		t.Fatal("ready while two resources are not listed")
	}
	for _, want := range []string{"ipamhandles.crd.projectcalico.org: not listed yet:", "ippools.crd.projectcalico.org: not listed yet:", "forbidden", "; "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Ready = %q, want %q in it", err, want)
		}
	}
	var nr *informer.NotReady
	if strings.Contains(err.Error(), "\n") || !errors.As(err, &nr) {
		t.Errorf("Ready = %q, want the informers' NotReady on one line", err)
	}
	s := &snapshot.Snapshot{}
	if err := w.Collect(context.Background(), s); err == nil || !strings.Contains(err.Error(), "ipamhandles.crd.projectcalico.org: not listed yet:") || s.Calico != nil {
		t.Errorf("Collect = %v, ledger %v; want not ready, nothing set", err, s.Calico)
	}
}

// While a watch of the ledger fails the watch is not ready, and says so
// as a change; once the watch is back it is ready again, and keeps the
// ledger current. The ledger starts empty: every change announced is the
// failure's or the recovery's.
func TestWatchFailsAndRecovers(t *testing.T) {
	dyn := fakeClient()
	var failing atomic.Bool
	watchers := make(chan *watch.RaceFreeFakeWatcher, 10)
	dyn.PrependReactor("list", "ipamblocks", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	dyn.PrependWatchReactor("ipamblocks", func(k8stesting.Action) (bool, watch.Interface, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		w := watch.NewRaceFreeFake()
		watchers <- w
		return true, w, nil
	})
	w := &Watch{Discovery: calicoDiscovery(plurals()...), Dynamic: dyn}
	start(t, w)
	waitFor(t, "the watch ready", func() bool { return w.Settled() && w.Ready(time.Now()) == nil })
	w.Changes()
	failing.Store(true)
	(<-watchers).Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "etcd is gone"})
	waitFor(t, "the watch failing", func() bool { return w.Ready(time.Now()) != nil })
	if err := w.Ready(time.Now()); !strings.HasPrefix(err.Error(), "ipamblocks.crd.projectcalico.org: ") {
		t.Errorf("Ready = %v, want the blocks' failure", err)
	}
	waitFor(t, "the failure announced", func() bool { return w.Changes().All })
	if _, err := collectWatch(w); err == nil {
		t.Error("collected while the blocks' watch fails")
	}
	failing.Store(false)
	waitFor(t, "the watch ready again", func() bool { return w.Ready(time.Now()) == nil })
	waitFor(t, "the recovery announced", func() bool { return w.Changes().All })
	// The watch started after the new list is the one the API server
	// tells of changes on.
	b := blockObject("10-244-0-0-26", "10.244.0.0/26", "node-a")
	b.SetResourceVersion("1000")
	(<-watchers).Add(b)
	waitFor(t, "a block created since collected", func() bool {
		s, err := collectWatch(w)
		return err == nil && len(s.Calico.Blocks) == 1
	})
}

// slowBlocks is a dynamic client whose list of IPAMBlocks waits for
// release: a large ledger still being listed.
type slowBlocks struct {
	dynamic.Interface
	release chan struct{}
}

func (s slowBlocks) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	ri := s.Interface.Resource(r)
	if r.Resource != "ipamblocks" {
		return ri
	}
	return slowList{ri, s.release}
}

type slowList struct {
	dynamic.NamespaceableResourceInterface
	release chan struct{}
}

func (s slowList) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.NamespaceableResourceInterface.List(ctx, o)
}

// The watch settles once discovery answered and every informer listed or
// failed: not while discovery is asked, nor while the blocks are being
// listed. A resource listed empty is announced as a change, so that a pass
// runs although no object came.
func TestWatchSettledWaitsForTheLedger(t *testing.T) {
	d := newServingDiscovery(t)
	d.hold()
	release := make(chan struct{})
	w := &Watch{Discovery: d, Dynamic: slowBlocks{fakeClient(), release}}
	if w.Settled() {
		t.Error("settled before it started")
	}
	start(t, w)
	waitFor(t, "discovery asked", func() bool { return d.asked() == 1 })
	if w.Settled() {
		t.Error("settled before discovery answered")
	}
	const notAsked = "not asked yet whether the API server serves crd.projectcalico.org"
	if err := w.Ready(time.Now()); err == nil || err.Error() != notAsked {
		t.Errorf("Ready = %v, want %s", err, notAsked)
	}
	if _, err := collectWatch(w); err == nil || err.Error() != notAsked {
		t.Errorf("Collect = %v, want %s", err, notAsked)
	}
	d.release()
	const listing = "ipamblocks.crd.projectcalico.org: not listed yet: no answer from the API server"
	waitFor(t, "the other kinds listed", func() bool {
		err := w.Ready(time.Now())
		return err != nil && err.Error() == listing
	})
	if w.Settled() {
		t.Error("settled while the blocks are being listed")
	}
	if _, err := collectWatch(w); err == nil || err.Error() != listing {
		t.Errorf("Collect = %v, want %s", err, listing)
	}
	waitFor(t, "the other kinds' lists announced", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, k := range w.cur.kinds {
			if k.announced {
				n++
			}
		}
		return n == len(w.cur.kinds)-1
	})
	w.Changes()
	close(release)
	waitFor(t, "settled once the blocks are listed", w.Settled)
	if c := w.Changes(); !c.All {
		t.Errorf("Changes = %+v, want the empty list announced", c)
	}
	if err := w.Ready(time.Now()); err != nil {
		t.Errorf("Ready = %v", err)
	}
	s, err := collectWatch(w)
	if err != nil || s.Calico == nil || len(s.Calico.Blocks) != 0 {
		t.Errorf("Collect = %+v, %v; want an empty ledger", s.Calico, err)
	}
}

// Started again once the last watch ended (a controller that leads again),
// the watch starts afresh: discovery asked again, nothing of the last
// watch's caches kept, what changed meanwhile listed anew. Started while
// it watches, it refuses.
func TestWatchStartsAfresh(t *testing.T) {
	d := newServingDiscovery(t)
	dyn := fakeClient(blockObject("old-10-244-0-0-26", "10.244.0.0/26", "node-a"))
	w := &Watch{Discovery: d, Dynamic: dyn}
	stop := start(t, w)
	waitFor(t, "the first watch settled", w.Settled)
	if s, err := collectWatch(w); err != nil || !slices.Equal(blockNames(s.Calico), []string{"old-10-244-0-0-26"}) {
		t.Fatalf("Collect = %v, %v", s.Calico, err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Error("started again while watching")
	}
	stop()
	if w.Settled() {
		t.Error("settled once the watch ended")
	}
	if err := w.Ready(time.Now()); err == nil {
		t.Error("ready once the watch ended")
	}

	ctx := context.Background()
	blocks := dyn.Resource(gvr("ipamblocks"))
	if err := blocks.Delete(ctx, "old-10-244-0-0-26", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blocks.Create(ctx, blockObject("new-10-244-1-0-26", "10.244.1.0/26", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.hold()
	asked := d.asked()
	start(t, w)
	waitFor(t, "discovery asked again", func() bool { return d.asked() == asked+1 })
	const notAsked = "not asked yet whether the API server serves crd.projectcalico.org"
	if _, err := collectWatch(w); err == nil || err.Error() != notAsked {
		t.Errorf("Collect = %v, want %s: nothing of the last watch", err, notAsked)
	}
	if w.Settled() {
		t.Error("settled before discovery answered again")
	}
	if c := w.Changes(); !c.Empty() {
		t.Errorf("Changes = %+v, want none before discovery answered", c)
	}
	d.release()
	waitFor(t, "the second watch settled", w.Settled)
	s, err := collectWatch(w)
	if err != nil || !slices.Equal(blockNames(s.Calico), []string{"new-10-244-1-0-26"}) {
		t.Errorf("Collect = %v, %v; want only the new block", s.Calico, err)
	}
	if c := w.Changes(); !c.All {
		t.Errorf("Changes = %+v, want the new watch announced", c)
	}
	lists := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "ipamblocks" {
			lists++
		}
	}
	if lists != 2 {
		t.Errorf("the blocks were listed %d times, want once per watch", lists)
	}
}

// Ready and Collect judge the informers at the watch's clock: a watch
// silent longer than allowed is stuck, every resource of it, on one line.
func TestWatchClock(t *testing.T) {
	var now atomic.Pointer[time.Time]
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	now.Store(&t0)
	clock := func() time.Time { return *now.Load() }
	w := &Watch{Discovery: calicoDiscovery(plurals()...), Dynamic: fakeClient(), Now: clock}
	start(t, w)
	waitFor(t, "the watch settled", w.Settled)
	if err := w.Ready(t0); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	later := t0.Add(informer.DefaultSilence + time.Minute)
	if err := w.Ready(later); err == nil || strings.Count(err.Error(), "the watch is stuck") != len(resources) {
		t.Errorf("Ready %s later = %v, want every resource stuck", later.Sub(t0), err)
	}
	if _, err := collectWatch(w); err != nil {
		t.Errorf("Collect at the watch's clock = %v", err)
	}
	now.Store(&later)
	_, err := collectWatch(w)
	if err == nil || strings.Count(err.Error(), "nothing heard from the API server for 3m30s") != len(resources) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Collect 3m30s later = %v, want every resource stuck, on one line", err)
	}
}

// Without its clients the watch cannot start, and before it starts it has
// nothing to collect.
func TestWatchNotStarted(t *testing.T) {
	w := &Watch{}
	if err := w.Start(context.Background()); err == nil {
		t.Error("started without clients")
	}
	if w.Settled() {
		t.Error("settled before it started")
	}
	s := &snapshot.Snapshot{}
	if err := w.Collect(context.Background(), s); err == nil || s.Calico != nil {
		t.Errorf("Collect before Start = %v, %v", err, s.Calico)
	}
	if d := w.Describe(s); d != "" {
		t.Errorf("Describe of no ledger = %q", d)
	}
}
