package live

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/kubefake"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// runningPod is a pod bound to node, running at the addresses ips.
func runningPod(ns, name, uid, node string, started time.Time, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(started)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// slice lists the pods of Service ns/svc.
func slice(ns, svc, name string, pods ...*corev1.Pod) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range pods {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP}, NodeName: ptr.To(p.Spec.NodeName),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}})
	}
	return es
}

// twoNodes is a cluster of two nodes, a pod on each behind one Service,
// and a headless Service's slice.
func twoNodes(t0 time.Time) []runtime.Object {
	a := runningPod("web", "a", "uid-a", "node-a", t0, "10.244.1.5")
	b := runningPod("web", "b", "uid-b", "node-b", t0, "10.244.2.7")
	headless := slice("web", "db", "db-1", b)
	headless.Labels[corev1.IsHeadlessService] = ""
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.2.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.11"}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "api"},
			Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.80"}, Ports: []corev1.ServicePort{{Port: 80}}}},
		a, b, slice("web", "api", "api-1", a, b), headless,
	}
}

// Scoped to a node, the informers ask the API server what kube-proxy asks
// (every Service and ServiceCIDR, the EndpointSlices of Services with a
// cluster IP, and its own Node by name), and the pods bound to the node:
// the snapshot says its pods are partial.
func TestNodeInformersAskWhatKubeProxyAsks(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	client := kubefake.NewClientset(twoNodes(clk.Now().Add(-time.Hour))...)
	inf := NewInformers(client, InformerOptions{Node: "node-a", Now: clk.Now})
	startSynced(t, inf)

	asked := map[string]string{}
	for _, a := range client.Actions() {
		var got string
		switch a := a.(type) {
		case clienttesting.ListActionImpl:
			got = "labels=" + a.ListRestrictions.Labels.String() + " fields=" + a.ListRestrictions.Fields.String()
		case clienttesting.WatchActionImpl:
			got = "labels=" + a.WatchRestrictions.Labels.String() + " fields=" + a.WatchRestrictions.Fields.String()
		default:
			continue
		}
		key := a.GetVerb() + " " + a.GetResource().Resource
		if prev, ok := asked[key]; ok && prev != got {
			t.Errorf("%s asked both %q and %q", key, prev, got)
		}
		asked[key] = got
	}
	for _, verb := range []string{"list", "watch"} {
		for res, want := range map[string]string{
			"pods":           "labels= fields=spec.nodeName=node-a",
			"nodes":          "labels= fields=metadata.name=node-a",
			"services":       "labels= fields=",
			"endpointslices": "labels=kubernetes.io/service-name,!service.kubernetes.io/headless fields=",
			"servicecidrs":   "labels= fields=",
		} {
			if got := asked[verb+" "+res]; got != want {
				t.Errorf("%s %s: asked %q, want %q", verb, res, got, want)
			}
		}
	}

	k := inf.Snapshot()
	if !k.PodsPartial || k.PodNode != "node-a" {
		t.Errorf("PodsPartial %v, PodNode %q", k.PodsPartial, k.PodNode)
	}
	if len(k.Pods) != 1 || k.Pods[0].Name != "a" || len(k.Nodes) != 1 || k.Nodes[0].Name != "node-a" {
		t.Errorf("pods %v, nodes %v: want node-a's only", k.Pods, k.Nodes)
	}
	if len(k.Nodes) == 1 && !slices.Equal(k.Nodes[0].PodCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}) {
		t.Errorf("the node's pod CIDRs: %v", k.Nodes[0].PodCIDRs)
	}
	// Both endpoints of api, none of the headless db; each dated from
	// when it was first seen listed for its pod.
	if len(k.Endpoints) != 2 {
		t.Fatalf("endpoints %+v", k.Endpoints)
	}
	for _, e := range k.Endpoints {
		if e.PodUID == "" || e.Since.IsZero() || e.Since.After(clk.Now()) {
			t.Errorf("endpoint %+v: want its pod's uid and when it was first seen", e)
		}
	}
	// A node's own addresses are held by its hostNetwork pods only: the
	// pods of the node are all there is to know of them.
	if !k.KnowsHolders(netip.MustParseAddr("192.168.1.10")) || k.KnowsHolders(netip.MustParseAddr("10.244.2.7")) {
		t.Errorf("KnowsHolders: the node's address must be known, another pod's not")
	}
}

// The time an address was first seen listed for its pod holds while the
// slice lists it for that pod, and starts over when it lists another.
func TestEndpointSinceFollowsThePod(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	objs := twoNodes(clk.Now().Add(-time.Hour))
	client := kubefake.NewClientset(objs...)
	inf := NewInformers(client, InformerOptions{Node: "node-a", Now: clk.Now})
	startSynced(t, inf)
	first := clk.Now()
	sinceOf := func(addr string) time.Time {
		for _, e := range inf.Snapshot().Endpoints {
			if e.Address.String() == addr {
				return e.Since
			}
		}
		return time.Time{}
	}
	// Dated by the first snapshot that lists them (the agent's first
	// audit), kept by the next ones.
	if got := sinceOf("10.244.2.7"); !got.Equal(first) {
		t.Errorf("first listed: since %v, want %v", got, first)
	}
	clk.Advance(time.Minute)
	if got := sinceOf("10.244.2.7"); !got.Equal(first) {
		t.Errorf("a minute later, since %v, want %v", got, first)
	}
	// Pod b is replaced by c at the same address.
	c := runningPod("web", "c", "uid-c", "node-b", clk.Now(), "10.244.2.7")
	es := slice("web", "api", "api-1", objs[3].(*corev1.Pod), c)
	if _, err := client.DiscoveryV1().EndpointSlices("web").Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the new pod's endpoint", func() bool { return sinceOf("10.244.2.7").Equal(clk.Now()) })
	if got := sinceOf("10.244.1.5"); !got.Equal(first) {
		t.Errorf("the unchanged endpoint's since moved to %v", got)
	}
}

// A node's snapshots share one copy of the endpoints while no slice
// changes; a change gives the next snapshot a copy of its own and leaves
// the earlier one as it was, and so does a pod's start learned by a lookup.
func TestSnapshotsShareEndpointsUntilASliceChanges(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	objs := twoNodes(clk.Now().Add(-time.Hour))
	client := kubefake.NewClientset(objs...)
	inf := NewInformers(client, InformerOptions{Node: "node-a", Now: clk.Now})
	startSynced(t, inf)
	first, second := inf.Snapshot().Endpoints, inf.Snapshot().Endpoints
	if len(first) != 2 || &first[0] != &second[0] {
		t.Fatalf("two snapshots with no change between: %d endpoints, shared %v; want 2, shared", len(first), len(first) > 0 && &first[0] == &second[0])
	}
	if cap(first) != len(first) {
		t.Errorf("the shared endpoints have room to grow (len %d, cap %d): an append would write into them", len(first), cap(first))
	}
	kept := slices.Clone(first)
	clk.Advance(time.Minute)
	c := runningPod("web", "c", "uid-c", "node-b", clk.Now(), "10.244.2.7")
	es := slice("web", "api", "api-1", objs[3].(*corev1.Pod), c)
	if _, err := client.DiscoveryV1().EndpointSlices("web").Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var now []snapshot.Endpoint
	poll.Until(t, poll.Patience, "the new pod's endpoint", func() bool {
		now = inf.Snapshot().Endpoints
		return slices.ContainsFunc(now, func(e snapshot.Endpoint) bool { return e.PodUID == "uid-c" && e.Since.Equal(clk.Now()) })
	})
	if !slices.Equal(first, kept) {
		t.Errorf("a slice's change rewrote an earlier snapshot's endpoints: %v, was %v", first, kept)
	}
	// A lookup learns that c started earlier than its endpoint was seen.
	inf.since.learn(netip.MustParseAddr("10.244.2.7"), "uid-c", clk.Now().Add(-30*time.Second))
	after := inf.Snapshot().Endpoints
	i := slices.IndexFunc(after, func(e snapshot.Endpoint) bool { return e.PodUID == "uid-c" })
	if i < 0 || !after[i].Since.Equal(clk.Now().Add(-30*time.Second)) {
		t.Errorf("after a lookup learned the pod's start, the endpoint is %+v; want since 30s earlier", after)
	}
	if j := slices.IndexFunc(now, func(e snapshot.Endpoint) bool { return e.PodUID == "uid-c" }); !now[j].Since.Equal(clk.Now()) {
		t.Errorf("learning rewrote an earlier snapshot's endpoint: %+v", now[j])
	}
}

// lookupAPI is a fake API server whose pods are looked up by address, with
// every list of pods recorded.
func lookupAPI(t *testing.T, objs ...runtime.Object) (*Holders, *fakeclock.Clock, func() []string) {
	t.Helper()
	client := kubefake.NewClientset(objs...)
	c := fakeclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	h := &Holders{Client: client, Now: c.Now, TTL: 30 * time.Second, MaxTTL: 4 * time.Minute}
	asked := func() []string {
		var out []string
		for _, a := range client.Actions() {
			if la, ok := a.(clienttesting.ListActionImpl); ok && la.GetResource().Resource == "pods" {
				if rv := la.ListOptions.ResourceVersion; rv != "0" {
					t.Errorf("a lookup asked resourceVersion %q: want \"0\", the watch cache's", rv)
				}
				out = append(out, la.ListRestrictions.Fields.String())
			}
		}
		return out
	}
	return h, c, asked
}

// An answer stands for its time to live, which doubles while the answer
// stays the same, up to the most allowed; Forget drops it at once.
func TestHoldersKeepAnswersForAWhile(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC)
	h, clk, asked := lookupAPI(t, twoNodes(t0)...)
	ctx := context.Background()
	x, gone := netip.MustParseAddr("10.244.2.7"), netip.MustParseAddr("10.244.2.99")
	got, err := h.Lookup(ctx, []netip.Addr{x, gone, x})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[x]) != 1 || got[x][0].Name != "b" || len(got[gone]) != 0 {
		t.Errorf("holders %+v", got)
	}
	if a := slices.Sorted(slices.Values(asked())); !slices.Equal(a, []string{"status.podIP=10.244.2.7", "status.podIP=10.244.2.99"}) {
		t.Errorf("asked %q", a)
	}
	steps := []struct {
		after time.Duration
		asks  bool
	}{
		{29 * time.Second, false},
		{time.Second, true}, // 30s: asked again; the same answer
		{59 * time.Second, false},
		{time.Second, true}, // 60s: again the same
		{119 * time.Second, false},
		{time.Second, true}, // 120s
		{239 * time.Second, false},
		{time.Second, true}, // 240s: the most allowed
		{240 * time.Second, true},
	}
	n := len(asked())
	for i, st := range steps {
		clk.Advance(st.after)
		if _, err := h.Lookup(ctx, []netip.Addr{gone}); err != nil {
			t.Fatal(err)
		}
		if asks := len(asked()) > n; asks != st.asks {
			t.Errorf("step %d (%s later): asked %v, want %v", i, st.after, asks, st.asks)
		}
		n = len(asked())
	}
	if due, ok := h.Due(gone, x); !ok || due.IsZero() {
		t.Errorf("Due = %v, %v", due, ok)
	}
	h.Forget(gone)
	if _, err := h.Lookup(ctx, []netip.Addr{gone}); err != nil {
		t.Fatal(err)
	}
	if len(asked()) != n+1 {
		t.Errorf("a forgotten answer was not asked again")
	}
}

// A failed lookup names the addresses and why, and keeps nothing of it.
func TestHoldersFailNamingTheAddress(t *testing.T) {
	h, _, _ := lookupAPI(t)
	h.Client.(interface {
		PrependReactor(string, string, clienttesting.ReactionFunc)
	}).PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := h.Lookup(context.Background(), []netip.Addr{netip.MustParseAddr("10.244.2.7")})
	if err == nil || !strings.Contains(err.Error(), "looking up the pods at 10.244.2.7") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("err = %v", err)
	}
	if _, ok := h.Due(netip.MustParseAddr("10.244.2.7")); ok {
		t.Error("a failed lookup was kept")
	}
}

// holderReader asks about fixed addresses.
type holderReader []netip.Addr

func (r holderReader) HolderAddrs(*snapshot.Snapshot) []netip.Addr { return r }

// Resolve adds the pods at the addresses the rules ask about, and lists
// those the API server cannot be asked about: in a dual-stack cluster, the
// addresses of the pods' second family. A failed lookup leaves the
// snapshot as it was and fails the source.
func TestResolveLooksUpWhatTheRulesAsk(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name         string
		objs         []runtime.Object
		ask          []string
		looked       []string
		found        []string
		unlooked     string
		wantUnlooked []string
	}{
		{name: "single-stack", objs: twoNodes(t0), ask: []string{"10.244.2.7", "10.244.9.9"},
			looked: []string{"10.244.2.7", "10.244.9.9"}, found: []string{"b"}},
		{name: "dual-stack, the node says IPv4 first",
			objs: append(twoNodes(t0), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "dual"},
				Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.81", "fd00:96::81"}}}),
			ask: []string{"10.244.2.7", "fd00:2::7"}, looked: []string{"10.244.2.7"}, found: []string{"b"},
			unlooked: "second address family", wantUnlooked: []string{"fd00:2::7"}},
		{name: "dual-stack, the first family unknown",
			objs: func() []runtime.Object {
				o := twoNodes(t0)
				o[0].(*corev1.Node).Spec.PodCIDRs = nil
				return append(o, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "dual"},
					Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.81", "fd00:96::81"}}})
			}(),
			ask: []string{"10.244.2.7", "fd00:2::7"}, looked: []string{"10.244.2.7"}, found: []string{"b"},
			unlooked: "first is unknown", wantUnlooked: []string{"fd00:2::7"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := kubefake.NewClientset(c.objs...)
			inf := NewInformers(client, InformerOptions{Node: "node-a"})
			startSynced(t, inf)
			src := &APISource{Informers: inf, Holders: &Holders{Client: client}}
			var r holderReader
			for _, a := range c.ask {
				r = append(r, netip.MustParseAddr(a))
			}
			src.Narrow([]any{r})
			s := &snapshot.Snapshot{}
			if err := src.Collect(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			before := s.Kube
			if err := src.Resolve(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			if len(before.Looked) != 0 || len(before.Pods) != 1 {
				t.Errorf("Resolve modified the collected objects: %+v", before)
			}
			var looked, found, unlooked []string
			for a := range s.Kube.Looked {
				looked = append(looked, a.String())
			}
			for _, p := range s.Kube.Pods {
				if p.Node != "node-a" {
					found = append(found, p.Name)
				}
			}
			for a, why := range s.Kube.Unlooked {
				unlooked = append(unlooked, a.String())
				if !strings.Contains(why, c.unlooked) {
					t.Errorf("why %s is not looked up: %q", a, why)
				}
			}
			slices.Sort(looked)
			if !slices.Equal(looked, c.looked) || !slices.Equal(found, c.found) || !slices.Equal(unlooked, c.wantUnlooked) {
				t.Errorf("looked %v, found %v, unlooked %v; want %v, %v, %v", looked, found, unlooked, c.looked, c.found, c.wantUnlooked)
			}
			if d := src.Describe(s); !strings.Contains(d, "1 pod of node node-a") || (len(c.wantUnlooked) > 0) != strings.Contains(d, "not judged") {
				t.Errorf("Describe = %q", d)
			}
		})
	}
}

// A lookup that fails fails the source and leaves the snapshot as Collect
// left it.
func TestResolveFailureLeavesTheSnapshot(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC)
	client := kubefake.NewClientset(twoNodes(t0)...)
	inf := NewInformers(client, InformerOptions{Node: "node-a"})
	startSynced(t, inf)
	client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if la, ok := a.(clienttesting.ListActionImpl); ok && strings.HasPrefix(la.ListRestrictions.Fields.String(), "status.podIP") {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	src := &APISource{Informers: inf, Holders: &Holders{Client: client}}
	src.Narrow([]any{holderReader{netip.MustParseAddr("10.244.2.7")}})
	s := &snapshot.Snapshot{}
	if err := src.Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	before := s.Kube
	if err := src.Resolve(context.Background(), s); err == nil || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("Resolve = %v", err)
	}
	if s.Kube != before {
		t.Error("a failed Resolve changed the snapshot")
	}
}
