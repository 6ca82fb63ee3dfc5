// Package informer is the one informer with liveness that every live
// source of ghostwatch watches the API server through: a client-go shared
// informer that also knows whether its cache is current, and why not (not
// listed yet, the last list or watch failed, the watch stuck silent). It
// converts and stores; it judges nothing and names no ledger.
package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// DefaultSilence is how long a watch may stay silent (no event, no
// bookmark, no list) before its cache is no longer trusted when
// Options.Silence is zero. The API server sends a bookmark on every watch
// about once a minute (and 2s before the watch times out) even when
// nothing changes, so a longer silence means the watch is stuck without
// having returned an error: 2m30s lets one bookmark be late or lost.
const DefaultSilence = 150 * time.Second

// ListWatch lists and watches one resource.
type ListWatch struct {
	List  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	Watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// Options tune an Informer. The zero value is usable.
type Options struct {
	// Transform converts each object as it arrives (cache.TransformFunc).
	Transform cache.TransformFunc
	// Indexers are the store's indexers.
	Indexers cache.Indexers
	// Optional resources may not be served (ServiceCIDRs before
	// Kubernetes 1.33): a 404 on the list is then an empty list, and
	// Unserved says so.
	Optional bool
	// Empty is the empty list an unserved optional resource reads as.
	Empty runtime.Object
	// Silence is how long the watch may stay silent; DefaultSilence when
	// zero.
	Silence time.Duration
	// Now is the clock that stamps errors and what was last heard; nil
	// means time.Now.
	Now func() time.Time
	// Changed, when set, is called when an error comes or goes.
	Changed func()
}

// Informer is one resource's informer, the list or watch error that is
// current for it (the last one, until a list or a watch succeeds again),
// and when the API server was last heard from about the resource.
type Informer struct {
	// Resource names the resource as RBAC rules and errors do ("pods",
	// "ipamblocks.crd.projectcalico.org").
	Resource string
	informer cache.SharedIndexInformer
	opts     Options
	unserved atomic.Bool

	mu    sync.Mutex
	err   error
	errAt time.Time
	heard time.Time
}

// New returns the informer of resource, whose objects are of object's
// type. Nothing is requested until Run.
func New(resource string, lw ListWatch, object runtime.Object, opts Options) *Informer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Silence <= 0 {
		opts.Silence = DefaultSilence
	}
	if opts.Indexers == nil {
		opts.Indexers = cache.Indexers{}
	}
	i := &Informer{Resource: resource, opts: opts}
	i.informer = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := lw.List(ctx, o)
			if opts.Optional && apierrors.IsNotFound(err) {
				// Not served: an empty list, watched by a watch that
				// never reports anything.
				i.unserved.Store(true)
				i.set(nil)
				return opts.Empty, nil
			}
			if err != nil {
				i.fail(err)
				return nil, err
			}
			i.unserved.Store(false)
			i.hear()
			i.set(nil)
			return obj, nil
		},
		// The reflector watches only after a list it has stored, or to
		// go on from a watch that ended: once a watch starts, the cache
		// is being kept current again. A watch that fails to start is
		// retried without a word to the error handler (an API server
		// that refuses connections): it is seen here.
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if i.unserved.Load() {
				return watch.NewFake(), nil
			}
			wi, err := lw.Watch(ctx, o)
			if err != nil {
				i.fail(err)
				return nil, err
			}
			if isEmptyWatch(wi) {
				// client-go answers a watch whose connection ended before
				// it began (EOF, a timeout: a server shutting down, a
				// proxy that closes every connection) with an empty watch
				// and no error: nothing was heard from the server.
				return wi, nil
			}
			i.hear()
			i.set(nil)
			// Every event, bookmarks included (the informer hides
			// them), is a sign of life; an error event ends the watch,
			// and says nothing is kept current.
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Error {
					i.fail(apierrors.FromObject(e.Object))
				} else {
					i.hear()
				}
				return e, true
			}), nil
		},
	}, object, 0, opts.Indexers)
	// Neither call can fail before the informer runs.
	if opts.Transform != nil {
		_ = i.informer.SetTransform(opts.Transform)
	}
	_ = i.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { i.fail(err) })
	return i
}

// emptyWatchType is the type of client-go's empty watch.
var emptyWatchType = reflect.TypeOf(watch.NewEmptyWatch())

// isEmptyWatch reports whether w is client-go's empty watch, which ends at
// once.
func isEmptyWatch(w watch.Interface) bool { return reflect.TypeOf(w) == emptyWatchType }

// fail records a list or watch error. A watch that merely ended, whose
// resourceVersion expired, or that was stopped, is none: the reflector
// lists or watches again.
func (i *Informer) fail(err error) {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	i.set(err)
}

// set sets the current error, and says so when one came or went.
func (i *Informer) set(err error) {
	i.mu.Lock()
	was := i.err
	i.err = err
	if err != nil {
		i.errAt = i.opts.Now()
	}
	i.mu.Unlock()
	if (was == nil) != (err == nil) && i.opts.Changed != nil {
		i.opts.Changed()
	}
}

func (i *Informer) hear() {
	now := i.opts.Now()
	i.mu.Lock()
	defer i.mu.Unlock()
	if now.After(i.heard) {
		i.heard = now
	}
}

// Run runs the informer until ctx ends.
func (i *Informer) Run(ctx context.Context) { i.informer.RunWithContext(ctx) }

// HasSynced reports whether the informer has listed its resource.
func (i *Informer) HasSynced() bool { return i.informer.HasSynced() }

// Store is the informer's store of (transformed) objects.
func (i *Informer) Store() cache.Store { return i.informer.GetStore() }

// AddEventHandler adds a handler of the informer's events. The
// registration's HasSynced reports whether the handler has been handed
// every object of the first list: the informer's own HasSynced turns true
// before its handlers have run, so what a handler keeps is complete only
// once the registration says so.
func (i *Informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.informer.AddEventHandler(h)
}

// Unserved reports whether the API server does not serve the (optional)
// resource.
func (i *Informer) Unserved() bool { return i.unserved.Load() }

// Err returns the current list or watch error, nil when there is none.
func (i *Informer) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.err
}

// Heard returns when the API server was last heard from about the
// resource.
func (i *Informer) Heard() time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.heard
}

// Ready returns nil when the informer has listed its resource and keeps it
// current at now, and otherwise why not, naming the resource: not listed
// yet (and the last error, when there was one), the current list or watch
// error (and how long ago it came), or a silence longer than allowed.
func (i *Informer) Ready(now time.Time) error {
	i.mu.Lock()
	err, at, heard := i.err, i.errAt, i.heard
	i.mu.Unlock()
	synced := i.informer.HasSynced()
	switch {
	case !synced && err != nil:
		return &NotReady{Resource: i.Resource, Why: "not listed yet", Err: err}
	case !synced:
		return &NotReady{Resource: i.Resource, Why: "not listed yet: no answer from the API server"}
	case i.unserved.Load():
		return nil
	case err != nil:
		return &NotReady{Resource: i.Resource, Err: err, Ago: now.Sub(at)}
	case now.Sub(heard) > i.opts.Silence:
		return &NotReady{Resource: i.Resource, Why: fmt.Sprintf("nothing heard from the API server for %s (no event, no bookmark): the watch is stuck",
			now.Sub(heard).Round(time.Second))}
	}
	return nil
}

// NotReady says why an informer's cache is not current.
type NotReady struct {
	Resource string
	// Why says what is missing; Err is the list or watch error behind it,
	// Ago how long ago that error came (0 when not known).
	Why string
	Err error
	Ago time.Duration
	// Describe, when set, renders Err (say, with what permission is
	// missing); Err's own text otherwise.
	Describe func(err error, resource string) string
}

func (e *NotReady) Error() string {
	s := e.Resource + ": " + e.Why
	if e.Err != nil {
		d := e.Err.Error()
		if e.Describe != nil {
			d = e.Describe(e.Err, e.Resource)
		}
		if e.Why != "" {
			s += ": "
		}
		s += d
		if e.Ago > 0 {
			s += fmt.Sprintf(" (%s ago)", e.Ago.Round(time.Second))
		}
	}
	return s
}

func (e *NotReady) Unwrap() error { return e.Err }

// Converted is what an informer whose transform is Keep stores of one
// object: the name and resourceVersion the informer needs, and the object
// converted once, when it arrives, into what the rules read. Nothing keeps
// the API server's form of it (the unstructured form of a Calico block is
// several times its conversion).
type Converted[T any] struct {
	name, namespace, resourceVersion string
	V                                T
}

// GetObjectMeta gives the informer the object's name, namespace and
// resourceVersion (meta.ObjectMetaAccessor).
func (r *Converted[T]) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: r.name, Namespace: r.namespace, ResourceVersion: r.resourceVersion}
}

// Keep returns the transform that converts each object convert accepts.
// Anything else (converted already, a DeletedFinalStateUnknown holding a
// converted object) passes unchanged.
func Keep[T any](convert func(obj any) (T, bool)) cache.TransformFunc {
	return func(obj any) (any, error) {
		v, ok := convert(obj)
		if !ok {
			return obj, nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return &Converted[T]{name: m.GetName(), namespace: m.GetNamespace(), resourceVersion: m.GetResourceVersion(), V: v}, nil
	}
}

// Values returns the converted objects an informer whose transform is Keep
// holds, in no order.
func Values[T any](i *Informer) []T {
	objs := i.Store().List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*Converted[T]); ok {
			out = append(out, r.V)
		}
	}
	return out
}
