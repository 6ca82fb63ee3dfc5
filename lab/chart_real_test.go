package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/ghostwatch/ghostwatch/deploy/chart"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// The chart, every remedy on and a gossip cluster declared, applied with
// server-side apply to the real API server: every object is accepted; a
// SubjectAccessReview per verb shows the agent's and the controller's
// ServiceAccounts allowed what they use and denied every other verb (no
// write of a cluster object, no Secret but the declared token's, by name,
// in its namespace). Then the agent and both controller replicas run from
// the rendered DaemonSet and Deployment (runPod: their args, env, token,
// mounts, user and capabilities, nothing else): each is ready by its own
// readiness probe, one replica leads on the Lease the manifest names, and
// the agent, with the remedy the values turned on, clears the ghost of a
// pooled connection to a deleted pod.
func TestRealChartInstallsAndRunsWithLeastPrivilege(t *testing.T) {
	e := newRealNode(t, controlplane.ProxyIPTables, controlplane.Options{}, netbed.NodeOptions{ConntrackTimestamp: true})
	n2 := e.addNode(t, "node-2", netip.MustParseAddr("192.168.60.2"), netip.MustParsePrefix("10.244.8.0/24"))
	ctx, api := context.Background(), e.cp.Admin
	for _, ns := range []string{"ghostwatch", "shop"} {
		if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The declared cluster's token, as its operator keeps it.
	if _, err := api.CoreV1().Secrets("shop").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ghostwatch-consul"},
		StringData: map[string]string{"token": "a-consul-token"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Render("gw", "ghostwatch", `
agent:
  remedies: [stale-nat-flow, hostlocal-reserve]
  listenOnHostIP: true
  extraArgs: [`+minGraceFlag+`]
controller:
  remedies: [gossip-force-leave]
  gossipClusters:
  - {system: consul, namespace: shop, scheme: https, tokenSecret: {name: ghostwatch-consul, key: token}}
ipReader:
  enabled: true
  subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
collector:
  enabled: true
  subjects: [{kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}]
`)
	if err != nil {
		t.Fatal(err)
	}
	applyObjects(t, e, objs)
	checkChartAccess(t, e)

	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			fromUnstructured(t, o, &ds)
		case "Deployment":
			fromUnstructured(t, o, &dep)
		}
	}
	agent := e.runPod(t, e.node, "ghostwatch", "gw-agent-x7k2p", ds.Spec.Template.Spec, t.TempDir())
	var replicas []*runningPod
	for i, n := range []*controlplane.Node{e.node, n2} {
		replicas = append(replicas, e.runPod(t, n, "ghostwatch", fmt.Sprintf("gw-controller-5d8f9-%d", i), dep.Spec.Template.Spec, t.TempDir()))
	}

	// One replica leads, on the Lease its args name; the other stands by.
	lease := ""
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--lease-name="); ok {
			lease = v
		}
	}
	var leader string
	e.eventually(t, time.Minute, "a controller replica to lead on Lease ghostwatch/"+lease, func() bool {
		l, err := api.CoordinationV1().Leases("ghostwatch").Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		leader = *l.Spec.HolderIdentity
		return true
	})
	if leader != replicas[0].Name && leader != replicas[1].Name {
		t.Fatalf("Lease held by %q, neither replica", leader)
	}
	for _, r := range replicas {
		want := map[bool]string{true: "ok: leading", false: "ok: standing by (leader: " + leader + ")"}[r.Name == leader]
		e.eventually(t, time.Minute, fmt.Sprintf("%s /readyz to say %q", r.Name, want), func() bool {
			code, body, err := r.probe(r.c.ReadinessProbe)
			return err == nil && code == 200 && strings.HasPrefix(body, want)
		})
	}
	if m := agent.metrics(t); !strings.Contains(m, `ghostwatch_source_up{source="kube"} 1`) || !strings.Contains(m, `ghostwatch_source_up{source="conntrack"} 1`) {
		t.Errorf("the agent reads neither the API server nor the kernel as its manifest runs it:\n%s", grepLines(m, "ghostwatch_source_up"))
	}

	// A pooled connection pinned to a replica that is deleted: the agent
	// deletes its ghost, and the client is answered by another replica.
	app, fe := e.pooledReplicas(t)
	cctx, cancel := context.WithCancel(ctx)
	k := e.killPinned(t, keepAlive(cctx, app, fe), "db", "pg", 1, metav1.DeleteOptions{}, poll.Patience)
	cancel()
	t.Logf("the client answered by another replica %s after the first failure", k.window.Round(time.Millisecond))
	if k.last.Err != nil || k.last.Pod == k.victim {
		t.Errorf("the client must be answered by another replica: window %s, last outcome %+v; agent log:\n%s", k.window, k.last, agent.Logs)
	}
	if flows := e.flowsTo(t, k.ip); len(flows) != 0 {
		t.Errorf("the kernel still maps %d flows to the deleted %s", len(flows), k.ip)
	}
}

// applyObjects applies objs with server-side apply, as `kubectl apply
// --server-side` does; every object must be accepted.
func applyObjects(t *testing.T, e *realEnv, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(e.cp.Config(controlplane.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.api.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, o.GetName(), err)
		}
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		r := dyn.Resource(m.Resource)
		var ri dynamic.ResourceInterface = r
		if o.GetNamespace() != "" {
			ri = r.Namespace(o.GetNamespace())
		}
		force := true
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: "helm-test", Force: &force}); err != nil {
			t.Errorf("server-side apply of %s %s: %v", gvk.Kind, o.GetName(), err)
		}
	}
}

// verbs are the verbs of the API's resources, each checked.
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// checkChartAccess asks the API server, by a SubjectAccessReview per verb,
// what the chart's ServiceAccounts may do: on each resource, exactly the
// verbs listed, and nothing on the rest.
func checkChartAccess(t *testing.T, e *realEnv) {
	t.Helper()
	ctx := context.Background()
	for _, c := range []struct {
		sa                   string
		group, res, ns, name string
		allowed              []string
	}{
		// A user bound to the chart's ip-reader: what `ghostwatch ip` needs.
		{"user:alice", "", "pods", "", "", []string{"list"}},
		{"user:alice", "", "pods/portforward", "ghostwatch", "", []string{"create"}},
		{"user:alice", "crd.projectcalico.org", "ipamblocks", "", "", []string{"list"}},
		{"user:alice", "", "pods/portforward", "shop", "", nil},
		{"user:alice", "", "pods/exec", "ghostwatch", "", nil},
		{"user:alice", "", "secrets", "ghostwatch", "", nil},
		// A token of the reader, and only of it; the reader alone gets
		// what the agents serve.
		{"user:alice", "", "serviceaccounts/token", "ghostwatch", "gw-ip-reader", []string{"create"}},
		{"user:alice", "", "serviceaccounts/token", "ghostwatch", "gw-agent", nil},
		{"user:alice", "ghostwatch.io", "nodes/flows", "", "node-1", nil},
		{"gw-ip-reader", "ghostwatch.io", "nodes/flows", "", "node-1", []string{"get"}},
		{"gw-ip-reader", "ghostwatch.io", "nodes/hostlocal", "", "node-1", []string{"get"}},
		{"gw-ip-reader", "ghostwatch.io", "nodes/findings", "", "node-1", []string{"get"}},
		{"gw-ip-reader", "", "pods", "", "", nil},
		{"gw-agent", "ghostwatch.io", "nodes/flows", "", "node-1", nil},
		// A user bound to the chart's collector: what `ghostwatch collect` needs.
		{"user:bob", "", "services", "", "", []string{"list"}},
		{"user:bob", "discovery.k8s.io", "endpointslices", "", "", []string{"list"}},
		{"user:bob", "crd.projectcalico.org", "ipamhandles", "", "", []string{"list"}},
		{"user:bob", "", "pods/portforward", "ghostwatch", "", []string{"create"}},
		{"user:bob", "", "secrets", "", "", nil},
		{"user:bob", "", "configmaps", "", "", nil},
		{"gw-agent", "", "pods", "", "", []string{"list", "watch"}},
		{"gw-agent", "", "services", "", "", []string{"list", "watch"}},
		{"gw-agent", "", "nodes", "", "", []string{"list", "watch"}},
		{"gw-agent", "discovery.k8s.io", "endpointslices", "", "", []string{"list", "watch"}},
		{"gw-agent", "networking.k8s.io", "servicecidrs", "", "", []string{"list", "watch"}},
		{"gw-agent", "networking.k8s.io", "ipaddresses", "", "", []string{"list"}},
		{"gw-agent", "", "events", "default", "", []string{"create", "patch"}},
		{"gw-agent", "authentication.k8s.io", "tokenreviews", "", "", []string{"create"}},
		{"gw-agent", "authorization.k8s.io", "subjectaccessreviews", "", "", []string{"create"}},
		{"gw-agent", "", "secrets", "shop", "ghostwatch-consul", nil},
		{"gw-agent", "", "configmaps", "ghostwatch", "", nil},
		{"gw-agent", "", "serviceaccounts", "ghostwatch", "gw-agent", nil},
		{"gw-agent", "coordination.k8s.io", "leases", "ghostwatch", "gw-controller", nil},
		{"gw-agent", "crd.projectcalico.org", "ipamblocks", "", "", nil},
		{"gw-agent", "rbac.authorization.k8s.io", "clusterroles", "", "", nil},
		{"gw-controller", "", "pods", "", "", []string{"list", "watch"}},
		{"gw-controller", "", "nodes", "", "", []string{"list", "watch"}},
		{"gw-controller", "", "events", "shop", "", []string{"create", "patch"}},
		{"gw-controller", "crd.projectcalico.org", "ipamblocks", "", "", []string{"list", "watch"}},
		{"gw-controller", "crd.projectcalico.org", "ipamhandles", "", "", []string{"list", "watch"}},
		{"gw-controller", "crd.projectcalico.org", "blockaffinities", "", "", []string{"list", "watch"}},
		{"gw-controller", "crd.projectcalico.org", "ippools", "", "", []string{"list", "watch"}},
		{"gw-controller", "crd.projectcalico.org", "kubecontrollersconfigurations", "", "", []string{"list", "watch"}},
		{"gw-controller", "crd.projectcalico.org", "ipamconfigs", "", "", nil},
		{"gw-controller", "coordination.k8s.io", "leases", "ghostwatch", "gw-controller", []string{"get", "create", "update"}},
		{"gw-controller", "coordination.k8s.io", "leases", "kube-system", "gw-controller", nil},
		{"gw-controller", "", "secrets", "shop", "ghostwatch-consul", []string{"get"}},
		{"gw-controller", "", "secrets", "shop", "other", nil},
		{"gw-controller", "", "secrets", "ghostwatch", "ghostwatch-consul", nil},
		{"gw-controller", "", "configmaps", "ghostwatch", "", nil},
		{"gw-controller", "", "services", "", "", nil},
		{"gw-controller", "discovery.k8s.io", "endpointslices", "", "", nil},
		{"gw-controller", "rbac.authorization.k8s.io", "roles", "shop", "", nil},
	} {
		for _, verb := range verbs {
			if c.name != "" && (verb == "list" || verb == "watch" || verb == "deletecollection") {
				continue // a verb of no single object
			}
			spec := authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:ghostwatch:" + c.sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:ghostwatch", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: c.group, Resource: c.res, Namespace: c.ns, Name: c.name},
			}
			if user, ok := strings.CutPrefix(c.sa, "user:"); ok {
				spec.User, spec.Groups = user, []string{"system:authenticated"}
			}
			if res, sub, ok := strings.Cut(c.res, "/"); ok {
				spec.ResourceAttributes.Resource, spec.ResourceAttributes.Subresource = res, sub
			}
			r, err := e.api.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Contains(c.allowed, verb); r.Status.Allowed != want {
				t.Errorf("%s %s %s.%s %s/%s: allowed %t, want %t (%s)", c.sa, verb, c.res, c.group, c.ns, c.name, r.Status.Allowed, want, r.Status.Reason)
			}
		}
	}
}

// fromUnstructured converts a rendered object to its API type, strictly.
func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
