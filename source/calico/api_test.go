package calico

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// unstructuredObjects reads a JSON list of objects as the dynamic client
// decodes what the API server sends: integers as int64.
func unstructuredObjects(t *testing.T, path string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var l []any
	if err := utiljson.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, o := range l {
		out = append(out, &unstructured.Unstructured{Object: unvolatileInt(o).(map[string]any)})
	}
	return out
}

// unvolatileInt is unvolatile with the numbers as int64.
func unvolatileInt(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch {
			case x != "<volatile>":
				v[k] = unvolatileInt(x)
			case k == "timestamp":
				v[k] = stampWritten
			case k == "sequenceNumber":
				v[k] = int64(seqWritten)
			default:
				v[k] = int64(seqAllocated)
			}
		}
	case []any:
		for i := range v {
			v[i] = unvolatileInt(v[i])
		}
	}
	return v
}

func gvr(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: "v1", Resource: plural}
}

// fakeClient serves objs as the API server would, for the five resources.
func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	kinds := map[schema.GroupVersionResource]string{}
	for _, r := range resources {
		kinds[gvr(r.plural)] = r.kind + "List"
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
}

// calicoDiscovery serves discovery for the given resources of
// crd.projectcalico.org/v1.
func calicoDiscovery(plurals ...string) *fakediscovery.FakeDiscovery {
	d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	l := &metav1.APIResourceList{GroupVersion: Group + "/v1"}
	for _, p := range plurals {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: p, Verbs: metav1.Verbs{"get", "list", "watch"}})
	}
	if len(plurals) > 0 {
		d.Resources = []*metav1.APIResourceList{l}
	}
	return d
}

// The API server's objects read into the same ledger as the saved ones:
// seed 002's, through the dynamic client's int64 numbers and through JSON
// decoded with UseNumber.
func TestAPISourceReadsSeed002(t *testing.T) {
	var objs []runtime.Object
	for _, f := range []string{"ipamblocks.json", "ipamhandles.json", "blockaffinities.json"} {
		objs = append(objs, unstructuredObjects(t, filepath.Join(seed002, f))...)
	}
	kcc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion, "kind": KindKubeControllers, "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"controllers": map[string]any{"node": map[string]any{"leakGracePeriod": "5s"}}},
	}}
	src := &APISource{Client: fakeClient(append(objs, kcc)...), Discovery: calicoDiscovery("ipamblocks", "ipamhandles", "blockaffinities", "ippools", "kubecontrollersconfigurations")}
	if src.Name() != "calico" {
		t.Errorf("Name() = %q", src.Name())
	}
	s := &snapshot.Snapshot{}
	if err := src.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := ledger(t, seed002, true)
	want.LeakGC = &snapshot.LeakGC{GracePeriod: 5e9, From: "spec.controllers.node.leakGracePeriod"}
	if !reflect.DeepEqual(s.Calico, want) {
		t.Errorf("got  %+v\nwant %+v", s.Calico, want)
	}
	if d, want := src.Describe(s), "3 blocks (3 allocations), 3 handles, 3 affinities, 0 pools, leak grace period 5s"; d != want {
		t.Errorf("Describe = %q, want %q", d, want)
	}
}

// pagingClient serves ipamblocks a page at a time, as the API server
// does (the dynamic fake client ignores limit and continue); the first
// continue token it gives expires once.
type pagingClient struct {
	dynamic.Interface
	blocks   []unstructured.Unstructured
	requests []metav1.ListOptions
	expired  bool
}

func (c *pagingClient) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	ri := c.Interface.Resource(r)
	if r.Resource != "ipamblocks" {
		return ri
	}
	return pagingResource{ri, c}
}

type pagingResource struct {
	dynamic.NamespaceableResourceInterface
	c *pagingClient
}

func (p pagingResource) List(_ context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	c := p.c
	c.requests = append(c.requests, opts)
	if opts.Continue != "" && !c.expired {
		c.expired = true
		return nil, apierrors.NewResourceExpired("continue token expired")
	}
	start, _ := strconv.Atoi(opts.Continue)
	end := min(start+int(opts.Limit), len(c.blocks))
	l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": APIVersion, "kind": "IPAMBlockList"}, Items: c.blocks[start:end]}
	if end < len(c.blocks) {
		l.SetContinue(strconv.Itoa(end))
	}
	return l, nil
}

// Large lists are read a page at a time, following the continue token,
// and start over when it expires midway: each block read once.
func TestAPISourcePages(t *testing.T) {
	client := &pagingClient{Interface: fakeClient()}
	for i := range 7 {
		client.blocks = append(client.blocks, unstructured.Unstructured{Object: map[string]any{
			// The items of a list may leave out their kind.
			"metadata": map[string]any{"name": "b" + strconv.Itoa(i)},
			"spec": map[string]any{"cidr": "10.0.0." + strconv.Itoa(i) + "/32", "allocations": []any{nil},
				"unallocated": []any{int64(0)}, "attributes": []any{}},
		}})
	}
	s := &snapshot.Snapshot{}
	if err := (&APISource{Client: client, PageSize: 3}).Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if len(s.Calico.Blocks) != 7 || s.Calico.Blocks[6].Name != "b6" || len(s.Calico.Blocks[6].Free) != 1 {
		t.Errorf("blocks %+v", s.Calico.Blocks)
	}
	var got []string
	for _, r := range client.requests {
		got = append(got, fmt.Sprintf("limit=%d continue=%q rv=%q", r.Limit, r.Continue, r.ResourceVersion))
	}
	want := []string{
		`limit=3 continue="" rv=""`, `limit=3 continue="3" rv=""`, // expired
		`limit=3 continue="" rv=""`, `limit=3 continue="3" rv=""`, `limit=3 continue="6" rv=""`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAPISourceErrors(t *testing.T) {
	all := []string{"ipamblocks", "ipamhandles", "blockaffinities", "ippools", "kubecontrollersconfigurations"}
	forbidden := func(plural string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: plural}, "",
				errors.New(`User "dev" cannot list resource "`+plural+`" in API group "`+Group+`" at the cluster scope`))
		}
	}
	notFound := func(plural string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: plural}, "")
		}
	}
	for _, tc := range []struct {
		name        string
		discovery   []string // nil: no discovery client; [] none served
		react       map[string]func(k8stesting.Action) (bool, runtime.Object, error)
		unsupported bool
		want        string
	}{
		{name: "discovery: no Calico", discovery: []string{}, unsupported: true, want: notServed},
		{name: "discovery: no blocks", discovery: []string{"ippools"}, unsupported: true, want: notServed},
		{name: "discovery: handles missing", discovery: []string{"ipamblocks", "blockaffinities", "ippools"},
			want: "the API server serves crd.projectcalico.org/v1 but not ipamhandles.crd.projectcalico.org: Calico's CRDs are incomplete"},
		{name: "no discovery: 404 on blocks", react: map[string]func(k8stesting.Action) (bool, runtime.Object, error){"ipamblocks": notFound("ipamblocks")},
			unsupported: true, want: notServed},
		{name: "403 on handles", discovery: all, react: map[string]func(k8stesting.Action) (bool, runtime.Object, error){"ipamhandles": forbidden("ipamhandles")},
			want: `listing ipamhandles.crd.projectcalico.org: ipamhandles.crd.projectcalico.org is forbidden: User "dev" cannot list resource "ipamhandles" in API group "crd.projectcalico.org" at the cluster scope (403 Forbidden): missing permission to list ipamhandles (API group crd.projectcalico.org) in the cluster; grant it with a ClusterRole rule with verb list`},
		{name: "404 on pools after blocks", react: map[string]func(k8stesting.Action) (bool, runtime.Object, error){"ippools": notFound("ippools")},
			want: `listing ippools.crd.projectcalico.org: ippools.crd.projectcalico.org "" not found (404 NotFound)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient()
			for plural, fn := range tc.react {
				client.PrependReactor("list", plural, fn)
			}
			src := &APISource{Client: client}
			if tc.discovery != nil {
				src.Discovery = calicoDiscovery(tc.discovery...)
			}
			s := &snapshot.Snapshot{}
			err := src.Collect(context.Background(), s)
			if err == nil || err.Error() != tc.want || errors.Is(err, source.ErrUnsupported) != tc.unsupported {
				t.Errorf("error:\n got %v\nwant %s (unsupported %t)", err, tc.want, tc.unsupported)
			}
			if s.Calico != nil {
				t.Error("Collect set Calico despite the error")
			}
		})
	}
	// Without the KubeControllersConfiguration kind the ledger is read,
	// the collector's grace unknown.
	s := &snapshot.Snapshot{}
	if err := (&APISource{Client: fakeClient(), Discovery: calicoDiscovery(all[:4]...)}).Collect(context.Background(), s); err != nil || s.Calico == nil || s.Calico.LeakGC != nil {
		t.Errorf("without kubecontrollersconfigurations: %v, %+v", err, s.Calico)
	}
}

// Served says what a watcher of the ledger lists and watches, as Collect
// reads it: all five, or four without the collector's configuration; none
// when Calico is not there; an error when its CRDs are incomplete.
func TestServed(t *testing.T) {
	all := []string{"ipamblocks", "ipamhandles", "blockaffinities", "ippools", "kubecontrollersconfigurations"}
	for _, tc := range []struct {
		name        string
		discovery   []string
		want        []string
		unsupported bool
		err         string
	}{
		{name: "all", discovery: all, want: all},
		{name: "no collector configuration", discovery: all[:4], want: all[:4]},
		{name: "no Calico", discovery: []string{}, unsupported: true, err: notServed},
		{name: "handles missing", discovery: []string{"ipamblocks", "blockaffinities", "ippools"},
			err: "the API server serves crd.projectcalico.org/v1 but not ipamhandles.crd.projectcalico.org: Calico's CRDs are incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Served(calicoDiscovery(tc.discovery...))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || errors.Is(err, source.ErrUnsupported) != tc.unsupported {
					t.Errorf("error %v, want %s (unsupported %t)", err, tc.err, tc.unsupported)
				}
				return
			}
			var got []string
			for _, r := range rs {
				if r.Group != Group || r.Version != "v1" || !Is(APIVersion, r.Kind) {
					t.Errorf("%+v: not a resource of the ledger", r)
				}
				got = append(got, r.Resource)
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Served = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
