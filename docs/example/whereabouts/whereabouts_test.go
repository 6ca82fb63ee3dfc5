package whereabouts

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// cluster is the kube source of the tests: every pod, as the controller's
// cluster watch holds them.
type cluster struct{ pods []snapshot.Pod }

func (cluster) Name() string { return "kube" }
func (c cluster) Collect(_ context.Context, s *snapshot.Snapshot) error {
	s.Kube = &snapshot.Kube{Pods: c.pods}
	return nil
}

func pool(name, rng string, allocs map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": IPPools.GroupVersion().String(), "kind": "IPPool",
		"metadata": map[string]any{"name": name, "namespace": "kube-system"},
		"spec":     map[string]any{"range": rng, "allocations": allocs},
	}}
}

func client(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{IPPools: "IPPoolList"}, objs...)
}

func start(t *testing.T, w *Watch) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the pools listed", w.Settled)
}

// The example ledger and rule run through the audit as the controller
// runs them: the allocation of a pod that is gone is a finding, and goes
// with the allocation.
func TestLeakedThroughTheAudit(t *testing.T) {
	dyn := client(pool("10.10.0.0-16", "10.10.0.0/16", map[string]any{
		"5":   map[string]any{"id": "c0ffee", "podref": "shop/web-0", "ifname": "net1"},
		"260": map[string]any{"id": "beef", "podref": "shop/gone", "ifname": "net1"},
	}))
	w := &Watch{Dynamic: dyn}
	start(t, w)
	pods := cluster{[]snapshot.Pod{{Namespace: "shop", Name: "web-0", Phase: snapshot.PodRunning}}}
	run := func() *audit.Result {
		return audit.Run(context.Background(), audit.Config{Sources: []source.Source{pods, w}, Rules: []rule.Rule{&Leaked{}}})
	}
	res := run()
	if err := res.Incomplete(); err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 || res.Findings[0].Subject.IP != "10.10.1.4" || res.Findings[0].Subject.Pod != "shop/gone" {
		t.Fatalf("findings %+v", res.Findings)
	}
	if c := w.Changes(); !c.All {
		t.Error("the list was not a change")
	}
	// The allocation is freed: a change, and no finding.
	fixed := pool("10.10.0.0-16", "10.10.0.0/16", map[string]any{"5": map[string]any{"id": "c0ffee", "podref": "shop/web-0"}})
	if _, err := dyn.Resource(IPPools).Namespace("kube-system").Update(context.Background(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Waited for by what the audit finds, not by the change: a
	// notification of the first list may land after the first Changes.
	poll.UntilNoted(t, poll.Patience, "no finding once the allocation is freed", func() (bool, string) {
		res := run()
		return res.Incomplete() == nil && len(res.Findings) == 0, fmt.Sprintf("%+v", res.Findings)
	})
	if c := w.Changes(); !c.All {
		t.Error("the update was not a change")
	}
}

// Where Whereabouts is not installed the ledger does not exist: the rule
// is not applicable, not failing.
func TestNotInstalled(t *testing.T) {
	dyn := client()
	dyn.PrependReactor("list", "ippools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(IPPools.GroupResource(), "")
	})
	w := &Watch{Dynamic: dyn}
	start(t, w)
	res := audit.Run(context.Background(), audit.Config{Sources: []source.Source{cluster{}, w}, Rules: []rule.Rule{&Leaked{}}})
	if st, _ := res.Snapshot.Source(Name); st.Status != snapshot.StatusUnsupported || !strings.Contains(st.Detail, "Whereabouts is not installed") {
		t.Errorf("status %+v", st)
	}
	if len(res.Skipped) != 1 || !res.Skipped[0].NotApplicable {
		t.Errorf("skipped %+v", res.Skipped)
	}
}

// An IPv6 range's offsets count from its first address; an offset outside
// the range is left out.
func TestConvertIPv6(t *testing.T) {
	p, ok := convert(pool("v6", "fd00:10::/120", map[string]any{
		"17":  map[string]any{"id": "a", "podref": "shop/a"},
		"999": map[string]any{"id": "b", "podref": "shop/b"},
	}))
	if !ok || len(p.Allocations) != 1 || p.Allocations[0].IP != netip.MustParseAddr("fd00:10::11") {
		t.Errorf("converted %+v", p)
	}
}

// wireController is how the controller runs the ledger: one more of its
// sources, the rule among its rules (cli/controller.go). It is built, not
// run, here: it must compile.
func wireController(cfg controller.Config, w *Watch) controller.Config {
	cfg.Sources = append(cfg.Sources, w)
	cfg.Rules = append(cfg.Rules, &Leaked{})
	return cfg
}

func TestWireController(t *testing.T) {
	cfg := wireController(controller.Config{}, &Watch{Dynamic: client()})
	if len(cfg.Sources) != 1 || cfg.Sources[0].Name() != Name || cfg.Rules[0].Info().ID != LeakedID {
		t.Errorf("%+v", cfg)
	}
}
