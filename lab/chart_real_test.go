package lab

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/ghostwatch/ghostwatch/deploy/chart"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The chart, every remedy on and a gossip cluster declared, applied with
// server-side apply to the real API server: every object is accepted, and
// a SubjectAccessReview per verb shows the agent's and the controller's
// ServiceAccounts allowed what they use and denied the rest (no write of
// a cluster object, no Secret but the declared token's, by name, in its
// namespace).
func TestRealChartInstallsWithLeastPrivilege(t *testing.T) {
	ctx, cp := startControlPlane(t, controlplane.Options{})
	api := cp.Admin
	for _, ns := range []string{"ghostwatch", "shop"} {
		if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := chart.Render("gw", "ghostwatch", `
agent: {remedies: [stale-nat-flow, hostlocal-reserve]}
controller:
  remedies: [gossip-force-leave]
  gossipClusters:
  - {system: consul, namespace: shop, scheme: https, tokenSecret: {name: ghostwatch-consul, key: token}}
`)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config(controlplane.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(api.Discovery()))
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
	for _, c := range []struct {
		sa                       string
		verb, group, res, ns, nm string
		allowed                  bool
	}{
		{"gw-agent", "list", "", "pods", "", "", true},
		{"gw-agent", "watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{"gw-agent", "list", "networking.k8s.io", "ipaddresses", "", "", true},
		{"gw-agent", "create", "", "events", "default", "", true},
		{"gw-agent", "get", "", "secrets", "shop", "ghostwatch-consul", false},
		{"gw-agent", "delete", "", "pods", "default", "", false},
		{"gw-agent", "update", "", "nodes", "", "", false},
		{"gw-agent", "watch", "networking.k8s.io", "ipaddresses", "", "", false},
		{"gw-controller", "list", "", "pods", "", "", true},
		{"gw-controller", "watch", "crd.projectcalico.org", "ipamblocks", "", "", true},
		{"gw-controller", "update", "coordination.k8s.io", "leases", "ghostwatch", "gw-controller", true},
		{"gw-controller", "update", "coordination.k8s.io", "leases", "kube-system", "gw-controller", false},
		{"gw-controller", "get", "", "secrets", "shop", "ghostwatch-consul", true},
		{"gw-controller", "get", "", "secrets", "shop", "other", false},
		{"gw-controller", "get", "", "secrets", "ghostwatch", "ghostwatch-consul", false},
		{"gw-controller", "list", "", "secrets", "shop", "", false},
		{"gw-controller", "delete", "", "pods", "shop", "", false},
		{"gw-controller", "update", "crd.projectcalico.org", "ipamblocks", "", "", false},
	} {
		r, err := api.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:ghostwatch:" + c.sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:ghostwatch", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.res, Namespace: c.ns, Name: c.nm},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.allowed {
			t.Errorf("%s %s %s.%s %s/%s: allowed %t, want %t (%s)", c.sa, c.verb, c.res, c.group, c.ns, c.nm, r.Status.Allowed, c.allowed, r.Status.Reason)
		}
	}
}
