package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/source/kube"
)

// watched is one informer of the leader, the list or watch error that is
// current for it (the last one, until a watch starts again), and when the
// API server was last heard from about its resource.
type watched struct {
	// resource names it as RBAC rules do ("pods",
	// "ipamblocks.crd.projectcalico.org").
	resource string
	informer cache.SharedIndexInformer
	now      func() time.Time

	mu    sync.Mutex
	err   error
	heard time.Time
}

// silence is how long a watch may stay silent (no event, no bookmark, no
// list) before its cache is no longer trusted: the API server sends a
// bookmark on every watch about once a minute, so a longer silence means a
// watch stuck without an error. As the agent's informers (source/kube).
const silence = kube.DefaultSilence

// listWatch lists or watches one resource in every namespace.
type listWatch struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// newWatched returns the informer of one resource, whose objects are of
// object's type; transform keeps of each what the rules read, and changed
// is called when an error comes or goes. Nothing is requested until the
// informer runs.
func newWatched(resource string, lw listWatch, object runtime.Object, transform cache.TransformFunc, now func() time.Time, changed func()) *watched {
	w := &watched{resource: resource, now: now}
	fail := func(err error) {
		// A watch that merely ended, or whose resourceVersion expired,
		// is no failure: the reflector lists again.
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		if w.set(err) {
			changed()
		}
	}
	w.informer = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := lw.list(ctx, o)
			if err != nil {
				fail(err)
				return nil, err
			}
			w.hear()
			return obj, nil
		},
		// The reflector watches only after a list it has stored, or to
		// go on from a watch that ended: once a watch starts, the cache
		// is being kept current again. A watch that fails to start is
		// retried without a word to the error handler (an API server
		// that refuses connections): it is seen here.
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := lw.watch(ctx, o)
			if err != nil {
				fail(err)
				return nil, err
			}
			w.hear()
			if w.set(nil) {
				changed()
			}
			// Every event, bookmarks included (the informer hides
			// them), is a sign of life; an error event ends the watch.
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				w.hear()
				if e.Type == watch.Error {
					fail(apierrors.FromObject(e.Object))
				}
				return e, true
			}), nil
		},
	}, object, 0, cache.Indexers{})
	// Neither call can fail before the informer runs.
	_ = w.informer.SetTransform(transform)
	_ = w.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { fail(err) })
	return w
}

// set sets the current error and reports whether it changed from or to
// none.
func (w *watched) set(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.err
	w.err = err
	return (was == nil) != (err == nil)
}

func (w *watched) hear() {
	w.mu.Lock()
	w.heard = w.now()
	w.mu.Unlock()
}

// failure returns the current list or watch error, nil when there is none.
func (w *watched) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ready returns nil when the informer has listed its resource and keeps
// it current, and otherwise why not.
func (w *watched) ready() error {
	w.mu.Lock()
	err, heard := w.err, w.heard
	w.mu.Unlock()
	synced := w.informer.HasSynced()
	switch {
	case !synced && err != nil:
		return fmt.Errorf("%s: not listed yet: %w", w.resource, err)
	case !synced:
		return fmt.Errorf("%s: not listed yet", w.resource)
	case err != nil:
		return fmt.Errorf("%s: %w", w.resource, err)
	}
	if d := w.now().Sub(heard); d > silence {
		return fmt.Errorf("%s: nothing heard from the API server for %s (no event, no bookmark): the watch is stuck", w.resource, d.Round(time.Second))
	}
	return nil
}

// converted is what an informer of Nodes or of Calico's objects keeps of
// one object: the name and resourceVersion the informer needs, and the
// object converted once, when it arrives, into what the rules read. The
// informer's store is then the store of converted objects by name, and
// nothing keeps the API server's form of them (the unstructured form of a
// Calico block is several times its conversion).
type converted[T any] struct {
	name, resourceVersion string
	v                     T
}

// GetObjectMeta gives the informer the object's name and resourceVersion
// (meta.ObjectMetaAccessor).
func (r *converted[T]) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: r.name, ResourceVersion: r.resourceVersion}
}

// keep returns the transform that converts each object convert accepts.
// Anything else (converted already, a DeletedFinalStateUnknown holding a
// converted object) passes unchanged.
func keep[T any](convert func(obj any) (T, bool)) cache.TransformFunc {
	return func(obj any) (any, error) {
		v, ok := convert(obj)
		if !ok {
			return obj, nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return &converted[T]{name: m.GetName(), resourceVersion: m.GetResourceVersion(), v: v}, nil
	}
}

// values returns the converted objects the informer holds, in no order.
func values[T any](w *watched) []T {
	objs := w.informer.GetStore().List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*converted[T]); ok {
			out = append(out, r.v)
		}
	}
	return out
}
