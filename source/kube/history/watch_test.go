package history

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/internal/kubefake"
	"github.com/ghostwatch/ghostwatch/internal/poll"
)

func kpod(name, uid, ip string, start time.Time) *corev1.Pod {
	st := metav1.NewTime(start)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), CreationTimestamp: st},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "shop/app:1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &st, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// The watch records what the API server says of the pods, from the first
// list on: a pod listed, one deleted, one evicted, and the one that gets
// the address next; its handler serves them as JSON.
func TestWatchRecordsThePodsOfAnAddress(t *testing.T) {
	client := kubefake.NewClientset(kpod("web-a", "uid-a", "10.244.3.47", t0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := t0.Add(time.Hour)
	w := &Watch{Client: client, Now: func() time.Time { return now }}
	if err := w.Ready(); err == nil {
		t.Error("ready before it started")
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the first list in the book", func() bool { return w.Ready() == nil })
	pods := client.CoreV1().Pods("shop")
	if err := pods.Delete(ctx, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b := kpod("web-b", "uid-b", "10.244.3.47", t0.Add(70*time.Minute))
	if _, err := pods.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Status.Phase, b.Status.Reason = corev1.PodFailed, "Evicted"
	if _, err := pods.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, kpod("web-c", "uid-c", "10.244.3.47", t0.Add(80*time.Minute)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("10.244.3.47")
	want := []string{
		"shop/web-a uid-a node-1 from 10:00 until 11:00 deleted",
		"shop/web-b uid-b node-1 from 11:10 until 11:00 failed (Evicted)",
		"shop/web-c uid-c node-1 from 11:20",
	}
	poll.Until(t, poll.Patience, "three tenures", func() bool { return fmt.Sprint(summary(w.Book().Of(ip))) == fmt.Sprint(want) })

	srv := httptest.NewServer(Handler(w, "replica-a"))
	defer srv.Close()
	resp, err := http.Get(srv.URL + Path + "10.244.3.47")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a Answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	if a.Replica != "replica-a" || a.NotReady != "" || !a.Since.Equal(now) || fmt.Sprint(summary(a.Tenures)) != fmt.Sprint(want) {
		t.Errorf("answer %+v", a)
	}
	all := httptest.NewServer(AllHandler(w, "replica-a"))
	defer all.Close()
	resp, err = http.Get(all.URL + AllPath)
	if err != nil {
		t.Fatal(err)
	}
	var whole Answer
	if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if whole.Replica != "replica-a" || fmt.Sprint(summary(whole.Tenures)) != fmt.Sprint(want) {
		t.Errorf("the whole book: %+v", whole)
	}
	for path, code := range map[string]int{Path + "10.244.3": http.StatusBadRequest, Path + "fd00::47": http.StatusOK} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
}

// What a replica pays for the history at 150,000 pods, each holding its
// address: the informer's converted pods and the book, measured as the
// heap in use once the first list is recorded.
func TestWatchBytesPerPod(t *testing.T) {
	if testing.Short() {
		t.Skip("150,000 pods")
	}
	const n = 150_000
	start := t0
	objs := make([]kruntime.Object, 0, n)
	for i := range n {
		ip := fmt.Sprintf("10.%d.%d.%d", 64+i>>16, i>>8&255, i&255)
		p := kpod(fmt.Sprintf("pod-%d", i), fmt.Sprintf("0f8e3c2a-5b1d-4e6f-9a7b-%012d", i), ip, start)
		p.Namespace = fmt.Sprintf("ns-%d", i%50)
		p.Spec.NodeName = fmt.Sprintf("node-%d", i%1000)
		objs = append(objs, p)
	}
	client := kubefake.NewClientset(objs...)
	objs = nil
	before := heapInUse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watch{Client: client}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "150,000 pods recorded", func() bool { return w.Ready() == nil })
	perPod := float64(heapInUse()-before) / n
	addresses, tenures, _ := w.Book().Len()
	t.Logf("%d addresses, %d tenures: %.0f bytes per pod (informer and book)", addresses, tenures, perPod)
	if addresses != n || perPod > 640 {
		t.Errorf("%d addresses, %.0f bytes per pod: want %d, at most 640", addresses, perPod, n)
	}
	runtime.KeepAlive(client)
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
