package live

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/internal/kubefake"
)

// podsOn returns pods pods spread over nodes Nodes, node-0 holding local of
// them, and the same 200 Services with a slice of 25 endpoints each
// whatever the number of pods (the Services select the first 5,000 pods; the
// others belong to no Service).
func podsOn(pods, nodes, local int) []kruntime.Object {
	const services, perService = 200, 25
	start := metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	objs := make([]kruntime.Object, 0, pods+2*services+nodes)
	ipOf := func(n int) string { return fmt.Sprintf("10.%d.%d.%d", 64+n>>16, n>>8&255, n&255) }
	for n := 0; n < pods; n++ {
		node := fmt.Sprintf("node-%d", 1+n%(nodes-1))
		if n < local {
			node = "node-0"
		}
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", n%50), Name: fmt.Sprintf("pod-%d", n), UID: types.UID(fmt.Sprintf("uid-%d", n)),
				CreationTimestamp: start, Labels: map[string]string{"app": fmt.Sprintf("app-%d", n/perService)}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/shop/app:1.27.3"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, PodIP: ipOf(n), PodIPs: []corev1.PodIP{{IP: ipOf(n)}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	ready := true
	for s := 0; s < services; s++ {
		name := fmt.Sprintf("svc-%d", s)
		objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", s%50), Name: name},
			Spec: corev1.ServiceSpec{ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", s>>8, s&255)}, Selector: map[string]string{"app": fmt.Sprintf("app-%d", s)},
				Ports: []corev1.ServicePort{{Port: 80}}}})
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", s%50), Name: name + "-x",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
		for i := 0; i < perService; i++ {
			n := s*perService + i
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ipOf(n)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: es.Namespace, Name: fmt.Sprintf("pod-%d", n), UID: types.UID(fmt.Sprintf("uid-%d", n))}})
		}
		objs = append(objs, es)
	}
	for n := 0; n < nodes; n++ {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", n)}})
	}
	return objs
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A node's informers hold what its node needs, whatever the size of the
// cluster: with 150,000 pods on 1,500 Nodes they keep, after syncing and
// converting what they hold for an audit, no more than 10 % more heap than
// with 1,500 pods on 15 Nodes, the node running 30 pods and the Services
// and EndpointSlices being the same in both. (client-go's fake clientset,
// made to honour field selectors, stands in for the API server: the
// objects the informers receive are those the API server would send.)
func TestNodeInformersHoldTheSameWhateverTheClusterSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a cluster of 150,000 pods")
	}
	held := map[int]uint64{}
	for _, c := range []struct{ pods, nodes int }{{1500, 15}, {150000, 1500}} {
		client := kubefake.NewClientset(podsOn(c.pods, c.nodes, 30)...)
		before := heapAlloc()
		inf := NewInformers(client, InformerOptions{Node: "node-0"})
		startSynced(t, inf)
		k := inf.Snapshot()
		held[c.pods] = heapAlloc() - before
		if len(k.Pods) != 30 || len(k.Endpoints) != 5000 || len(k.Nodes) != 1 {
			t.Fatalf("%d pods: the node's informers hold %d pods, %d endpoints, %d nodes; want 30, 5000, 1", c.pods, len(k.Pods), len(k.Endpoints), len(k.Nodes))
		}
		runtime.KeepAlive(k)
		runtime.KeepAlive(inf)
		t.Logf("%d pods on %d Nodes: %.2f MiB held by the informers and one snapshot", c.pods, c.nodes, float64(held[c.pods])/(1<<20))
	}
	if small, large := held[1500], held[150000]; float64(large) > 1.1*float64(small) {
		t.Errorf("the informers hold %d bytes with 150,000 pods, %d with 1,500: more than 10 %% more", large, small)
	}
}
