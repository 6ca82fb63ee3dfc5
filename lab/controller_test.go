package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
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
	labcalico "github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The controller on the real API server, with exactly the identity
// deploy/controller grants: it may list and watch Pods, Nodes and Calico's
// IPAM objects, write Events and its Lease, and nothing else; it takes the
// Lease, and reports a duplicate pod IP as a metric and an Event on each
// pod.
func TestRealController(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	ctx := context.Background()
	ms, err := deploy.Controller()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, ok := m.Object.(*corev1.Namespace); ok {
			continue // deploy/agent made it, the same
		}
		if err := createObject(ctx, e.cp.Admin, m.Object); err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
	}
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
	metrics := e.realController(t)
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
	if m := metrics(t); !strings.Contains(m, `ghostwatch_source_up{source="calico"} 1`) {
		t.Errorf("Calico's ledger is served but not read:\n%s", grepLines(m, "ghostwatch_source"))
	}

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

// realController runs the ghostwatch binary's controller with the identity
// deploy/controller grants, until the test ends; it returns a function
// reading its metrics.
func (e *realEnv) realController(t *testing.T) func(*testing.T) string {
	t.Helper()
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserController)
	if err != nil {
		t.Fatal(err)
	}
	ln := "127.0.0.1:9809"
	runUntilCleanup(t, "controller", exec.Command(ghostwatchBinary(t), "controller", "--kubeconfig="+kubeconfig, "--identity=controller-0",
		"--lease-namespace=ghostwatch", "--listen="+ln, "--log-format=text"))
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
