package history

import (
	"context"
	"fmt"
	"net/netip"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/informer"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Watch keeps a Book from a watch of every Pod: one informer, whose
// store holds each pod as the book reads it (a few hundred bytes, not
// the Pod).
type Watch struct {
	// Client lists and watches the Pods.
	Client kubernetes.Interface
	// Limits bound the book.
	Limits Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	book *Book
	pods *informer.Informer
	reg  cache.ResourceEventHandlerRegistration
}

// held is a pod as the informer keeps it for the book, and no more: what
// repeats (namespace, node, phase) interned, one address inline.
type held struct {
	name, uid       string
	namespace, node unique.Handle[string]
	phase, reason   unique.Handle[string]
	since           int64
	ip              netip.Addr
	more            []netip.Addr
	hostNetwork     bool
}

func hold(p *corev1.Pod) held {
	sp := kube.Pod(p)
	h := held{name: p.Name, uid: sp.UID, namespace: unique.Make(sp.Namespace), node: unique.Make(sp.Node),
		phase: unique.Make(sp.Phase), reason: unique.Make(p.Status.Reason), since: sp.Since().UnixNano(), hostNetwork: sp.HostNetwork}
	if len(sp.IPs) > 0 {
		h.ip = sp.IPs[0]
		if len(sp.IPs) > 1 {
			h.more = sp.IPs[1:]
		}
	}
	return h
}

// pod is h as the book reads it.
func (h *held) pod() *snapshot.Pod {
	p := &snapshot.Pod{UID: h.uid, Namespace: h.namespace.Value(), Name: h.name, Node: h.node.Value(),
		Phase: h.phase.Value(), HostNetwork: h.hostNetwork, StartTime: time.Unix(0, h.since)}
	if h.ip.IsValid() {
		p.IPs = append([]netip.Addr{h.ip}, h.more...)
	}
	return p
}

// Book returns the book; nil before Start.
func (w *Watch) Book() *Book { return w.book }

// Start starts watching; the book fills from the first list on.
func (w *Watch) Start(ctx context.Context) error {
	if w.Now == nil {
		w.Now = time.Now
	}
	w.book = NewBook(w.Limits, w.Now())
	core := w.Client.CoreV1()
	w.pods = informer.New(kube.ResourcePods, informer.ListWatch{
		List: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		Watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, informer.Options{
		Transform: informer.Keep(func(obj any) (held, bool) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return held{}, false
			}
			return hold(p), true
		}),
		Now: w.Now,
	})
	of := func(obj any) (*held, bool) {
		c, ok := obj.(*informer.Converted[held])
		if !ok {
			return nil, false
		}
		return &c.V, true
	}
	var err error
	w.reg, err = w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if h, ok := of(obj); ok {
				w.book.Set(nil, h.pod(), h.reason.Value(), w.Now())
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			o, _ := of(oldObj)
			h, ok := of(obj)
			if !ok {
				return
			}
			var was *snapshot.Pod
			if o != nil {
				was = o.pod()
			}
			w.book.Set(was, h.pod(), h.reason.Value(), w.Now())
		},
		DeleteFunc: func(obj any) {
			unseen := false
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj, unseen = d.Obj, true
			}
			if h, ok := of(obj); ok {
				w.book.Delete(h.pod(), unseen, w.Now())
			}
		},
	})
	if err != nil {
		return fmt.Errorf("history: watching pods: %w", err)
	}
	go w.pods.Run(ctx)
	return nil
}

// Ready returns nil once the book holds every pod of the first list and
// the watch is current, else why not.
func (w *Watch) Ready() error {
	if w.pods == nil {
		return fmt.Errorf("history: not started")
	}
	if err := w.pods.Err(); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if !w.reg.HasSynced() {
		return fmt.Errorf("history: pods not listed yet")
	}
	return nil
}
