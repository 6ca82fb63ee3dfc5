package controller

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
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
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/informer"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The cluster of BenchmarkControllerPass: 150,000 pods on 2,500 nodes, each
// node with one Calico block of 64 addresses, 60 of them allocated to its
// pods (one handle each); a few allocations booked under the next node
// (misbooked) and a few for pods that are gone (leaked).
// benchPods pods (GHOSTWATCH_BENCH_PODS, default 150,000) in benchBlocks
// Calico blocks of benchPerBlock pods, a node each.
var benchPods, benchBlocks = benchSize()

func benchSize() (pods, blocks int) {
	pods = 150000
	if v := os.Getenv("GHOSTWATCH_BENCH_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		// The cluster holds a Consul cluster of benchMembers pods, and
		// misbooked and leaked addresses in as many blocks.
		if least := max(benchMembers, (benchMisbooked+benchLeaked+1)*benchPerBlock); err != nil || n < least {
			panic(fmt.Sprintf("GHOSTWATCH_BENCH_PODS=%q: want a number of pods, at least %d", v, least))
		}
		pods = n
	}
	return pods / benchPerBlock * benchPerBlock, pods / benchPerBlock
}

const (
	// benchMembers pods are members of a Consul cluster, benchGhosts of
	// whose members are ghosts.
	benchMembers   = 5000
	benchGhosts    = 10
	benchPerBlock  = 60
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

// benchCluster builds the cluster's objects and returns the leader's
// sources, started and settled on them, with the heap they keep.
func benchCluster(b *testing.B, now time.Time) (sources []source.Source, heap benchHeap, stop func()) {
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
				pods.Items[i].Annotations = map[string]string{sourcegossip.AnnotationGossip: "consul"}
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
	clock := func() time.Time { return now }
	lw := func(list apiruntime.Object) *informer.ListWatch {
		return &informer.ListWatch{
			List:  func(context.Context, metav1.ListOptions) (apiruntime.Object, error) { return list, nil },
			Watch: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}
	}
	settle := func(ss ...source.Settler) {
		for _, s := range ss {
			for !s.Settled() {
				time.Sleep(10 * time.Millisecond) // the informers list once, at start
			}
		}
	}
	// The lists stay alive (the list functions hold them): the
	// differences of the heap are what the sources keep.
	base := heapNow()
	kw := &live.ClusterWatch{Pods: lw(pods), Nodes: lw(nodes), KeepAnnotations: []string{sourcegossip.AnnotationPrefix}, Now: clock}
	// A Consul cluster of the first benchMembers pods, read as the
	// leader reads it, from an agent that answers a fixed view.
	gw := &sourcegossip.Watch{Pods: kw, Interval: time.Hour, Now: clock,
		Clusters: &sourcegossip.Declarations{Clusters: []sourcegossip.Declared{{System: "consul", Namespace: "ns"}}},
		Agent:    func(sourcegossip.Member) (sourcegossip.Agent, error) { return benchAgentOf(pods), nil }}
	discovery := fake.NewClientset()
	servingCalico(discovery)
	cw := &calico.Watch{Discovery: discovery.Discovery(), Dynamic: benchLedger{lists: lists}, Now: clock}
	for _, l := range []source.Live{gw, kw} {
		if err := l.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	settle(kw, gw)
	h1 := heapNow()
	if err := cw.Start(ctx); err != nil {
		b.Fatal(err)
	}
	settle(cw)
	h2 := heapNow()
	return []source.Source{kw, cw, gw}, benchHeap{perPod: (float64(h2) - float64(base)) / float64(benchPods), ledgerPerPod: (float64(h2) - float64(h1)) / float64(benchPods)}, cancel
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

// BenchmarkControllerPass measures the leader on benchPods pods (150,000
// and 2,500 Calico blocks unless GHOSTWATCH_BENCH_PODS says otherwise): one full pass (the sources collected into a snapshot,
// the pods lent by the cluster's watch, and every cluster rule run on it,
// duplicate-pod-ip from the pod index). heap-B/pod is everything the
// leader's sources keep, the informers' caches of Pods and Nodes, the pod
// index and the converted Calico ledger included; calico-B/pod the
// ledger's part. What one pod event costs, and what the pod index keeps,
// is source/kube/live's BenchmarkClusterWatch.
func BenchmarkControllerPass(b *testing.B) {
	now := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
	sources, heap, stop := benchCluster(b, now)
	defer stop()
	rules := clusterRules()
	c := New(Config{Sources: sources, Rules: rules, Metrics: NewMetrics(prometheus.NewRegistry(), rules), Now: func() time.Time { return now }})
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		c.judge(context.Background())
	}
	// The process's CPU time, the garbage collector's included: on
	// shared cores the wall time also counts the waits for them.
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	st := c.Status()
	if len(st.Skipped) != 0 || st.Findings != benchMisbooked+benchLeaked+benchGhosts {
		b.Fatalf("%d findings, skipped %+v; want %d", st.Findings, st.Skipped, benchMisbooked+benchLeaked+benchGhosts)
	}
	b.ReportMetric(float64(benchPods), "pods")
	b.ReportMetric(heap.perPod, "heap-B/pod")
	b.ReportMetric(heap.ledgerPerPod, "calico-B/pod")
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
