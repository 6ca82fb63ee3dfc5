package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/eventstest"
	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The kernel side of the agent is tested in the lab package; here the
// conntrack table and the deleter are fakes, to pin down the safety
// invariants one by one.

// table is a fake conntrack table: a source of its flows and a table the
// remedy reads entries back from and deletes them in, as the kernel would.
type table struct {
	mu        sync.Mutex
	onCollect func()
	// fail, when set, makes a dump fail, as a dump cut short does.
	fail error
	// beforeGet, when set, runs before an entry is read back: the table
	// changes between the audit and the remedy.
	beforeGet func(t *table)
	collects  int // dumps of the whole table
	flows     []snapshot.Flow
	deleted   []snapshot.Flow
}

// Dump reads the table as the kernel does: every flow to fn, unless the
// dump fails.
func (t *table) Dump(_ context.Context, fn func(*snapshot.Flow) error) (int, error) {
	t.mu.Lock()
	hook := t.onCollect
	t.mu.Unlock()
	if hook != nil {
		hook()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail != nil {
		return 0, t.fail
	}
	t.collects++
	for i := range t.flows {
		fl := t.flows[i]
		if err := fn(&fl); err != nil {
			return i, err
		}
	}
	return len(t.flows), nil
}

func (t *table) setOnCollect(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onCollect = fn
}

func (t *table) setFail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fail = err
}

func (t *table) add(f snapshot.Flow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flows = append(t.flows, f)
}

// replaceLocked swaps the entry with f's tuple for f, as when a connection
// ends and a new one reuses its tuple.
func (t *table) replaceLocked(f snapshot.Flow) {
	for i := range t.flows {
		if t.flows[i].Orig == f.Orig && t.flows[i].Proto == f.Proto {
			t.flows[i] = f
		}
	}
}

func (t *table) Get(f *snapshot.Flow) (snapshot.Flow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.beforeGet != nil {
		t.beforeGet(t)
	}
	for i := range t.flows {
		if t.flows[i].Orig == f.Orig && t.flows[i].Proto == f.Proto {
			return t.flows[i], nil
		}
	}
	return snapshot.Flow{}, fmt.Errorf("get: %w", syscall.ENOENT)
}

func (t *table) Delete(f *snapshot.Flow) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.flows {
		if t.flows[i].Orig == f.Orig && t.flows[i].Proto == f.Proto && (f.ID == 0 || t.flows[i].ID == f.ID) {
			t.flows = append(t.flows[:i], t.flows[i+1:]...)
			t.deleted = append(t.deleted, *f)
			return nil
		}
	}
	return fmt.Errorf("delete: %w", syscall.ENOENT)
}

func (t *table) deletedFlows() []snapshot.Flow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]snapshot.Flow(nil), t.deleted...)
}

func (t *table) dumps() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.collects
}

func (t *table) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.deleted)
}

// staleFlow goes to ClusterIP 10.96.0.10:80 of ns/svc, translated to
// 10.244.0.9, which no pod holds.
func staleFlow() snapshot.Flow {
	return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", ID: 7,
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr("10.244.0.9"), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: 40000}}
}

func cluster() []runtime.Object {
	ready := true
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "live", UID: "u1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}},
	}
}

type harness struct {
	agent  *Agent
	kube   *live.Watch
	ct     *conntrack.Watch
	clock  *fakeclock.Clock // grace periods pass only when a test says so, however slow the machine
	tab    *table
	reg    *prometheus.Registry
	events *eventstest.Recorder
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// reportOnly asks start for an agent without a remedy.
var reportOnly = &remedy.Settings{}

// start runs an agent against client and a fake table holding flows. st
// configures the remedies; nil means no grace period and a budget of 10
// ghost IPs per minute. The remedies act on the table.
func start(t *testing.T, client kubernetes.Interface, st *remedy.Settings, flows ...snapshot.Flow) *harness {
	t.Helper()
	return startWith(t, client, st, nil, flows...)
}

// startWith is start with a last say on the configuration.
func startWith(t *testing.T, client kubernetes.Interface, st *remedy.Settings, configure func(*harness, *Config), flows ...snapshot.Flow) *harness {
	t.Helper()
	h := &harness{tab: &table{flows: flows}, clock: fakeclock.New(time.Now()), reg: prometheus.NewRegistry(), events: &eventstest.Recorder{},
		logs: &syncBuffer{}, done: make(chan struct{})}
	rules := rule.InScope(rule.All(rule.Config{}), rule.ScopeNode)
	var rems []*remedy.Remedy
	if st != reportOnly {
		if st == nil {
			st = &remedy.Settings{Budget: 10, BudgetInterval: time.Minute}
		}
		st.Now = h.clock.Now
		var err error
		if rems, err = remedy.Build(rules, []string{rule.StaleNATFlowID}, *st, &remedy.Flows{Table: h.tab}); err != nil {
			t.Fatal(err)
		}
	}
	h.ct = &conntrack.Watch{Table: h.tab, Now: h.clock.Now, Metrics: conntrack.NewMetrics(h.reg, sink.Namespace)}
	h.kube = &live.Watch{
		// As the agent runs: its node's pods, and the others looked up.
		// Watches over a fake API server send no bookmarks: a silence is
		// only a sign of trouble in the test that says so.
		Informers: live.NewInformers(client, live.InformerOptions{Node: "node-a", Now: h.clock.Now, Silence: 24 * time.Hour}),
		Holders:   &live.Holders{Client: client, Now: h.clock.Now},
		Client:    client,
		Now:       h.clock.Now,
	}
	for _, r := range rems {
		r.Actuator = &remedy.Flows{Table: h.ct}
	}
	cfg := Config{
		NodeName:      "node-a",
		Sources:       []source.Source{h.kube, h.ct},
		Rules:         rules,
		Remedies:      rems,
		AuditInterval: 50 * time.Millisecond,
		Metrics:       NewMetrics(h.reg, rules),
		Events:        h.events,
		Log:           slog.New(slog.NewTextHandler(h.logs, nil)),
		Now:           h.clock.Now,
	}
	if configure != nil {
		configure(h, &cfg)
	}
	h.agent = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		if err := h.agent.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(h.stop)
	return h
}

// syncBuffer is a log destination the agent's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

// actions reads remedy_actions_total for stale-nat-flow and one result.
func (h *harness) actions(result remedy.Result) float64 {
	return testutil.ToFloat64(h.agent.cfg.Metrics.RemedyActions.WithLabelValues(rule.StaleNATFlowID, string(result)))
}

// triggers are what may start an audit: the agent's own, and what the
// sources say changed.
var triggers = []string{triggerStart, triggerTimer, triggerChange, triggerGrace, triggerRetry, "cluster", "holders", "new-flow", "events-lost", hostlocal.Name}

// audits reads how many audits with the outcome (complete, degraded) have
// run.
func (h *harness) audits(outcome string) float64 {
	var n float64
	for _, trigger := range triggers {
		n += testutil.ToFloat64(h.agent.cfg.Metrics.Audits.WithLabelValues(trigger, outcome))
	}
	return n
}

// settle waits until n more complete audits have run.
func (h *harness) settle(t *testing.T, n float64) {
	t.Helper()
	target := h.audits("complete") + n
	poll.Until(t, patience, fmt.Sprintf("%v more audits", n), func() bool { return h.audits("complete") >= target })
}

// waitDegraded waits until n more degraded audits have run.
func (h *harness) waitDegraded(t *testing.T, n float64) {
	t.Helper()
	target := h.audits("degraded") + n
	poll.Until(t, patience, fmt.Sprintf("%v more degraded audits", n), func() bool { return h.audits("degraded") >= target })
}

// patience is how long a test waits for the agent's goroutines to do what
// it expects of them: milliseconds, unless the machine is very busy.
const patience = poll.Patience

func TestDeletesAStaleFlowAndReportsIt(t *testing.T) {
	h := start(t, fake.NewClientset(cluster()...), nil, staleFlow())
	poll.Until(t, patience, "the stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	h.settle(t, 2)
	got := h.tab.deletedFlows()
	if len(got) == 1 {
		// The index stamped when it first saw the flow; the entry is the
		// same.
		got[0].Seen = time.Time{}
	}
	if len(got) != 1 || got[0] != staleFlow() {
		t.Errorf("deleted %+v, want exactly the reported flow, once", got)
	}
	evs := h.events.With("StaleFlowDeleted")
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Service Normal ns/svc StaleFlowDeleted") || !strings.Contains(evs[0], "10.244.0.9:8080") {
		t.Errorf("Events for the deletion: %q", evs)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.RemedyCounter(rule.StaleNATFlowID).WithLabelValues("stale-nat-flow")); v != 1 {
		t.Errorf("flows deleted metric = %v", v)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.RemedyActions.WithLabelValues("stale-nat-flow", "done")); v != 1 {
		t.Errorf("remedy actions metric = %v", v)
	}
	rec := httptest.NewRecorder()
	h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`ghostwatch_conntrack_flows_deleted_total{rule="stale-nat-flow"} 1`, `ghostwatch_source_up{source="kube"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), "10.244.") {
		t.Error("/metrics exposes an IP address as a label value")
	}
}

func TestAPIServerUnreachableAtStartDeletesNothing(t *testing.T) {
	client, err := kubernetes.NewForConfig(restConfigFor("https://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, client, nil, staleFlow())
	poll.Until(t, patience, "a degraded audit", func() bool { return h.agent.Status().Degraded != "" })
	h.stop()
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows without the API server", n)
	}
	if st := h.agent.Status(); !strings.Contains(st.Degraded, "cache-stale") {
		t.Errorf("status %+v", st)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.Degraded.WithLabelValues("cache-stale")); v != 1 {
		t.Errorf("degraded{cache-stale} = %v", v)
	}
	rec := httptest.NewRecorder()
	h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "degraded") {
		t.Errorf("/readyz = %d %q", rec.Code, rec.Body.String())
	}
}

// failingLedger is a node ledger that cannot be read.
type failingLedger struct{}

func (failingLedger) Name() string { return "hostlocal" }
func (failingLedger) Collect(context.Context, *snapshot.Snapshot) error {
	return errors.New("reading host-local's data directory /var/lib/cni/networks: permission denied")
}

// A node ledger that cannot be read leaves its own rules out; the audits
// stay complete and the conntrack remedy still acts.
func TestAFailingLedgerLeavesTheRestOfTheAudit(t *testing.T) {
	h := startWith(t, fake.NewClientset(cluster()...), nil, func(_ *harness, c *Config) {
		c.Ledgers = []source.Source{failingLedger{}}
	}, staleFlow())
	poll.Until(t, patience, "the stale flow to be deleted", func() bool { return h.tab.count() == 1 })
	if logs := h.logs.String(); strings.Contains(logs, "reason="+reasonSourceError) {
		t.Errorf("an audit was incomplete for a ledger the conntrack rules do not read:\n%s", logs)
	}
	if v := testutil.ToFloat64(h.agent.cfg.Metrics.SourceUp.WithLabelValues("hostlocal")); v != 0 {
		t.Errorf("source_up{source=hostlocal} = %v", v)
	}
	if !strings.Contains(h.logs.String(), "a ledger cannot be read") {
		t.Errorf("no log of the failing ledger:\n%s", h.logs.String())
	}
}

// host-local's store wiped while nothing in the cluster changes (no pod
// comes or goes) starts an audit at once, not at the next full one.
func TestAuditsWhenHostLocalsStoreChanges(t *testing.T) {
	root := t.TempDir()
	for p, content := range map[string]string{
		"etc/cni/net.d/10-kindnet.conflist":       `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`,
		"var/lib/cni/networks/kindnet/10.244.1.5": "c1\neth0",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := startWith(t, fake.NewClientset(cluster()...), reportOnly, func(_ *harness, c *Config) {
		c.AuditInterval = time.Hour
		c.Ledgers = []source.Source{&hostlocal.Watch{Source: hostlocal.Source{Root: root}}}
	})
	h.settle(t, 1)
	byStore := func() float64 {
		return testutil.ToFloat64(h.agent.cfg.Metrics.Audits.WithLabelValues(hostlocal.Name, "complete"))
	}
	if n := byStore(); n != 0 {
		t.Fatalf("%v audits by a change of the store before it changed", n)
	}
	store := filepath.Join(root, "var/lib/cni/networks/kindnet")
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	// An audit is counted under the first of the changes it took: the
	// fake API server's watches end at once and their informers list
	// again, and a change of theirs taken with the wipe's counts the audit
	// as the cluster's. Each later look makes the store change again.
	n := 0
	poll.Until(t, patience, "an audit started by the wiped store", func() bool {
		if byStore() >= 1 {
			return true
		}
		n++
		if err := os.MkdirAll(store, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(store, fmt.Sprintf("10.244.1.%d", 10+n%200)), []byte("c\neth0"), 0o600); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

// ciliumLedger is the proxy source on a node whose Services Cilium's
// kube-proxy replacement translates, as a listener root opened says.
type ciliumLedger struct{}

func (ciliumLedger) Name() string { return "proxy" }
func (ciliumLedger) Collect(context.Context, *snapshot.Snapshot) error {
	return source.Unsupported("no kube-proxy answers at 127.0.0.1:10249, and a Cilium agent answers at 127.0.0.1:9879 (cilium-agent (pid 812, uid 0))")
}

// What the agent does not judge is said, on /readyz (still 200: the rest
// is judged) and as ghostwatch_rules_not_judged{rule,reason}: the flow
// rules where Service NAT does not show in conntrack, the IPAM rules when
// host-local's store cannot be read.
func TestWhatIsNotJudgedIsSaid(t *testing.T) {
	h := startWith(t, fake.NewClientset(cluster()...), reportOnly, func(_ *harness, c *Config) {
		c.Ledgers = []source.Source{failingLedger{}, ciliumLedger{}}
	})
	poll.Until(t, patience, "a complete audit", func() bool { st := h.agent.Status(); return !st.LastAudit.IsZero() && st.Degraded == "" })
	rec := httptest.NewRecorder()
	h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"not judged on this node: stale-nat-flow, misdelivered-flow (proxy: no kube-proxy answers at 127.0.0.1:10249, and a Cilium agent answers at 127.0.0.1:9879 (cilium-agent (pid 812, uid 0)))",
		"not judged, a ledger unread: ipam-unbooked-ip, ipam-leaked-ip",
		"(hostlocal: error: reading host-local's data directory /var/lib/cni/networks: permission denied",
	} {
		if rec.Code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/readyz = %d %q; want 200 and %q", rec.Code, body, want)
		}
	}
	for _, c := range []struct{ rule, reason string }{
		{rule.StaleNATFlowID, notJudgedBlind}, {rule.MisdeliveredFlowID, notJudgedBlind},
		{rule.IPAMUnbookedIPID, notJudgedSourceError},
	} {
		if v := testutil.ToFloat64(h.agent.cfg.Metrics.NotJudged.WithLabelValues(c.rule, c.reason)); v != 1 {
			t.Errorf("rules_not_judged{rule=%q,reason=%q} = %v, want 1", c.rule, c.reason, v)
		}
	}
}
