package rule

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// duplicate-pod-ip on a pod index kept per event agrees with a full pass
// after every event of a random history: pods added, changing IP,
// finishing, deleted, turned hostNetwork, with two IPs.
func TestPodIndexAgreesWithAFullPass(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 3))
		x := snapshot.NewPodIndex()
		live := map[string]snapshot.Pod{}
		addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rng.IntN(6))}) }
		for step := range 40 {
			uid := string(rune('a' + rng.IntN(8)))
			if rng.IntN(5) == 0 {
				x.Delete(uid)
				delete(live, uid)
			} else {
				p := pod("ns", "p"+uid, uid, addr().String(), t0.Add(time.Duration(rng.IntN(100))*time.Second))
				switch rng.IntN(6) {
				case 0:
					p.Phase = snapshot.PodSucceeded
				case 1:
					p.HostNetwork = true
				case 2:
					p.IPs = append(p.IPs, netip.MustParseAddr("fd00::"+string(rune('1'+rng.IntN(3)))))
				case 3:
					p.Deleting = true
				}
				x.Set(&p)
				live[uid] = p
			}
			var all []snapshot.Pod
			holding := 0
			for _, p := range live {
				all = append(all, p)
				if holdsPodIP(&p) && len(p.IPs) > 0 {
					holding++
				}
			}
			// Every pod, finished and hostNetwork ones too, each once.
			kept := map[string]snapshot.Pod{}
			for _, p := range x.Pods() {
				kept[p.UID] = p
			}
			if len(kept) != len(x.Pods()) || !reflect.DeepEqual(kept, live) {
				t.Fatalf("seed %d step %d: Pods() = %+v, want %+v", seed, step, x.Pods(), live)
			}
			if x.Len() != holding {
				t.Fatalf("seed %d step %d: Len() = %d, %d pods hold pod IPs", seed, step, x.Len(), holding)
			}
			for i := range 7 {
				a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
				want := 0
				for _, p := range live {
					if holdsPodIP(&p) && p.HasIP(a) {
						want++
					}
				}
				if got := x.Holders(a); got != want {
					t.Fatalf("seed %d step %d: Holders(%s) = %d, want %d", seed, step, a, got, want)
				}
				// Reporting counts every unfinished pod that reports the
				// address, hostNetwork ones too.
				reporting := 0
				for _, p := range live {
					if !p.Terminal() && p.HasIP(a) {
						reporting++
					}
				}
				if got := x.Reporting(a); got != reporting {
					t.Fatalf("seed %d step %d: Reporting(%s) = %d, want %d", seed, step, a, got, reporting)
				}
			}
			want := NewDuplicatePodIP().Evaluate(&snapshot.Snapshot{Kube: &snapshot.Kube{Pods: all}})
			got := NewDuplicatePodIP().Evaluate(&snapshot.Snapshot{Kube: &snapshot.Kube{Pods: x.Pods(), Index: x}})
			if len(got) != len(want) {
				t.Fatalf("seed %d step %d: %d duplicates, a full pass finds %d", seed, step, len(got), len(want))
			}
			for i := range got {
				if got[i].Subject != want[i].Subject || got[i].Severity != want[i].Severity || !reflect.DeepEqual(got[i].Evidence["holders"], want[i].Evidence["holders"]) {
					t.Fatalf("seed %d step %d:\n got %+v\nwant %+v", seed, step, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkPodIndex measures the controller's view of 150,000 pods:
// building it, one pod event (a pod's IP changes), and duplicate-pod-ip
// on it; and, as B/pod, the heap the index keeps, its records of the pods
// included.
func BenchmarkPodIndex(b *testing.B) {
	const n = 150000
	pods := benchPods(n)
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			x := snapshot.NewPodIndex()
			for i := range pods {
				x.Set(&pods[i])
			}
		}
		before := heapNow()
		x := snapshot.NewPodIndex()
		for i := range pods {
			x.Set(&pods[i])
		}
		perPod := float64(heapNow()-before) / n
		// The records and the maps; the records' strings are the
		// informer cache's.
		b.ReportMetric(perPod, "B/pod")
		// With each pod's one address, which the conversion of an
		// informer's Pod allocates.
		b.ReportMetric(perPod+float64(unsafe.Sizeof(netip.Addr{})), "B/pod+addr")
		runtime.KeepAlive(x)
	})
	b.Run("event", func(b *testing.B) {
		x := snapshot.NewPodIndex()
		for i := range pods {
			x.Set(&pods[i])
		}
		moved := make([]snapshot.Pod, 2)
		for i := range moved {
			moved[i] = pods[77]
			moved[i].IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 200, 0, byte(i)})}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			x.Set(&moved[i%2])
			i++
		}
	})
	b.Run("duplicates", func(b *testing.B) {
		x := snapshot.NewPodIndex()
		for i := range pods {
			x.Set(&pods[i])
		}
		b.ReportAllocs()
		for b.Loop() {
			if got := NewDuplicatePodIP().Evaluate(&snapshot.Snapshot{Kube: &snapshot.Kube{Pods: x.Pods(), Index: x}}); len(got) != 10 {
				b.Fatalf("%d duplicates", len(got))
			}
		}
	})
}

// benchPods are n running pods with their own IPs but ten duplicates.
func benchPods(n int) []snapshot.Pod {
	pods := make([]snapshot.Pod, n)
	for i := range pods {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		pods[i] = snapshot.Pod{UID: string(rune(0x10000 + i)), Namespace: "ns", Name: "p", Node: "n", Phase: snapshot.PodRunning,
			IPs: []netip.Addr{a}, StartTime: t0}
	}
	for i := range 10 {
		pods[i].IPs = pods[n-1-i].IPs
	}
	return pods
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
