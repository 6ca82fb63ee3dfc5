package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
)

var calicoPlurals = map[string]string{
	"ipamblocks": calico.KindIPAMBlock, "ipamhandles": calico.KindIPAMHandle, "blockaffinities": calico.KindBlockAffinity,
	"ippools": calico.KindIPPool, "kubecontrollersconfigurations": calico.KindKubeControllers,
}

func calicoGVR(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: calico.Group, Version: "v1", Resource: plural}
}

// calicoClient serves objs as an API server with Calico's CRDs would.
func calicoClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	kinds := map[schema.GroupVersionResource]string{}
	for plural, kind := range calicoPlurals {
		kinds[calicoGVR(plural)] = kind + "List"
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
}

// noCalico is the dynamic client of a cluster without Calico: the
// controller must not ask it anything, since discovery says so.
func noCalico() *dynamicfake.FakeDynamicClient { return calicoClient() }

// servingCalico makes client's discovery serve Calico's five resources.
func servingCalico(client *fake.Clientset) {
	l := &metav1.APIResourceList{GroupVersion: calico.APIVersion}
	for plural := range calicoPlurals {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: plural, Verbs: metav1.Verbs{"get", "list", "watch"}})
	}
	client.Resources = append(client.Resources, l)
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// block is a /26 of 10.244.0.0 that allocates ordinal 5 to pod default/pod,
// booked under bookedNode, and lists the other ordinals as free.
func block(pod, bookedNode string) *unstructured.Unstructured {
	allocs := make([]any, 64)
	var free []any
	for i := range allocs {
		if i != 5 {
			free = append(free, int64(i))
		}
	}
	allocs[5] = int64(0)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.APIVersion, "kind": calico.KindIPAMBlock,
		"metadata": map[string]any{"name": "10-244-0-0-26"},
		"spec": map[string]any{
			"cidr": "10.244.0.0/26", "affinity": "host:node-a", "strictAffinity": false, "deleted": false,
			"allocations": allocs, "unallocated": free,
			"attributes": []any{map[string]any{
				"handle_id": "k8s-pod-network.c0ffee",
				"secondary": map[string]any{"node": bookedNode, "namespace": "default", "pod": pod, "timestamp": time.Now().UTC().String()},
			}},
			"sequenceNumber": int64(7), "sequenceNumberForAllocation": map[string]any{"5": int64(6)},
		},
	}}
}

func handle() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.APIVersion, "kind": calico.KindIPAMHandle,
		"metadata": map[string]any{"name": "k8s-pod-network.c0ffee"},
		"spec":     map[string]any{"handleID": "k8s-pod-network.c0ffee", "block": map[string]any{"10.244.0.0/26": int64(1)}, "deleted": false},
	}}
}

func pool() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.APIVersion, "kind": calico.KindIPPool,
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"cidr": "10.244.0.0/16", "blockSize": int64(26)},
	}}
}

func (r *replica) findings(id, severity string) float64 {
	return testutil.ToFloat64(r.m.Findings.WithLabelValues(id, severity))
}

func (r *replica) skipped(id string) (finding.Skipped, bool) {
	for _, sk := range r.c.Status().Skipped {
		if sk.Rule == id {
			return sk, true
		}
	}
	return finding.Skipped{}, false
}

var calicoRules = []string{rule.IPAMUnbookedIPID, rule.IPAMLeakedIPID, rule.IPAMMisbookedID, "ipam-ledger-corrupt"}

// Without Calico's CRDs the Calico rules are not applicable, the dynamic
// client is never asked anything, and duplicate-pod-ip runs.
func TestNoCalicoCRDs(t *testing.T) {
	client := fake.NewClientset(node("node-a"),
		podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)),
		podWithIP("web-1", "1", "node-a", "10.244.2.2", time.Now()))
	dyn := noCalico()
	r := startReplicaWith(t, client, "replica-a", setup{dyn: dyn})
	poll.Until(t, poll.Patience, "the duplicate reported", func() bool { return r.duplicates() == 1 })
	poll.Until(t, poll.Patience, "a pass that skips the Calico rules", func() bool { return len(r.c.Status().Skipped) > 0 })
	var got []string
	for _, sk := range r.c.Status().Skipped {
		if isGossipRule(sk.Rule) {
			continue
		}
		got = append(got, sk.Rule)
		if !sk.NotApplicable || !strings.Contains(sk.Reason, "calico: unsupported: the API server serves no crd.projectcalico.org/v1 IPAM resources") {
			t.Errorf("%s skipped: %+v, want not applicable: no Calico", sk.Rule, sk)
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(calicoRules))) {
		t.Errorf("skipped %v, want the Calico rules %v", got, calicoRules)
	}
	if v := testutil.ToFloat64(r.m.SourceUp.WithLabelValues("calico")); v != 0 {
		t.Errorf("ghostwatch_source_up{source=calico} = %v", v)
	}
	if v := testutil.ToFloat64(r.m.SourceUp.WithLabelValues("kube")); v != 1 {
		t.Errorf("ghostwatch_source_up{source=kube} = %v", v)
	}
	if a := dyn.Actions(); len(a) != 0 {
		t.Errorf("the dynamic client was asked %v", a)
	}
}

// With Calico's CRDs served, a Calico allocation booked under another
// existing node than its pod's is reported as it appears, critical, with
// a Warning Event on the pod, and goes when the booking is fixed; every
// cluster rule runs.
func TestCalicoMisbookingReported(t *testing.T) {
	client := fake.NewClientset(node("node-a"), node("node-b"),
		podWithIP("web-0", "0", "node-b", "10.244.0.5", time.Now().Add(-time.Hour)))
	servingCalico(client)
	dyn := calicoClient(handle(), pool())
	r := startReplicaWith(t, client, "replica-a", setup{dyn: dyn})
	poll.Until(t, poll.Patience, "a first pass", func() bool { return !r.c.Status().LastPass.IsZero() })
	for _, sk := range r.c.Status().Skipped {
		if !isGossipRule(sk.Rule) || !sk.NotApplicable || !strings.Contains(sk.Reason, "gossip: unsupported: no running pod is annotated ghostwatch.io/gossip") {
			t.Errorf("skipped %+v: every cluster rule runs but the gossip ones (no annotated pod)", sk)
		}
	}
	if v := testutil.ToFloat64(r.m.SourceUp.WithLabelValues("calico")); v != 1 {
		t.Errorf("ghostwatch_source_up{source=calico} = %v", v)
	}
	ctx := context.Background()
	blocks := dyn.Resource(calicoGVR("ipamblocks"))
	booked := time.Now()
	if _, err := blocks.Create(ctx, block("web-0", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "ipam-misbooked reported", func() bool { return r.findings(rule.IPAMMisbookedID, "critical") == 1 })
	// When the collector may free it: the booking's time plus its grace.
	from, to := booked.Add(snapshot.DefaultLeakGracePeriod-time.Second), time.Now().Add(snapshot.DefaultLeakGracePeriod)
	if v := testutil.ToFloat64(r.m.IPAMNextFree.WithLabelValues()); v < float64(from.Unix()) || v > float64(to.Unix()) {
		t.Errorf("ghostwatch_ipam_next_free_timestamp_seconds = %v, want between %s and %s: booked then, plus Calico's default leak grace period", v, from, to)
	}
	want := map[string]bool{
		"Pod Warning default/web-0 IPAMMisbooked pod default/web-0 runs on node node-b and holds 10.244.0.5, but Calico booked it under node node-a": false,
		"Node Warning /node-b IPAMMisbooked pod default/web-0": false,
	}
	// The findings' metric is published before their Events are sent.
	poll.UntilNoted(t, poll.Patience, "the misbooking's Events on the pod and its node", func() (bool, string) {
		all := r.ev.All()
		for _, e := range all {
			for w := range want {
				want[w] = want[w] || strings.HasPrefix(e, w)
			}
		}
		for w, ok := range want {
			if !ok {
				return false, fmt.Sprintf("no Event %q in %q", w, all)
			}
		}
		return true, ""
	})
	b, err := blocks.Get(ctx, "10-244-0-0-26", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed := block("web-0", "node-b")
	fixed.SetResourceVersion(b.GetResourceVersion())
	if _, err := blocks.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the misbooking gone", func() bool { return r.findings(rule.IPAMMisbookedID, "critical") == 0 })
	if n := testutil.CollectAndCount(r.m.IPAMNextFree); n != 0 {
		t.Errorf("ghostwatch_ipam_next_free_timestamp_seconds still exported (%d series) with no misbooking", n)
	}
	// The status is set after the metrics, as the Events are.
	poll.UntilNoted(t, poll.Patience, "no finding on a sound ledger", func() (bool, string) {
		n := r.c.Status().Findings
		return n == 0, fmt.Sprintf("%d findings", n)
	})
}

// A Calico resource the controller may not list leaves the ledger not
// ready: the rules reading it do not run (and are not "not applicable"),
// duplicate-pod-ip does.
func TestCalicoNotListable(t *testing.T) {
	client := fake.NewClientset(node("node-a"),
		podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)),
		podWithIP("web-1", "1", "node-a", "10.244.2.2", time.Now()))
	servingCalico(client)
	dyn := calicoClient()
	dyn.PrependReactor("list", "ipamhandles", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: calico.Group, Resource: "ipamhandles"}, "", errors.New("no RBAC"))
	})
	r := startReplicaWith(t, client, "replica-a", setup{dyn: dyn})
	poll.Until(t, poll.Patience, "the duplicate reported", func() bool { return r.duplicates() == 1 })
	poll.Until(t, poll.Patience, "the Calico rules skipped", func() bool { _, ok := r.skipped(rule.IPAMMisbookedID); return ok })
	for _, id := range calicoRules {
		sk, ok := r.skipped(id)
		if !ok || sk.NotApplicable || !strings.Contains(sk.Reason, "calico: error: ipamhandles.crd.projectcalico.org: not listed yet:") || !strings.Contains(sk.Reason, "forbidden") {
			t.Errorf("%s: skipped %t %+v, want not ready: handles not listed", id, ok, sk)
		}
	}
	if _, ok := r.skipped(rule.DuplicatePodIPID); ok {
		t.Error("duplicate-pod-ip skipped")
	}
}

// While a Calico watch fails, the rules reading the ledger are skipped and
// what they last found stands (the metric does not drop to 0); once the
// watch is back they run again.
func TestCalicoFindingsStandWhileTheLedgerFails(t *testing.T) {
	client := fake.NewClientset(node("node-a"), node("node-b"),
		podWithIP("web-0", "0", "node-b", "10.244.0.5", time.Now().Add(-time.Hour)))
	servingCalico(client)
	dyn := calicoClient(block("web-0", "node-a"), handle(), pool())
	var failing atomic.Bool
	watchers := make(chan *watch.RaceFreeFakeWatcher, 10)
	dyn.PrependReactor("list", "ipamblocks", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	dyn.PrependWatchReactor("ipamblocks", func(k8stesting.Action) (bool, watch.Interface, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		w := watch.NewRaceFreeFake()
		watchers <- w
		return true, w, nil
	})
	r := startReplicaWith(t, client, "replica-a", setup{dyn: dyn})
	poll.Until(t, poll.Patience, "ipam-misbooked reported", func() bool { return r.findings(rule.IPAMMisbookedID, "critical") == 1 })
	failing.Store(true)
	(<-watchers).Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "etcd is gone"})
	poll.Until(t, poll.Patience, "ipam-misbooked skipped", func() bool { sk, ok := r.skipped(rule.IPAMMisbookedID); return ok && !sk.NotApplicable })
	if v := r.findings(rule.IPAMMisbookedID, "critical"); v != 1 {
		t.Errorf("ipam-misbooked findings while the ledger fails: %v, want the last pass's 1", v)
	}
	if v := testutil.ToFloat64(r.m.SourceUp.WithLabelValues("calico")); v != 0 {
		t.Errorf("ghostwatch_source_up{source=calico} = %v while its watch fails", v)
	}
	failing.Store(false)
	poll.Until(t, poll.Patience, "ipam-misbooked running again", func() bool { _, ok := r.skipped(rule.IPAMMisbookedID); return !ok })
	if v := r.findings(rule.IPAMMisbookedID, "critical"); v != 1 {
		t.Errorf("ipam-misbooked findings once the ledger is back: %v", v)
	}
	if n := strings.Count(strings.Join(r.ev.All(), "\n"), "Pod Warning default/web-0 IPAMMisbooked"); n != 1 {
		t.Errorf("%d IPAMMisbooked Events on the pod: one, when the finding first appeared", n)
	}
}

func isGossipRule(id string) bool {
	return id == rule.GossipGhostMemberID || id == rule.GossipIPIdentityID
}
