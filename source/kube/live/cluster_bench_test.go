package live

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// benchClusterPods is the size of the controller's cluster in the
// benchmarks: 150,000 pods.
const benchClusterPods = 150000

func benchClusterPod(i int, now time.Time) *corev1.Pod {
	ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%06d", i), UID: types.UID(fmt.Sprintf("uid-%06d", i)),
			ResourceVersion: "1", CreationTimestamp: metav1.Time{Time: now}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%04d", i/60), Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			StartTime: &metav1.Time{Time: now}},
	}
}

// BenchmarkClusterWatch measures what the controller's pod informer does
// per event and keeps per pod: event is one pod event (a pod's IP
// changes: the informer's trimmed Pod converted and the index updated);
// index builds the index from 150,000 trimmed pods, and its B/pod is the
// heap the index keeps per pod beyond the informer cache (its record of
// the pod, with its address, and its maps).
func BenchmarkClusterWatch(b *testing.B) {
	now := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
	trim := kube.TrimPodKeeping("ghostwatch.io/gossip")
	term := func() *clusterTerm { return &clusterTerm{idx: snapshot.NewPodIndex(), poke: func() {}} }
	b.Run("event", func(b *testing.B) {
		t := term()
		for i := range 1000 {
			p, _ := trim(benchClusterPod(i, now))
			t.setPod(p)
		}
		var moved [2]any
		for i := range moved {
			p := benchClusterPod(77, now)
			p.Status.PodIP, p.Status.PodIPs = fmt.Sprintf("10.200.0.%d", i), []corev1.PodIP{{IP: fmt.Sprintf("10.200.0.%d", i)}}
			moved[i], _ = trim(p)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			t.setPod(moved[i%2])
			i++
		}
	})
	b.Run("index", func(b *testing.B) {
		// Built from the informer's trimmed Pods, kept outside the
		// measure as the informer keeps them.
		trimmed := make([]any, benchClusterPods)
		for i := range trimmed {
			trimmed[i], _ = trim(benchClusterPod(i, now))
		}
		build := func() *clusterTerm {
			t := term()
			for _, p := range trimmed {
				t.setPod(p)
			}
			return t
		}
		b.ReportAllocs()
		for b.Loop() {
			build()
		}
		before := heapAlloc()
		t := build()
		b.ReportMetric((float64(heapAlloc())-float64(before))/benchClusterPods, "B/pod")
		runtime.KeepAlive(t)
		runtime.KeepAlive(trimmed)
	})
}
