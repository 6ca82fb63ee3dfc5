package live

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// The cluster watch is a live source that settles, lends and re-reads.
var (
	_ source.Live    = (*ClusterWatch)(nil)
	_ source.Settler = (*ClusterWatch)(nil)
	_ source.Lender  = (*ClusterWatch)(nil)
	_ source.Fresher = (*ClusterWatch)(nil)
)

func clusterPod(name, uid, ip string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + uid), Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// podEvents records what OnPod's handler is told.
type podEvents struct {
	mu   sync.Mutex
	seen []string
}

func (e *podEvents) on(p *corev1.Pod, deleted bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := p.Name
	if deleted {
		s += " deleted"
	}
	for k, v := range p.Annotations {
		s += " " + k + "=" + v
	}
	e.seen = append(e.seen, s)
}

func (e *podEvents) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.seen {
		if x == s {
			return true
		}
	}
	return false
}

func startCluster(t *testing.T, w *ClusterWatch) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "pods and nodes listed", w.Settled)
	return cancel
}

// Every Pod and Node, the pods in an index of their IPs; the handlers see
// each pod with the annotations asked for only, and its deletion.
func TestClusterWatchHoldsEveryPodAndNode(t *testing.T) {
	client := fake.NewClientset(
		clusterPod("a", "a", "10.244.1.5", map[string]string{"ghostwatch.io/gossip": "consul", "other.io/x": "y"}),
		clusterPod("b", "b", "10.244.1.5", nil),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}}},
	)
	w := &ClusterWatch{Client: client, KeepAnnotations: []string{"ghostwatch.io/gossip"}}
	var events podEvents
	w.OnPod(events.on)
	changes := make(chan struct{}, 1)
	w.OnChange(func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	})
	startCluster(t, w)
	if !events.has("a ghostwatch.io/gossip=consul") || !events.has("b") {
		t.Errorf("the handler saw %q", events.seen)
	}
	if got := w.Reporting(netip.MustParseAddr("10.244.1.5")); got != 2 {
		t.Errorf("Reporting = %d, want 2", got)
	}
	if c := w.Changes(); !c.All || c.Why != "cluster" {
		t.Errorf("changes after the lists: %+v", c)
	}
	if c := w.Changes(); !c.Empty() {
		t.Errorf("changes taken twice: %+v", c)
	}
	s := &snapshot.Snapshot{Taken: time.Now()}
	if err := w.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Kube.Pods) != 2 || len(s.Kube.Nodes) != 1 || s.Kube.Index == nil || len(s.Kube.Nodes[0].PodCIDRs) != 1 {
		t.Errorf("collected %+v", s.Kube)
	}
	if got := w.Describe(s); got != "2 pods, 1 node" {
		t.Errorf("Describe = %q", got)
	}
	if shared := s.Kube.Index.Shared(); len(shared[netip.MustParseAddr("10.244.1.5")]) != 2 {
		t.Errorf("the index shares %v", shared)
	}
	w.Return()

	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the deletion seen", func() bool { return events.has("b deleted") })
	if got := w.Reporting(netip.MustParseAddr("10.244.1.5")); got != 1 {
		t.Errorf("Reporting after the deletion = %d, want 1", got)
	}
}

// What Collect lends stays as it is until Return: a pod event waits for
// it, and lands after.
func TestClusterWatchLendsUntilReturn(t *testing.T) {
	client := fake.NewClientset(clusterPod("a", "a", "10.244.1.5", nil))
	w := &ClusterWatch{Client: client}
	var events podEvents
	w.OnPod(events.on)
	startCluster(t, w)
	s := &snapshot.Snapshot{Taken: time.Now()}
	if err := w.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	lent := s.Kube.Pods
	if _, err := client.CoreV1().Pods("ns").Create(context.Background(), clusterPod("b", "b", "10.244.1.6", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer has the new pod; its handler waits for the loan.
	poll.Until(t, poll.Patience, "the informer to hold pod b", func() bool {
		_, ok, _ := w.current().pods.Store().GetByKey("ns/b")
		return ok
	})
	if len(lent) != 1 || lent[0].Name != "a" || events.has("b") {
		t.Fatalf("the lent pods changed: %+v, handler saw %q", lent, events.seen)
	}
	w.Return()
	poll.Until(t, poll.Patience, "pod b indexed after the loan", func() bool { return events.has("b") && w.Reporting(netip.MustParseAddr("10.244.1.6")) == 1 })
	w.Return() // a second Return is harmless
}

// A watch is started again once the last ctx ended, afresh; not while it
// runs.
func TestClusterWatchStartsAgain(t *testing.T) {
	client := fake.NewClientset(clusterPod("a", "a", "10.244.1.5", nil))
	w := &ClusterWatch{Client: client}
	cancel := startCluster(t, w)
	if err := w.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "being watched already") {
		t.Errorf("a second Start while watching: %v", err)
	}
	first := w.current()
	cancel()
	startCluster(t, w)
	if w.current() == first {
		t.Error("the second Start did not start afresh")
	}
	if w.Reporting(netip.MustParseAddr("10.244.1.5")) != 1 {
		t.Error("the second watch does not hold the pod")
	}
}

// A list the API server refuses makes the source not ready, with the
// resource named, and Collect fails without touching the snapshot.
func TestClusterWatchNotReadyWhenRefused(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC"))
	})
	w := &ClusterWatch{Client: client}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Collect(ctx, &snapshot.Snapshot{}); err == nil {
		t.Error("collected before Start")
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the refusal seen", func() bool {
		err := w.Ready(time.Now())
		return err != nil && strings.Contains(err.Error(), "nodes: not listed yet: ") && apierrors.IsForbidden(err)
	})
	s := &snapshot.Snapshot{Taken: time.Now()}
	if err := w.Collect(ctx, s); err == nil || s.Kube != nil {
		t.Errorf("Collect = %v, Kube %+v", err, s.Kube)
	}
	w.Return() // nothing lent: harmless
}

// Fresh reads what a re-check names of the cluster, and leaves the
// snapshot alone when it names none (a gossip cluster only).
func TestClusterWatchFresh(t *testing.T) {
	client := fake.NewClientset(clusterPod("a", "a", "10.244.1.5", nil))
	w := &ClusterWatch{Client: client}
	kept := &snapshot.Kube{}
	s := &snapshot.Snapshot{Kube: kept}
	if err := w.Fresh(context.Background(), snapshot.Query{Gossip: []snapshot.GossipCluster{{System: "consul", Cluster: "ns/consul"}}}, s); err != nil || s.Kube != kept {
		t.Errorf("a query of no cluster object: %v, Kube replaced: %v", err, s.Kube != kept)
	}
	if err := w.Fresh(context.Background(), snapshot.Query{PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}, s); err != nil {
		t.Fatal(err)
	}
	if s.Kube == kept || len(s.Kube.Pods) != 1 || s.Kube.Pods[0].Name != "a" {
		t.Errorf("fresh pods %+v", s.Kube)
	}
}
