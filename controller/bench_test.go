package controller

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/informer"
)

// The cluster of BenchmarkControllerPass: 150,000 pods on 2,500 nodes, each
// node with one Calico block of 64 addresses, 60 of them allocated to its
// pods (one handle each); a few allocations booked under the next node
// (misbooked) and a few for pods that are gone (leaked).
const (
	benchPods = 150000
	// benchMembers pods are members of a Consul cluster, benchGhosts of
	// whose members are ghosts.
	benchMembers   = 5000
	benchGhosts    = 10
	benchBlocks    = 2500
	benchPerBlock  = benchPods / benchBlocks
	benchMisbooked = 10
	benchLeaked    = 10
)

// benchLedger lists and watches prebuilt objects: the API server's answer,
// without a fake client's copies.
type benchLedger struct {
	dynamic.Interface
	lists map[string]*unstructured.UnstructuredList
}

func (l benchLedger) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return benchResource{list: l.lists[r.Resource]}
}

type benchResource struct {
	dynamic.NamespaceableResourceInterface
	list *unstructured.UnstructuredList
}

func (r benchResource) List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return r.list, nil
}

func (r benchResource) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func benchNode(b int) string { return fmt.Sprintf("node-%04d", b) }

func benchAddr(b, ord int) netip.Addr {
	n := b*64 + ord
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

func benchPod(i int, ip netip.Addr, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%06d", i), UID: types.UID(fmt.Sprintf("uid-%06d", i)),
			ResourceVersion: "1", CreationTimestamp: metav1.Time{Time: started}},
		Spec: corev1.PodSpec{NodeName: benchNode(i / benchPerBlock), Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}},
			StartTime: &metav1.Time{Time: started}},
	}
}

// benchCluster builds the cluster's objects and returns them listed by a
// leader's informers, synced, with the heap it keeps.
func benchCluster(b *testing.B, now time.Time) (cl *cluster, heap benchHeap, stop func()) {
	b.Helper()
	started := now.Add(-time.Hour)
	pods := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	nodes := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	lists := map[string]*unstructured.UnstructuredList{}
	add := func(plural, kind, name string, spec map[string]any) {
		l := lists[plural]
		if l == nil {
			l = &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": calico.APIVersion, "kind": kind + "List",
				"metadata": map[string]any{"resourceVersion": "1"}}}
			lists[plural] = l
		}
		l.Items = append(l.Items, unstructured.Unstructured{Object: map[string]any{"apiVersion": calico.APIVersion, "kind": kind,
			"metadata": map[string]any{"name": name, "resourceVersion": "1"}, "spec": spec}})
	}
	add("ippools", calico.KindIPPool, "default", map[string]any{"cidr": "10.0.0.0/12", "blockSize": int64(26)})
	add("kubecontrollersconfigurations", calico.KindKubeControllers, "default",
		map[string]any{"controllers": map[string]any{"node": map[string]any{"leakGracePeriod": "15m"}}})
	stamp := started.UTC().String()
	for blk := range benchBlocks {
		node := benchNode(blk)
		nodes.Items = append(nodes.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, ResourceVersion: "1"},
			Spec: corev1.NodeSpec{PodCIDR: netip.PrefixFrom(benchAddr(blk, 0), 26).String()}})
		allocs := make([]any, 64)
		var attrs, free []any
		book := func(ord int, booked, pod string) {
			handle := fmt.Sprintf("k8s-pod-network.%08x%02x", blk, ord)
			allocs[ord] = int64(len(attrs))
			attrs = append(attrs, map[string]any{"handle_id": handle,
				"secondary": map[string]any{"node": booked, "namespace": "ns", "pod": pod, "timestamp": stamp}})
			cidr := netip.PrefixFrom(benchAddr(blk, 0), 26).String()
			add("ipamhandles", calico.KindIPAMHandle, handle, map[string]any{"handleID": handle, "block": map[string]any{cidr: int64(1)}, "deleted": false})
		}
		for ord := range benchPerBlock {
			i := blk*benchPerBlock + ord
			pods.Items = append(pods.Items, *benchPod(i, benchAddr(blk, ord), started))
			if i < benchMembers {
				pods.Items[i].Annotations = map[string]string{AnnotationGossip: "consul"}
			}
			booked := node
			if blk < benchMisbooked && ord == 0 {
				booked = benchNode(blk + 1)
			}
			book(ord, booked, fmt.Sprintf("pod-%06d", i))
		}
		if blk < benchLeaked {
			book(benchPerBlock, node, fmt.Sprintf("gone-%d", blk))
		}
		for ord := range 64 {
			if allocs[ord] == nil {
				free = append(free, int64(ord))
			}
		}
		name := fmt.Sprintf("10-%d-%d-%d-26", benchAddr(blk, 0).As4()[1], benchAddr(blk, 0).As4()[2], benchAddr(blk, 0).As4()[3])
		add("ipamblocks", calico.KindIPAMBlock, name, map[string]any{"cidr": netip.PrefixFrom(benchAddr(blk, 0), 26).String(),
			"affinity": "host:" + node, "allocations": allocs, "unallocated": free, "attributes": attrs, "deleted": false,
			"sequenceNumber": int64(100), "strictAffinity": false})
		add("blockaffinities", calico.KindBlockAffinity, node+"-"+name, map[string]any{"cidr": netip.PrefixFrom(benchAddr(blk, 0), 26).String(),
			"node": node, "state": "confirmed", "deleted": "false"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	clock := func() time.Time { return now }
	run := func(w *informer.Informer) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Run(ctx)
		}()
	}
	lw := func(list apiruntime.Object) informer.ListWatch {
		return informer.ListWatch{
			List:  func(context.Context, metav1.ListOptions) (apiruntime.Object, error) { return list, nil },
			Watch: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}
	}
	// The lists stay alive (the list functions hold them): the
	// differences of the heap are what the informers keep.
	base := heapNow()
	cl = newClusterOf(lw(pods), lw(nodes), func() {}, run, clock)
	if err := cl.start(); err != nil {
		b.Fatal(err)
	}
	for !cl.pods.HasSynced() || !cl.nodes.HasSynced() {
		time.Sleep(10 * time.Millisecond) // the informers list once, at start
	}
	// A Consul cluster of the first benchMembers pods, read as the
	// leader reads it, from an agent that answers a fixed view.
	cl.reader = newGossipReader(cl, func(gossipPod) (sourcegossip.Agent, error) { return benchAgentOf(pods), nil }, clock)
	cl.reader.round(ctx)
	h1 := heapNow()
	var rs []calico.Resource
	for plural, kind := range calicoPlurals {
		rs = append(rs, calico.Resource{GroupVersionResource: calicoGVR(plural), Kind: kind})
	}
	if err := cl.watchCalico(rs, benchLedger{lists: lists}); err != nil {
		b.Fatal(err)
	}
	for !cl.settled() {
		time.Sleep(10 * time.Millisecond) // the informers list once, at start
	}
	h2 := heapNow()
	return cl, benchHeap{perPod: (float64(h2) - float64(base)) / benchPods, ledgerPerPod: (float64(h2) - float64(h1)) / benchPods},
		func() { cancel(); wg.Wait() }
}

// benchAgent is a Consul agent whose view lists the first benchMembers
// pods alive, and benchGhosts failed members at the addresses of pods that
// started after they went.
type benchView struct{ v snapshot.GossipView }

func (b *benchView) Members(context.Context) (*snapshot.GossipView, error) {
	v := b.v
	v.Members = slices.Clone(b.v.Members)
	return &v, nil
}

func benchAgentOf(pods *corev1.PodList) sourcegossip.Agent {
	v := snapshot.GossipView{System: "consul", From: "bench", Local: pods.Items[0].Name}
	for i := range benchMembers {
		p := &pods.Items[i]
		v.Members = append(v.Members, snapshot.GossipMember{Name: p.Name, Addr: netip.MustParseAddr(p.Status.PodIP), Port: 8301, Status: snapshot.MemberAlive})
	}
	for k := range benchGhosts {
		p := &pods.Items[1+k*(benchMembers/benchGhosts)]
		v.Members = append(v.Members, snapshot.GossipMember{Name: fmt.Sprintf("ghost-%d", k), Addr: netip.MustParseAddr(p.Status.PodIP), Port: 8301,
			Status: snapshot.MemberFailed, Since: p.Status.StartTime.Add(-time.Hour)})
	}
	return &benchView{v: v}
}

// benchHeap is the heap the leader keeps, per pod: all of it, and the
// converted Calico ledger's part.
type benchHeap struct{ perPod, ledgerPerPod float64 }

// BenchmarkControllerPass measures the leader on 150,000 pods and 2,500
// Calico blocks: one full pass (the snapshot assembled from the informers
// and every cluster rule run on it, duplicate-pod-ip from its index), and
// one pod event (a pod's IP changes: the informer's trimmed Pod converted
// and the index updated). index builds the index from every pod; its
// B/pod is the heap the index keeps per pod beyond the informer cache (its
// record of the pod, with its address, and its maps). heap-B/pod is
// everything the leader keeps, the informers' caches of Pods and Nodes and
// the converted Calico ledger included; calico-B/pod the ledger's part.
func BenchmarkControllerPass(b *testing.B) {
	now := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
	cl, heap, stop := benchCluster(b, now)
	defer stop()
	rules, _ := Rules(rule.All(rule.Config{}))
	c := New(Config{Rules: rules, Metrics: NewMetrics(prometheus.NewRegistry(), rules), Now: func() time.Time { return now }})
	judged := rules
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			c.judge(context.Background(), cl, judged)
		}
		// The process's CPU time, the garbage collector's included: on
		// shared cores the wall time also counts the waits for them.
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		st := c.Status()
		if len(st.Skipped) != 0 || st.Findings != benchMisbooked+benchLeaked+benchGhosts {
			b.Fatalf("%d findings, skipped %+v; want %d", st.Findings, st.Skipped, benchMisbooked+benchLeaked+benchGhosts)
		}
		b.ReportMetric(heap.perPod, "heap-B/pod")
		b.ReportMetric(heap.ledgerPerPod, "calico-B/pod")
	})
	b.Run("event", func(b *testing.B) {
		// What the informer hands the handler: its trimmed Pod.
		var moved [2]any
		for i := range moved {
			p, _ := trimPod(benchPod(77, netip.AddrFrom4([4]byte{10, 200, 0, byte(i)}), now))
			moved[i] = p
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			cl.setPod(moved[i%2])
			i++
		}
	})
	b.Run("index", func(b *testing.B) {
		// The index alone, built from the informer's trimmed Pods (kept
		// outside the measure, as the informer keeps them).
		trimmed := make([]any, benchPods)
		for i := range trimmed {
			trimmed[i], _ = trimPod(benchPod(i, benchAddr(i/benchPerBlock, i%benchPerBlock), now))
		}
		build := func() *cluster {
			x := &cluster{idx: snapshot.NewPodIndex(), changed: func() {}}
			for _, p := range trimmed {
				x.setPod(p)
			}
			return x
		}
		b.ReportAllocs()
		for b.Loop() {
			build()
		}
		before := heapNow()
		x := build()
		b.ReportMetric((float64(heapNow())-float64(before))/benchPods, "B/pod")
		runtime.KeepAlive(x)
		runtime.KeepAlive(trimmed)
	})
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
