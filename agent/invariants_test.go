package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// One test per safety invariant of the remedy, each on the whole agent:
// informers over a fake API server, a fake table, a manual clock.

const grace = 30 * time.Second

func graceRemedy() *remedy.Settings {
	return &remedy.Settings{Grace: grace, Budget: 10, BudgetInterval: time.Minute}
}

// flowTo is a flow from a client pod to 10.96.0.10:80, translated to
// backend:8080.
func flowTo(backend string, sport uint16) snapshot.Flow {
	f := staleFlow()
	f.ID = uint32(sport)
	f.Orig.SrcPort, f.Reply.DstPort = sport, sport
	f.Reply.Src = netip.MustParseAddr(backend)
	return f
}

func slice(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: eps}
}

func endpoint(ip string, ready, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Terminating: &terminating}}
}

// endpointOf is the ready endpoint the EndpointSlice controller lists for
// p: its address and a reference to it.
func endpointOf(p *corev1.Pod) discoveryv1.Endpoint {
	e := endpoint(p.Status.PodIP, true, false)
	e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	return e
}

func (h *harness) findings(sev finding.Severity) float64 {
	return testutil.ToFloat64(h.agent.cfg.Metrics.Findings.WithLabelValues(rule.StaleNATFlowID, sev.String()))
}

func update(t *testing.T, client *fake.Clientset, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRemedyIsOffUnlessConfigured(t *testing.T) {
	h := start(t, fake.NewClientset(cluster()...), reportOnly, staleFlow())
	poll.Until(t, patience, "the stale flow to be reported", func() bool { return h.findings(finding.Warning) == 1 })
	h.settle(t, 3)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows without a remedy configured", n)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.RuleGauge(rule.StaleNATFlowID).WithLabelValues("ns", "svc")); v != 1 {
		t.Errorf("conntrack_stale_entries{ns/svc} = %v", v)
	}
}

func TestGracePeriodBeforeDeleting(t *testing.T) {
	h := start(t, fake.NewClientset(cluster()...), graceRemedy(), staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	h.settle(t, 3)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows before the grace period passed", n)
	}
	h.clock.Advance(grace)
	poll.Until(t, patience, "the deletion after the grace period", func() bool { return h.tab.count() == 1 })
}

// An endpoint that is not a pod (a hand-made EndpointSlice) leaves one slice
// before it appears in another: for a moment nothing holds its IP, and the
// flow looks stale. The grace period must bridge that moment.
func TestBackendMovingBetweenSlicesKeepsItsFlows(t *testing.T) {
	objs := cluster()
	objs = append(objs[:3], slice("svc-a", endpoint("10.244.0.5", true, false), endpoint("10.0.5.5", true, false)), slice("svc-b"))
	client := fake.NewClientset(objs...)
	h := start(t, client, graceRemedy(), flowTo("10.0.5.5", 41000))
	h.settle(t, 2)
	if v := h.findings(finding.Warning); v != 0 {
		t.Fatalf("a flow to a live endpoint reported: %v findings", v)
	}

	update(t, client, slice("svc-a", endpoint("10.244.0.5", true, false)))
	poll.Until(t, patience, "the gap to be seen", func() bool { return h.actions(remedy.Pending) >= 1 })
	update(t, client, slice("svc-b", endpoint("10.0.5.5", true, false)))
	poll.Until(t, patience, "the move to be seen", func() bool { return h.findings(finding.Warning) == 0 })

	h.clock.Advance(2 * grace)
	h.settle(t, 3)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows of a backend that only moved between slices", n)
	}
	if evs := h.events.With("StaleFlowDeleted"); len(evs) != 0 {
		t.Errorf("Events: %q", evs)
	}
}

func TestDrainingBackendKeepsItsFlows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slice *discoveryv1.EndpointSlice
	}{
		{"terminating endpoint", slice("svc-1", endpoint("10.244.0.5", true, false), endpoint("10.244.0.9", false, true))},
		{"gone from the slice, pod still exists", slice("svc-1", endpoint("10.244.0.5", true, false))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := metav1.Now()
			old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old", UID: "u0", DeletionTimestamp: &now},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
			objs := append(cluster()[:3], tc.slice, old)
			h := start(t, fake.NewClientset(objs...), graceRemedy(), staleFlow())
			h.settle(t, 2)
			h.clock.Advance(2 * grace)
			h.settle(t, 3)
			if n := h.tab.count(); n != 0 {
				t.Fatalf("deleted %d flows of a draining backend", n)
			}
			if v := h.findings(finding.Warning); v != 0 {
				t.Errorf("a draining backend reported as stale: %v findings", v)
			}
		})
	}
}

// The audit saw the backend gone, but by the time the grace period is over
// and the delete is due, the backend is back: the re-check against the
// caches as they are at that moment must stop the delete.
func TestRecheckRightBeforeDeleting(t *testing.T) {
	objs := cluster()
	objs = append(objs[:3], slice("svc-1", endpoint("10.244.0.5", true, false)))
	client := fake.NewClientset(objs...)
	h := start(t, client, graceRemedy(), flowTo("10.0.5.5", 41000))
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })

	// The next audit reads the cluster first and the table second; while
	// it reads the table, the grace period ends and the backend comes
	// back: that audit's remedy is due, and its re-check must see it.
	var once sync.Once
	h.tab.setOnCollect(func() {
		once.Do(func() {
			h.clock.Advance(grace)
			update(t, client, slice("svc-1", endpoint("10.244.0.5", true, false), endpoint("10.0.5.5", true, false)))
			poll.Until(t, patience, "the informer to see the backend back", func() bool {
				for _, ep := range h.kube.Informers.Snapshot().Endpoints {
					if ep.Address == netip.MustParseAddr("10.0.5.5") {
						return true
					}
				}
				return false
			})
		})
	})
	poll.Until(t, patience, "the re-check to refuse", func() bool { return h.actions(remedy.Refused) >= 1 })
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows whose backend came back", n)
	}
	evs := h.events.With("StaleFlowDeleteRefused")
	if len(evs) == 0 || !strings.Contains(evs[0], "re-check") || !strings.HasPrefix(evs[0], "Service Warning ns/svc") {
		t.Errorf("Events: %q", evs)
	}
}

func TestBudgetExceededRefusesTheWholeBatch(t *testing.T) {
	rem := &remedy.Settings{Budget: 2, BudgetInterval: time.Hour}
	h := start(t, fake.NewClientset(cluster()...), rem,
		flowTo("10.244.0.9", 41000), flowTo("10.244.0.10", 41001), flowTo("10.244.0.11", 41002))
	poll.Until(t, patience, "the batch to be refused", func() bool { return h.actions(remedy.Refused) >= 3 })
	h.settle(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d of a batch larger than the budget", n)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.Degraded.WithLabelValues("budget-exceeded")); v != 1 {
		t.Errorf("degraded{budget-exceeded} = %v", v)
	}
	// /readyz says what the metric says: the agent refuses to act.
	rec := httptest.NewRecorder()
	h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "budget-exceeded") || !strings.Contains(body, "3 ghost IPs due but only 2") {
		t.Errorf("/readyz with the batch refused = %d %q", rec.Code, body)
	}
	evs := h.events.With("RemedyBudgetExceeded")
	if len(evs) < 3 || !strings.HasPrefix(evs[0], "Service Warning ns/svc RemedyBudgetExceeded") || !strings.Contains(evs[0], "3 ghost IPs due but only 2") {
		t.Errorf("Events: %q", evs)
	}
}

func TestDryRunDeletesNothing(t *testing.T) {
	rem := &remedy.Settings{DryRun: true, Budget: 10, BudgetInterval: time.Minute}
	h := start(t, fake.NewClientset(cluster()...), rem, staleFlow())
	poll.Until(t, patience, "a dry-run action", func() bool { return h.actions(remedy.DryRun) >= 1 })
	h.settle(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("dry run deleted %d flows", n)
	}
	if evs := h.events.With("StaleFlowDeleteDryRun"); len(evs) == 0 || !strings.Contains(evs[0], "would delete tcp 10.244.1.50:40000 -> 10.96.0.10:80") {
		t.Errorf("Events: %q", evs)
	}
}

// The watch works at first, then the API server goes away: every watch
// ends and every new list and watch fails. A stale flow that appears then
// must not be deleted from a cache nobody can vouch for.
func TestWatchStaleMidRunDeletesNothing(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	api := newOutage(client)
	h := start(t, client, nil)
	h.settle(t, 2)

	api.begin()
	poll.Until(t, patience, "the agent to notice", func() bool { return strings.Contains(h.agent.Status().Degraded, "connection refused") })
	h.tab.add(staleFlow())
	h.waitDegraded(t, 3)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows while the watch was failing", n)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.Degraded.WithLabelValues("cache-stale")); v != 1 {
		t.Errorf("degraded{cache-stale} = %v", v)
	}
}

// Config.Actions is told of each action as it is taken, with its finding,
// and not of the pending ones before it.
func TestActionsAreToldToConfig(t *testing.T) {
	var mu sync.Mutex
	var got []remedy.Action
	h := startWith(t, fake.NewClientset(cluster()...), graceRemedy(), func(_ *harness, c *Config) {
		c.Actions = func(info rule.Info, a remedy.Action) {
			mu.Lock()
			defer mu.Unlock()
			if info.ID != a.Rule {
				t.Errorf("action of %s told with the rule %s", a.Rule, info.ID)
			}
			got = append(got, a)
		}
	}, staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("told of %d actions while the flow was pending", len(got))
	}
	mu.Unlock()
	h.clock.Advance(grace)
	poll.Until(t, patience, "the stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	h.stop()
	flow := staleFlow()
	if len(got) != 1 || got[0].Result != remedy.Done || got[0].Rule != rule.StaleNATFlowID ||
		got[0].Finding.Subject.Flow != flow.String() || !strings.HasPrefix(got[0].Reason, "deleted ") {
		t.Errorf("told of %+v, want the deletion of %s", got, flow.String())
	}
}

// lagging is the cluster's watch, made to fall behind when told: its Ready
// says so.
type lagging struct {
	*live.Watch
	mu     sync.Mutex
	behind error
}

func (l *lagging) Ready(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.behind != nil {
		return l.behind
	}
	return l.Watch.Ready(now)
}

// The last re-check also asks every watch whether it is still current: one
// that falls behind between the audit and the act (its watch broke while
// the table was read) stops the delete, even though the quorum read of the
// API server would let it through.
func TestRecheckRefusesWhenAWatchFallsBehind(t *testing.T) {
	var lag *lagging
	h := startWith(t, fake.NewClientset(cluster()...), graceRemedy(), func(h *harness, c *Config) {
		lag = &lagging{Watch: h.kube}
		c.Sources = slices.Clone(c.Sources)
		c.Sources[slices.Index(c.Sources, source.Source(h.kube))] = lag
	}, staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	var once sync.Once
	h.tab.setOnCollect(func() {
		once.Do(func() {
			h.clock.Advance(grace)
			lag.mu.Lock()
			lag.behind = errors.New("endpointslices: watch failed: connection reset by peer (0s ago)")
			lag.mu.Unlock()
		})
	})
	poll.Until(t, patience, "the re-check to refuse", func() bool { return h.actions(remedy.Refused) >= 1 })
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows while a watch had fallen behind", n)
	}
	if evs := h.events.With("StaleFlowDeleteRefused"); len(evs) == 0 || !strings.Contains(evs[0], "connection reset by peer") {
		t.Errorf("Events: %q", evs)
	}
}
