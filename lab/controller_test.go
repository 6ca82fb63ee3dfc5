package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	labcalico "github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// The controller on the real API server, with exactly the identity
// deploy/controller grants: it may list and watch Pods, Nodes and Calico's
// IPAM objects, write Events and its Lease, and nothing else; it takes the
// Lease, and reports a duplicate pod IP as a metric and an Event on each
// pod.
func TestRealController(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	ctx := context.Background()
	e.installController(t)
	client, err := kubernetes.NewForConfig(e.cp.Config(controlplane.UserController))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, group, resource, verb string
		allowed                   bool
	}{
		{"", "", "pods", "list", true}, {"", "", "pods", "watch", true},
		{"", "", "events", "create", true}, {"", "", "events", "patch", true},
		{"ghostwatch", "coordination.k8s.io", "leases", "get", true},
		{"ghostwatch", "coordination.k8s.io", "leases", "create", true},
		{"ghostwatch", "coordination.k8s.io", "leases", "update", true},
		{"kube-system", "coordination.k8s.io", "leases", "update", false},
		{"ghostwatch", "coordination.k8s.io", "leases", "delete", false},
		{"", "", "pods", "delete", false}, {"", "", "pods", "update", false},
		{"", "", "nodes", "list", true}, {"", "", "nodes", "watch", true}, {"", "", "nodes", "get", false},
		{"", "", "nodes", "update", false},
		{"", "crd.projectcalico.org", "ipamblocks", "list", true}, {"", "crd.projectcalico.org", "ipamblocks", "watch", true},
		{"", "crd.projectcalico.org", "ipamhandles", "list", true}, {"", "crd.projectcalico.org", "ipamhandles", "watch", true},
		{"", "crd.projectcalico.org", "blockaffinities", "list", true}, {"", "crd.projectcalico.org", "blockaffinities", "watch", true},
		{"", "crd.projectcalico.org", "ippools", "list", true}, {"", "crd.projectcalico.org", "ippools", "watch", true},
		{"", "crd.projectcalico.org", "kubecontrollersconfigurations", "list", true},
		{"", "crd.projectcalico.org", "kubecontrollersconfigurations", "watch", true},
		{"", "crd.projectcalico.org", "ipamblocks", "get", false}, {"", "crd.projectcalico.org", "ipamblocks", "update", false},
		{"", "crd.projectcalico.org", "ipamhandles", "delete", false}, {"", "crd.projectcalico.org", "ipamconfigs", "list", false},
		{"", "", "services", "list", false}, {"", "", "secrets", "list", false}, {"", "", "configmaps", "list", false},
	} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.ns, Group: tc.group, Resource: tc.resource, Verb: tc.verb}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("controller %s %s.%s in %q: allowed %t, want %t (%s)", tc.verb, tc.resource, tc.group, tc.ns, r.Status.Allowed, tc.allowed, r.Status.Reason)
		}
	}

	// Calico's datastore, as Calico's manifests install it: the
	// controller finds its resources served when it starts leading.
	if _, err := e.cp.InstallCRDs(ctx, labcalico.CRDs()); err != nil {
		t.Fatal(err)
	}
	// The gossip remedy on, with the member lists read every second and a
	// grace of 2 s (defaults: 30 s and 1 min), for the test's patience.
	// The Serf cluster of namespace gossip and the Consul cluster of
	// namespace consul declared, as an operator would: Consul's ACL token
	// from a mounted file, sent over plain HTTP on 127.0.0.x only because
	// the declaration allows it.
	dir := t.TempDir()
	clusters, token := filepath.Join(dir, "gossip-clusters.yaml"), filepath.Join(dir, "consul-token")
	if err := os.WriteFile(token, []byte(consultest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(clusters, []byte("clusters:\n- {system: serf, namespace: gossip}\n"+
		"- {system: consul, namespace: consul, tokenFile: "+token+", allowPlaintextCredentials: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	metrics := e.realController(t, "--remedy=gossip-force-leave", "--gossip-interval=1s", "--grace=2s", "--gossip-clusters="+clusters)
	e.eventually(t, time.Minute, "the controller to lead", func() bool {
		l, err := e.api.CoordinationV1().Leases("ghostwatch").Get(ctx, "ghostwatch-controller", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "controller-0"
	})

	// Two pods on nodes without a kubelet, their IPs written as a kubelet
	// would: one address.
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dup"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"node-7", "node-8"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "dup", Name: fmt.Sprintf("web-%d", i)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}
		p, err := e.api.CoreV1().Pods("dup").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.9.9", PodIPs: []corev1.PodIP{{IP: "10.244.9.9"}},
			StartTime: &metav1.Time{Time: time.Now()}}
		if _, err := e.api.CoreV1().Pods("dup").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.eventually(t, time.Minute, "the duplicate reported", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_findings{rule="duplicate-pod-ip",severity="critical"} 1`)
	})
	e.eventually(t, time.Minute, "a DuplicatePodIP Event on each pod", func() bool {
		return e.hasEvent(t, "dup", "Pod", "web-0", "DuplicatePodIP") && e.hasEvent(t, "dup", "Pod", "web-1", "DuplicatePodIP")
	})
	// Calico's watch lists five resources; the duplicate needs only the
	// pods, and may be reported first.
	e.eventually(t, time.Minute, "Calico's ledger, served, to be read", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_source_up{source="calico"} 1`)
	})

	// Seed 002's misbooking, written as calico-ipam writes it: pod
	// cal/web-m runs on node-8, and its address is booked under node-7,
	// another existing node, whose leak collector frees it while the pod
	// runs.
	for _, n := range []string{"node-7", "node-8"} {
		if _, err := e.api.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cal"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := e.api.CoreV1().Pods("cal").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "cal", Name: "web-m"},
		Spec: corev1.PodSpec{NodeName: "node-8", Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.60.5", PodIPs: []corev1.PodIP{{IP: "10.244.60.5"}},
		StartTime: &metav1.Time{Time: time.Now()}}
	if _, err := e.api.CoreV1().Pods("cal").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.cp.Config(controlplane.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	handleID := labcalico.NetworkName + ".5eed002"
	writeCalico(t, dyn, labcalico.IPAMHandles, labcalico.HandleName(handleID), "IPAMHandle", &labcalico.IPAMHandle{
		HandleID: handleID, Block: map[string]int{"10.244.60.0/26": 1}})
	writeCalico(t, dyn, labcalico.IPAMBlocks, "10-244-60-0-26", "IPAMBlock", misbookedBlock(handleID, "node-7", "cal", "web-m", 5))
	e.eventually(t, time.Minute, "ipam-misbooked reported", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_findings{rule="ipam-misbooked",severity="critical"} 1`)
	})
	e.eventually(t, time.Minute, "a Warning IPAMMisbooked Event on the pod", func() bool {
		return e.hasWarning(t, "cal", "Pod", "web-m", "IPAMMisbooked")
	})

	// The misbooking deleted, the finding goes.
	if err := dyn.Resource(labcalico.IPAMBlocks).Delete(ctx, "10-244-60-0-26", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(t, time.Minute, "ipam-misbooked gone", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_findings{rule="ipam-misbooked",severity="critical"} 0`)
	})

	realGossipGhost(t, e, metrics)
	realConsulGhost(t, e, metrics)
}

// realConsulGhost plays seed 000 on its own system: real Consul agents
// with ACLs on (default deny) on 127.0.0.x, their pods annotated in the
// real API server. Client ip-127-0-0-73, named after its IP, dies without
// leaving; pod consul-3 gets its address and an agent of another name. The
// controller reports the ghost and forces it out (force-leave with prune,
// the declared token's operator:write) through the oldest pod's agent, and
// the finding goes. A pod of another namespace, annotated as a Consul
// agent, is asked nothing: the token stays with the declared cluster.
func realConsulGhost(t *testing.T, e *realEnv, metrics func(*testing.T) string) {
	ctx := context.Background()
	server := consultest.Start(t, consultest.Config{Name: "consul-0", Addr: netip.MustParseAddr("127.0.0.71"), Server: true})
	survivor := consultest.Start(t, consultest.Config{Name: "consul-1", Addr: netip.MustParseAddr("127.0.0.72"), Join: server.Addr})
	old := consultest.Start(t, consultest.Config{Name: "ip-127-0-0-73", Addr: netip.MustParseAddr("127.0.0.73"), Join: server.Addr})
	// The tenant's pod claims to be a Consul agent.
	var asked atomic.Int32
	tenant := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		t.Errorf("the tenant's pod was asked %s %s (token %q)", r.Method, r.URL, r.Header.Get("X-Consul-Token"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.79:8500")
	if err != nil {
		t.Fatal(err)
	}
	go tenant.Serve(ln)
	t.Cleanup(func() { tenant.Close() })
	for _, ns := range []string{"consul", "tenant"} {
		if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name, ip string, start time.Time) {
		p, err := e.api.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{sourcegossip.AnnotationGossip: "consul"}},
			Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "consul", Image: "hashicorp/consul:1.14.11"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}}
		if _, err := e.api.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hour := time.Now().Add(-time.Hour)
	pod("tenant", "not-consul", "127.0.0.79", hour.Add(-time.Hour))
	pod("consul", "consul-0", "127.0.0.71", hour)
	pod("consul", "consul-1", "127.0.0.72", hour.Add(time.Minute))
	pod("consul", "consul-2", "127.0.0.73", hour.Add(2*time.Minute))
	e.eventually(t, time.Minute, "the controller to read the three members alive", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_gossip_members{cluster="consul/consul",status="alive",system="consul"} 3`)
	})
	read := time.Now()
	killed := time.Now()
	old.Kill()
	if err := e.api.CoreV1().Pods("consul").Delete(ctx, "consul-2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	pastTheClocks(read)
	pod("consul", "consul-3", "127.0.0.73", time.Now())
	consultest.Start(t, consultest.Config{Name: "node-8c1f3e", Addr: netip.MustParseAddr("127.0.0.73"), Join: server.Addr})

	e.eventually(t, 2*time.Minute, "a GossipGhostMember Event on the new pod", func() bool {
		return e.hasWarning(t, "consul", "Pod", "consul-3", "GossipGhostMember")
	})
	e.eventually(t, time.Minute, "the ghost forced out", func() bool {
		return e.hasEvent(t, "consul", "Pod", "consul-3", "GossipMemberForcedOut")
	})
	e.eventually(t, time.Minute, "the ghost pruned from the survivor's list", func() bool {
		ms, err := survivor.Members()
		return err == nil && !slices.ContainsFunc(ms, func(m consultest.Member) bool { return m.Name == "ip-127-0-0-73" })
	})
	t.Logf("consul: the ghost of ip-127-0-0-73 forced out and pruned %s after its agent was killed", time.Since(killed).Round(100*time.Millisecond))
	e.eventually(t, time.Minute, "the finding gone", func() bool {
		m := metrics(t)
		return strings.Contains(m, `ghostwatch_findings{rule="gossip-ghost-member",severity="critical"} 0`) &&
			strings.Contains(m, `ghostwatch_remedy_actions_total{result="done",rule="gossip-ghost-member"} 2`)
	})
	if n := asked.Load(); n != 0 {
		t.Errorf("the tenant's pod was asked %d times", n)
	}
}

// realGossipGhost plays seed 000 with real Serf agents on 127.0.0.x and
// their pods in the real API server, annotated for the controller: the
// member of pod serf-1, named after its IP, dies without leaving; pod
// serf-2 gets its address and a member of another name. The controller
// reports the ghost, re-reads the pods at the address from the API server
// with its own identity, forces the ghost out through the survivor's RPC,
// and the finding goes.
func realGossipGhost(t *testing.T, e *realEnv, metrics func(*testing.T) string) {
	survivor := serfGhost(t, e, metrics)

	e.eventually(t, time.Minute, "a GossipGhostMember Event on the new pod", func() bool {
		return e.hasWarning(t, "gossip", "Pod", "serf-2", "GossipGhostMember")
	})
	e.eventually(t, time.Minute, "the ghost forced out", func() bool {
		return e.hasEvent(t, "gossip", "Pod", "serf-2", "GossipMemberForcedOut")
	})
	for _, m := range survivor.Members() {
		if m.Name == "node-127-0-0-2" {
			t.Errorf("the survivor still lists the ghost, %s", m.Status)
		}
	}
	e.eventually(t, time.Minute, "the finding gone", func() bool {
		m := metrics(t)
		return strings.Contains(m, `ghostwatch_findings{rule="gossip-ghost-member",severity="critical"} 0`) &&
			strings.Contains(m, `ghostwatch_remedy_actions_total{result="done",rule="gossip-ghost-member"} 1`)
	})
}

// serfGhost makes the incident of realGossipGhost on real Serf agents,
// their pods in namespace gossip: it returns the survivor once the
// newcomer has joined at the dead member's address.
func serfGhost(t *testing.T, e *realEnv, metrics func(*testing.T) string) *serftest.Agent {
	t.Helper()
	ctx := context.Background()
	survivor := serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.3:0"), RPC: netip.MustParseAddrPort("127.0.0.3:0")})
	old := serftest.Start(t, serftest.Config{Name: "node-127-0-0-2", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	old.Join(t, survivor.Gossip)
	rpcPort := netip.MustParseAddrPort(survivor.RPC).Port()
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gossip"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, ip string, start time.Time, annotations map[string]string) {
		p, err := e.api.CoreV1().Pods("gossip").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gossip", Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "serf", Image: "serf:0.10.2"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}}
		if _, err := e.api.CoreV1().Pods("gossip").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	serfPod := map[string]string{sourcegossip.AnnotationGossip: "serf"}
	pod("serf-0", "127.0.0.3", time.Now().Add(-time.Hour), map[string]string{sourcegossip.AnnotationGossip: "serf", sourcegossip.AnnotationGossipPort: fmt.Sprint(rpcPort)})
	pod("serf-1", "127.0.0.2", time.Now().Add(-time.Hour), serfPod)
	e.eventually(t, time.Minute, "the controller to read both members alive", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_gossip_members{cluster="gossip/serf",status="alive",system="serf"} 2`)
	})
	read := time.Now()
	old.Kill()
	if err := e.api.CoreV1().Pods("gossip").Delete(ctx, "serf-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	pastTheClocks(read)
	pod("serf-2", "127.0.0.2", time.Now(), serfPod)
	newcomer := serftest.Start(t, serftest.Config{Name: "node-8c1f3e", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	newcomer.Join(t, survivor.Gossip)
	return survivor
}

// pastTheClocks returns once a pod created now is proven another identity
// than a member the controller had read listed by read: created, on the
// API server's clock, more than the clocks' measured offsets after it (one
// machine: a second of resolution each way). A pod's start time proves
// nothing: the node's clock sets it.
func pastTheClocks(read time.Time) {
	time.Sleep(time.Until(read.Add(3 * time.Second)))
}

// misbookedBlock is the /26 block holding ordinal ord for pod ns/pod under
// handleID, booked under node, the rest of it free, as calico-ipam writes
// it.
func misbookedBlock(handleID, node, ns, pod string, ord int) *labcalico.IPAMBlock {
	affinity := "host:" + node
	b := &labcalico.IPAMBlock{CIDR: "10.244.60.0/26", Affinity: &affinity, Allocations: make([]*int, 64),
		Attributes: []labcalico.IPAMAttribute{{HandleID: &handleID, Secondary: map[string]string{
			"namespace": ns, "node": node, "pod": pod, "timestamp": time.Now().UTC().String()}}},
		SequenceNumber: 2, SequenceNumberForAllocation: map[string]uint64{fmt.Sprint(ord): 1}}
	zero := 0
	b.Allocations[ord] = &zero
	for i := range b.Allocations {
		if i != ord {
			b.Unallocated = append(b.Unallocated, i)
		}
	}
	return b
}

// writeCalico creates a crd.projectcalico.org/v1 object with *spec as its
// spec.
func writeCalico(t *testing.T, dyn dynamic.Interface, r schema.GroupVersionResource, name, kind string, spec any) {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(spec)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": r.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": m}}
	if _, err := dyn.Resource(r).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s %s: %v", kind, name, err)
	}
}

// hasWarning reports whether a Warning Event with reason is on the object.
func (e *realEnv) hasWarning(t *testing.T, ns, kind, name, reason string) bool {
	t.Helper()
	evs, err := e.api.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason && ev.Type == corev1.EventTypeWarning {
			return true
		}
	}
	return false
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// installController applies deploy/controller (its RBAC, its
// ServiceAccount), but its namespace, which deploy/agent made the same.
func (e *realEnv) installController(t *testing.T) {
	t.Helper()
	ms, err := deploy.Controller()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, ok := m.Object.(*corev1.Namespace); ok {
			continue
		}
		if err := createObject(context.Background(), e.cp.Admin, m.Object); err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
	}
}

// realController runs the ghostwatch binary's controller with the identity
// deploy/controller grants, until the test ends; it returns a function
// reading its metrics.
func (e *realEnv) realController(t *testing.T, args ...string) func(*testing.T) string {
	t.Helper()
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserController)
	if err != nil {
		t.Fatal(err)
	}
	ln := "127.0.0.1:9809"
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--history-listen=") }) {
		args = append([]string{"--history-listen="}, args...) // none: tests of other packages may hold its port
	}
	runUntilCleanup(t, "controller", exec.Command(ghostwatchBinary(t), append([]string{"controller", "--kubeconfig=" + kubeconfig, "--identity=controller-0",
		"--lease-namespace=ghostwatch", "--listen=" + ln, "--log-format=text"}, args...)...))
	return func(t *testing.T) string {
		t.Helper()
		resp, err := http.Get("http://" + ln + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}
