package controller

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// An informer is ready once listed and while its watch runs; not while the
// API server refuses the watch (which the reflector retries without a word
// to its error handler), nor while the watch is silent for too long.
func TestWatchedReadiness(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	var mu sync.Mutex
	now := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var changes atomic.Int32
	w := newWatched("nodes", listWatch{
		list: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		watch: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			}
			return watch.NewFake(), nil
		},
	}, &corev1.Node{}, nil, clock, func() { changes.Add(1) })
	if err := w.ready(); err == nil || err.Error() != "nodes: not listed yet" {
		t.Errorf("before running: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.informer.RunWithContext(ctx)
	waitFor(t, "the refused watch seen", func() bool { return w.ready() != nil && strings.Contains(w.ready().Error(), "connection refused") })
	if !w.informer.HasSynced() {
		t.Fatal("not synced")
	}
	if changes.Load() == 0 {
		t.Error("the error came unannounced")
	}
	refuse.Store(false)
	waitFor(t, "the watch running", func() bool { return w.ready() == nil })
	mu.Lock()
	now = now.Add(silence + time.Second)
	mu.Unlock()
	if err := w.ready(); err == nil || !strings.Contains(err.Error(), "nodes: nothing heard from the API server for 2m31s (no event, no bookmark): the watch is stuck") {
		t.Errorf("after a silence: %v", err)
	}
}

// The transform converts each object once and passes anything else
// through: an object converted already, a tombstone holding one.
func TestKeep(t *testing.T) {
	tf := keep(func(obj any) (string, bool) {
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
	c, ok := obj.(*converted[string])
	if !ok || c.v != "converted node-a" {
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
}
