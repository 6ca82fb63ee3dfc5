package gossip

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// gossipPod is a running pod of namespace shop at ip, started at start,
// annotated as a member of a gossip cluster of system whose agent's API
// listens on port (no port annotation when 0).
func gossipPod(name, uid, ip, system string, port uint16, start time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.Time{Time: start},
			Annotations: map[string]string{AnnotationGossip: system}},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}},
	}
	if port != 0 {
		p.Annotations[AnnotationGossipPort] = strconv.Itoa(int(port))
	}
	return p
}

// Every annotation the Watch reads starts with AnnotationPrefix: the pod
// informer keeps those annotations, and no other.
func TestAnnotationsKeptByThePrefix(t *testing.T) {
	for _, a := range []string{AnnotationGossip, AnnotationGossipPort, AnnotationGossipCluster, AnnotationGossipScheme} {
		if !strings.HasPrefix(a, AnnotationPrefix) {
			t.Errorf("%s does not start with %s: the pod informer drops it", a, AnnotationPrefix)
		}
	}
}

// The annotations, as they are read.
func TestAnnotatedPod(t *testing.T) {
	p := gossipPod("consul-0", "u1", "10.244.1.5", "consul", 0, time.Now())
	p.Annotations[AnnotationGossipCluster] = "mesh"
	p.Annotations[AnnotationGossipScheme] = "https"
	g, ok := annotatedPod(p)
	if !ok || g.err != "" || g.key != (snapshot.GossipCluster{System: "consul", Cluster: "shop/mesh"}) || g.port != 8500 || g.scheme != "https" || g.ip != netip.MustParseAddr("10.244.1.5") {
		t.Errorf("%+v %v", g, ok)
	}
	if m := g.member(); m != (Member{Namespace: "shop", Name: "consul-0", UID: "u1", System: "consul", Cluster: "shop/mesh", Addr: netip.MustParseAddrPort("10.244.1.5:8500"), Scheme: "https"}) {
		t.Errorf("member %+v", m)
	}
	if g, _ := annotatedPod(gossipPod("serf-0", "u2", "10.244.1.6", "serf", 0, time.Now())); g.port != 7373 || g.err != "" || g.key.Cluster != "shop/serf" {
		t.Errorf("serf's default port: %+v", g)
	}
	pending := p.DeepCopy()
	pending.Status.Phase = corev1.PodPending
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	noIP := p.DeepCopy()
	noIP.Status.PodIP = ""
	plain := p.DeepCopy()
	plain.Annotations = nil
	for name, q := range map[string]*corev1.Pod{"pending": pending, "deleting": deleting, "no IP": noIP, "not annotated": plain} {
		if _, ok := annotatedPod(q); ok {
			t.Errorf("%s: read as a gossip member", name)
		}
	}
	bad := p.DeepCopy()
	bad.Annotations[AnnotationGossipPort] = "http"
	bad.Annotations[AnnotationGossipScheme] = "udp"
	if g, _ := annotatedPod(bad); g.err != `ghostwatch.io/gossip-scheme: "udp" is not http or https; ghostwatch.io/gossip-port: "http" is not a port` {
		t.Errorf("errors: %q", g.err)
	}
}
