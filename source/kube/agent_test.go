package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestOnChangeAndStale(t *testing.T) {
	client := fake.NewClientset()
	inf := NewInformers(client, 0)
	changed := make(chan struct{}, 16)
	if err := inf.OnChange(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := inf.Stale(now, time.Minute); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("before start: %v, want not synced", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	if err := inf.Stale(time.Now(), time.Minute); err != nil {
		t.Fatalf("after sync: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no change notified for a new pod")
	}
	// A watch error makes the caches stale for the window, not after.
	inf.failed(inf.watched[0], errors.New("connection refused"))
	if err := inf.Stale(time.Now(), time.Minute); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("after a watch error: %v", err)
	}
	if err := inf.Stale(time.Now().Add(2*time.Minute), time.Minute); err != nil {
		t.Fatalf("an old error must not keep the caches stale: %v", err)
	}
}
