package lab

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/fresh"
)

// On the real API server, a dual-stack pod is found by its first address
// only (field selector status.podIP), which the fake clientset does not
// show. Where no Node gives pod CIDRs (Calico, Cilium's cluster pool, AWS's
// VPC CNI), the re-check's quorum read therefore refuses to call the
// second address held by no pod: it refuses when nothing says which family
// comes first, and when the pods watched show it is the second; it finds
// the pod by its first address.
func TestRealQuorumSecondFamilyWithoutPodCIDRs(t *testing.T) {
	ctx, cp := startControlPlane(t, controlplane.Options{})
	api := cp.Admin
	if _, err := api.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "calico-node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParseAddr("10.10.3.7"), netip.MustParseAddr("fd00:10:3::7")
	p, err := api.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
		Spec: corev1.PodSpec{NodeName: "calico-node-1", Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = v4.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
	if _, err := api.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What the API server does: the second address selects nothing.
	l, err := api.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.podIP", v6.String()).String()})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("status.podIP=%s: %d pods, %v; the test expects the API server to select by the first address only", v6, len(l.Items), err)
	}
	q := snapshot.Query{PodIPs: []netip.Addr{v6}, Nodes: []string{"calico-node-1"}}
	if _, err := fresh.Quorum(ctx, api, q); err == nil || !strings.Contains(err.Error(), "neither a Node's pod CIDRs nor the pods watched show") {
		t.Errorf("nothing known of the families: %v; want a refusal", err)
	}
	fam := fresh.FamiliesOf([]snapshot.Pod{kube.Pod(p)})
	if _, err := fresh.QuorumFamilies(ctx, api, q, fam); err == nil || !strings.Contains(err.Error(), "second address family") {
		t.Errorf("the pods watched show %s second (%+v): %v; want a refusal", v6, fam, err)
	}
	k, err := fresh.QuorumFamilies(ctx, api, snapshot.Query{PodIPs: []netip.Addr{v4}}, fam)
	if err != nil || len(k.Pods) != 1 || k.Pods[0].Name != "web-0" {
		t.Errorf("the pod at its first address: %+v, %v", k, err)
	}
}
