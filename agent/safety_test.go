package agent

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The remedy's safety holes, each closed and tested through the whole
// agent loop: informers over a fake API server, a fake table, a manual
// clock.

// A flow seen stale once, then a conntrack dump that fails for longer than
// the grace period, then a complete audit: the grace period starts over
// there. Evidence must hold through complete passes only.
func TestFailedDumpResetsGrace(t *testing.T) {
	h := start(t, fake.NewClientset(cluster()...), graceRemedy(), staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })

	h.tab.setFail(errors.New("dump cut short: no buffer space available"))
	h.waitDegraded(t, 1)
	h.clock.Advance(2 * grace)
	h.waitDegraded(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows while the table could not be read", n)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.SourceUp.WithLabelValues("conntrack")); v != 0 {
		t.Errorf("source_up{conntrack} = %v during failed dumps", v)
	}
	if st := h.agent.Status(); !strings.Contains(st.Degraded, "no buffer space available") {
		t.Errorf("status does not say why: %+v", st)
	}

	pending := h.actions(remedy.Pending)
	h.tab.setFail(nil)
	poll.Until(t, patience, "a complete audit after the failure", func() bool { return h.actions(remedy.Pending) > pending })
	h.settle(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows on the first complete audit after a failure: the grace period did not start over", n)
	}
	h.clock.Advance(grace)
	poll.Until(t, patience, "the deletion a grace period later", func() bool { return h.tab.count() == 1 })
}

// outage makes a fake API server go away and come back: every watch ends
// and every list and watch fails while it is down.
type outage struct {
	client  *fake.Clientset
	down    atomic.Bool
	mu      sync.Mutex
	watches []watch.Interface
}

func newOutage(client *fake.Clientset) *outage {
	o := &outage{client: client}
	refused := errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if o.down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if o.down.Load() {
			return true, nil, refused
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		o.mu.Lock()
		o.watches = append(o.watches, w)
		o.mu.Unlock()
		return true, w, err
	})
	return o
}

func (o *outage) begin() {
	o.down.Store(true)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.watches {
		w.Stop()
	}
	o.watches = nil
}

func (o *outage) end() { o.down.Store(false) }

// The same through an API server outage longer than the grace period.
func TestAPIOutageResetsGrace(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	api := newOutage(client)
	h := start(t, client, graceRemedy(), staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })

	api.begin()
	poll.Until(t, patience, "the agent to notice", func() bool { return strings.Contains(h.agent.Status().Degraded, "connection refused") })
	h.clock.Advance(2 * grace)
	h.waitDegraded(t, 2)

	api.end()
	// Once the errors are older than the window, the caches are trusted
	// again.
	h.clock.Advance(time.Minute + time.Second)
	pending := h.actions(remedy.Pending)
	poll.Until(t, patience, "a complete audit after the outage", func() bool { return h.actions(remedy.Pending) > pending })
	h.settle(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows on the first complete audit after an outage: the grace period did not start over", n)
	}
	h.clock.Advance(grace)
	poll.Until(t, patience, "the deletion a grace period later", func() bool { return h.tab.count() == 1 })
}

// The budget counts dead backends, not flows: one busy backend with more
// flows than any flow budget would allow is cleared at once, with the
// settings the agent ships.
func TestBusyBackendFitsTheDefaultBudget(t *testing.T) {
	var flows []snapshot.Flow
	for i := range 266 {
		flows = append(flows, flowTo("10.244.0.9", uint16(41000+i)))
	}
	st := &remedy.Settings{Budget: remedy.DefaultBudget, BudgetInterval: remedy.DefaultBudgetInterval, MaxPerGroup: remedy.DefaultMaxPerGroup}
	h := start(t, fake.NewClientset(cluster()...), st, flows...)
	poll.Until(t, patience, "all 266 flows deleted", func() bool { return h.tab.count() == 266 })
	if v := h.actions(remedy.Refused); v != 0 {
		t.Errorf("%v refusals", v)
	}
}

// The last re-check reads the API server, not the informer cache that
// produced the finding: a pod that holds the backend IP by now, which the
// cache has not seen, stops the delete.
func TestRecheckReadsTheAPIServer(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	// The pods' watch delivers nothing: the cache never learns of new pods.
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	// Nor does the audit ask again who holds the address before the
	// re-check: its answer stands longer than the grace period.
	h := startWith(t, client, graceRemedy(), func(h *harness, _ *Config) { h.kube.Holders.TTL, h.kube.Holders.MaxTTL = 24*time.Hour, 24*time.Hour }, staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })

	heir := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "heir", UID: "u9"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	if err := client.Tracker().Add(heir); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(grace)
	poll.Until(t, patience, "the re-check to refuse", func() bool { return h.actions(remedy.Refused) >= 1 })
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows whose backend IP a pod holds", n)
	}
	evs := h.events.With("StaleFlowDeleteRefused")
	if len(evs) == 0 || !strings.Contains(evs[0], "in a quorum read of the API server: 10.244.0.9 is held by pod ns/heir") {
		t.Errorf("Events: %q", evs)
	}
}

// Right before the delete the entry is read back from the kernel by its
// tuple: an entry that changed since it was judged is not deleted.
func TestChangedEntryIsNotDeleted(t *testing.T) {
	h := start(t, fake.NewClientset(cluster()...), graceRemedy(), staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	// Between the audit and the delete, the connection ends and a new one
	// reuses the tuple.
	reborn := staleFlow()
	reborn.ID = 99
	h.tab.mu.Lock()
	h.tab.beforeGet = func(t *table) { t.replaceLocked(reborn) }
	h.tab.mu.Unlock()
	h.clock.Advance(grace)
	poll.Until(t, patience, "the read-back to refuse", func() bool { return h.actions(remedy.Refused) >= 1 })
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows", n)
	}
	if evs := h.events.With("StaleFlowDeleteRefused"); len(evs) == 0 || !strings.Contains(evs[0], "was replaced since it was judged (conntrack id 7, now 99)") {
		t.Errorf("Events: %q", evs)
	}
}

// A watch that falls silent without an error (no event, no bookmark) is
// noticed on the agent's clock: the agent degrades and acts on nothing.
func TestSilentWatchDegrades(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	var clk *fakeclock.Clock
	h := startWith(t, client, graceRemedy(), func(h *harness, c *Config) {
		clk = fakeclock.New(c.Now())
		c.Now, h.kube.Now, h.ct.Now = clk.Now, clk.Now, clk.Now
		h.kube.Informers = live.NewInformers(client, live.InformerOptions{Node: "node-a", Now: clk.Now})
		h.kube.Holders.Now = clk.Now
		c.Remedies[0].Now = clk.Now
	})
	h.clock = clk
	h.settle(t, 2)
	h.tab.add(staleFlow())
	h.clock.Advance(live.DefaultSilence + time.Second)
	poll.Until(t, patience, "the agent to notice the silence", func() bool {
		return strings.Contains(h.agent.Status().Degraded, "nothing heard from the API server")
	})
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.Degraded.WithLabelValues("cache-stale")); v != 1 {
		t.Errorf("degraded{cache-stale} = %v", v)
	}
	h.clock.Advance(2 * grace)
	h.waitDegraded(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows on a silent watch", n)
	}
}

// A failed dump from the very start: nothing is ever deleted, the status
// and the log say why.
func TestFailedDumpFromTheStart(t *testing.T) {
	tab := &table{flows: []snapshot.Flow{staleFlow()}, fail: errors.New("conntrack dump: operation not permitted")}
	h := startWith(t, fake.NewClientset(cluster()...), nil, func(h *harness, _ *Config) {
		h.ct.Table = tab
	})
	h.waitDegraded(t, 3)
	h.stop()
	if len(tab.deleted) != 0 {
		t.Fatalf("deleted %d flows", len(tab.deleted))
	}
	if st := h.agent.Status(); !strings.Contains(st.Degraded, "source-error") || !strings.Contains(st.Degraded, "operation not permitted") {
		t.Errorf("status %+v", st)
	}
	if !strings.Contains(h.logs.String(), "operation not permitted") {
		t.Errorf("log does not say why:\n%s", h.logs.String())
	}
}

// A degraded agent keeps the last complete audit's findings published and
// says why it is degraded, in the log and in the metrics.
func TestDegradedKeepsMetricsAndSaysWhy(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	api := newOutage(client)
	h := start(t, client, reportOnly, staleFlow())
	poll.Until(t, patience, "the stale flow to be reported", func() bool { return h.findings(finding.Warning) == 1 })
	api.begin()
	poll.Until(t, patience, "the agent to degrade", func() bool { return h.agent.Status().Degraded != "" })
	h.waitDegraded(t, 1)
	if v := h.findings(finding.Warning); v != 1 {
		t.Errorf("findings gauge = %v while degraded, want the last complete audit's 1", v)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.SourceUp.WithLabelValues("kube")); v != 0 {
		t.Errorf("source_up{kube} = %v while degraded", v)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.SourceUp.WithLabelValues("conntrack")); v != 1 {
		t.Errorf("source_up{conntrack} = %v: the table was read fine", v)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "audit incomplete") || !strings.Contains(logs, "connect: connection refused") {
		t.Errorf("the log does not say why:\n%s", logs)
	}
}

// An Event names the client pod only when the pod that holds the client
// address provably opened the flow; otherwise the client is an address.
func TestEventsNameTheClientPodOnlyWhenProven(t *testing.T) {
	podStart := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		flowAt  time.Time
		wantPod bool
	}{
		{"flow opened by the pod", podStart.Add(time.Minute), true},
		{"flow older than the pod now at the address", podStart.Add(-time.Minute), false},
		{"no start time", time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(cluster(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "client", UID: "uc"},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.50", PodIPs: []corev1.PodIP{{IP: "10.244.1.50"}},
					StartTime: &metav1.Time{Time: podStart}}})
			f := staleFlow()
			f.Start = tc.flowAt
			h := start(t, fake.NewClientset(objs...), nil, f)
			poll.Until(t, patience, "the deletion", func() bool { return h.tab.count() == 1 })
			// The audit that deleted records its Events before it counts
			// itself complete.
			h.settle(t, 1)
			if evs := h.events.With("StaleFlowDeleted"); len(evs) == 0 {
				t.Fatal("no Event")
			}
			if got := len(h.events.With("Pod Normal app/client")) > 0; got != tc.wantPod {
				t.Errorf("Event on the client pod: %v, want %v (%q)", got, tc.wantPod, h.events.With("StaleFlowDeleted"))
			}
		})
	}
}
