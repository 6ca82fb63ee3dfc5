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
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/deploy"
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
