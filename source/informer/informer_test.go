package informer

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
)

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func nodes(list func() (runtime.Object, error), wi func() (watch.Interface, error)) ListWatch {
	return ListWatch{
		List:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list() },
		Watch: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return wi() },
	}
}

func emptyNodes() (runtime.Object, error) {
	return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
}

// An informer is ready once listed and while its watch runs; not while the
// API server refuses the watch (which the reflector retries without a word
// to its error handler), nor while the watch is silent for too long.
func TestReadiness(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	c := fakeclock.New(time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC))
	var changes atomic.Int32
	i := New("nodes", nodes(emptyNodes, func() (watch.Interface, error) {
		if refuse.Load() {
			return nil, refused
		}
		return watch.NewFake(), nil
	}), &corev1.Node{}, Options{Now: c.Now, Changed: func() { changes.Add(1) }})
	if err := i.Ready(c.Now()); err == nil || err.Error() != "nodes: not listed yet: no answer from the API server" {
		t.Errorf("before running: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go i.Run(ctx)
	poll.Until(t, poll.Patience, "the refused watch seen", func() bool {
		err := i.Ready(c.Now())
		return err != nil && strings.Contains(err.Error(), "connection refused")
	})
	if !i.HasSynced() {
		t.Fatal("not synced")
	}
	var nr *NotReady
	if err := i.Ready(c.Now()); !errors.As(err, &nr) || nr.Resource != "nodes" || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the refusal reads %#v", err)
	}
	if changes.Load() == 0 {
		t.Error("the error came unannounced")
	}
	c.Advance(90 * time.Second)
	if err := i.Ready(c.Now()); err == nil || !strings.HasSuffix(err.Error(), "connection refused (1m30s ago)") {
		t.Errorf("an error's age: %v", err)
	}
	refuse.Store(false)
	poll.Until(t, poll.Patience, "the watch running", func() bool { return i.Ready(c.Now()) == nil })
	if i.Err() != nil {
		t.Errorf("the error outlived the watch: %v", i.Err())
	}
	c.Advance(DefaultSilence + time.Second)
	if err := i.Ready(c.Now()); err == nil || err.Error() != "nodes: nothing heard from the API server for 2m31s (no event, no bookmark): the watch is stuck" {
		t.Errorf("after a silence: %v", err)
	}
}

// A list that fails leaves the informer not listed, with the failure; a
// watch that merely ends or expires is no failure.
func TestListFailureAndHarmlessEnds(t *testing.T) {
	c := fakeclock.New(time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no RBAC"))
	var fail atomic.Bool
	fail.Store(true)
	i := New("nodes", nodes(func() (runtime.Object, error) {
		if fail.Load() {
			return nil, forbidden
		}
		return emptyNodes()
	}, func() (watch.Interface, error) { return watch.NewFake(), nil }), &corev1.Node{}, Options{Now: c.Now})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go i.Run(ctx)
	poll.Until(t, poll.Patience, "the refused list", func() bool { return i.Err() != nil })
	err := i.Ready(c.Now())
	if err == nil || !strings.HasPrefix(err.Error(), "nodes: not listed yet: ") || !apierrors.IsForbidden(err) {
		t.Errorf("a refused list reads %v", err)
	}
	var nr *NotReady
	if errors.As(err, &nr) {
		nr.Describe = func(error, string) string { return "cannot list nodes: grant list on nodes" }
		if got := nr.Error(); got != "nodes: not listed yet: cannot list nodes: grant list on nodes" {
			t.Errorf("described: %q", got)
		}
	}
	fail.Store(false)
	poll.Until(t, poll.Patience, "the list", func() bool { return i.Ready(c.Now()) == nil })
	for _, end := range []error{
		apierrors.NewResourceExpired("too old resource version"),
		apierrors.NewGone("gone"),
		context.Canceled,
	} {
		i.fail(end)
		if i.Err() != nil {
			t.Errorf("%v counted as a failure", end)
		}
	}
}

// An optional resource the API server does not serve reads as an empty
// list, ready, and says it is unserved.
func TestOptionalUnserved(t *testing.T) {
	var watched atomic.Bool
	i := New("servicecidrs.networking.k8s.io", nodes(func() (runtime.Object, error) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, "")
	}, func() (watch.Interface, error) {
		watched.Store(true)
		return watch.NewFake(), nil
	}), &corev1.Node{}, Options{Optional: true, Empty: &corev1.NodeList{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go i.Run(ctx)
	poll.Until(t, poll.Patience, "the list", i.HasSynced)
	if !i.Unserved() {
		t.Error("not unserved")
	}
	if err := i.Ready(time.Now()); err != nil {
		t.Errorf("unserved but not ready: %v", err)
	}
	if watched.Load() {
		t.Error("an unserved resource was watched")
	}
}

// The transform converts each object once and passes anything else
// through: an object converted already, a tombstone holding one.
func TestKeep(t *testing.T) {
	tf := Keep(func(obj any) (string, bool) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return "", false
		}
		return "converted " + n.Name, true
	})
	obj, err := tf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "7"}})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := obj.(*Converted[string])
	if !ok || c.V != "converted node-a" {
		t.Fatalf("transform gave %#v", obj)
	}
	if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != "node-a" {
		t.Errorf("key %q, %v", key, err)
	}
	if m := c.GetObjectMeta(); m.GetResourceVersion() != "7" {
		t.Errorf("resourceVersion %q", m.GetResourceVersion())
	}
	for _, in := range []any{c, cache.DeletedFinalStateUnknown{Key: "node-a", Obj: c}} {
		if out, err := tf(in); err != nil || out != in {
			t.Errorf("transform(%#v) = %#v, %v: want it unchanged", in, out, err)
		}
	}
	pods := Keep(func(obj any) (string, bool) {
		_, ok := obj.(*corev1.Pod)
		return "pod", ok
	})
	pod, err := pods(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}})
	if key, kerr := cache.MetaNamespaceKeyFunc(pod); err != nil || kerr != nil || key != "ns/p" {
		t.Errorf("a namespaced object's key %q, %v, %v", key, err, kerr)
	}
}

// A watch that client-go answers with its empty watch (the connection
// ended before the watch began: a server shutting down, a proxy closing
// every connection) is not heard from the server, and clears no error.
// (Each empty watch counted as heard and cleared the last error: an
// informer cut off by a proxy flapped between ready and not.)
func TestEmptyWatchIsNotHeard(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
	c := fakeclock.New(t0)
	var empty atomic.Bool
	var watches atomic.Int32
	first := watch.NewFakeWithChanSize(1, false)
	i := New("nodes", nodes(func() (runtime.Object, error) {
		if empty.Load() {
			return nil, io.ErrUnexpectedEOF // what a list through such a proxy gets
		}
		return emptyNodes()
	}, func() (watch.Interface, error) {
		if watches.Add(1) == 1 {
			return first, nil
		}
		return watch.NewEmptyWatch(), nil
	}), &corev1.Node{}, Options{Now: c.Now})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go i.Run(ctx)
	poll.Until(t, poll.Patience, "the first watch", func() bool { return watches.Load() == 1 })
	first.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "2"}})
	poll.Until(t, poll.Patience, "the node", func() bool { return len(i.Store().List()) == 1 })
	c.Advance(2 * time.Minute)
	empty.Store(true)
	first.Stop()
	poll.Until(t, poll.Patience, "the next watch, ended at once", func() bool { return watches.Load() >= 2 })
	poll.Until(t, poll.Patience, "the reflector past it", func() bool { return i.Err() != nil || watches.Load() > 2 })
	if h := i.Heard(); !h.Equal(t0) {
		t.Errorf("heard from the server at %s by an empty watch; the last event came at %s", h, t0)
	}
}
