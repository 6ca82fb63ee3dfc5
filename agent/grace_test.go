package agent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// slowPass is the node's table, read by passes that take as long as took
// by the test's clock: the first pass that judges addr (one its changes
// name) moves the clock on by took while it reads, once; or, with
// changeDuring set, also says a source changed meanwhile.
type slowPass struct {
	*conntrack.Watch
	clock        *fakeclock.Clock
	addr         netip.Addr
	took         time.Duration
	changeDuring func()

	mu      sync.Mutex
	armed   bool
	focused bool
	done    bool
	reads   int
}

func (s *slowPass) Focus(c source.Changes, full bool) {
	_, named := c.Addrs[s.addr]
	s.mu.Lock()
	s.focused = named && s.armed && !s.done
	s.mu.Unlock()
	s.Watch.Focus(c, full)
}

func (s *slowPass) Collect(ctx context.Context, snap *snapshot.Snapshot) error {
	s.mu.Lock()
	s.reads++
	slow := s.focused
	if slow {
		s.focused, s.done = false, true
	}
	s.mu.Unlock()
	if slow {
		s.clock.Advance(s.took)
		if s.changeDuring != nil {
			s.changeDuring()
		}
	}
	return s.Watch.Collect(ctx, snap)
}

// arm makes the next pass that judges addr slow.
func (s *slowPass) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

func (s *slowPass) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// doomedPod is a running pod of node-a at 10.244.0.9, the backend of
// staleFlow.
func doomedPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "doomed", UID: "u9"},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
}

// startSlow runs the agent with a grace period over a cluster where
// doomedPod holds staleFlow's backend, its table read by a slowPass that
// takes more than the grace period to judge the pod's address.
func startSlow(t *testing.T, configure func(*harness, *Config)) (*harness, *fake.Clientset, *slowPass) {
	t.Helper()
	client := fake.NewClientset(append(cluster(), doomedPod())...)
	var slow *slowPass
	h := startWith(t, client, graceRemedy(), func(h *harness, c *Config) {
		c.AuditInterval = time.Hour
		slow = &slowPass{Watch: h.ct, clock: h.clock, addr: netip.MustParseAddr("10.244.0.9"), took: grace + time.Second}
		c.Sources[1] = slow
		if configure != nil {
			configure(h, c)
		}
	}, staleFlow())
	h.settle(t, 1)
	if n := h.actions(remedy.Pending); n != 0 {
		t.Fatalf("%v actions pending while the backend's pod runs", n)
	}
	slow.arm()
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return h, client, slow
}

// A ghost's evidence holds from the moment the change that made it
// arrived, not from the moment an audit got round to judging it: a pass
// that takes longer than the grace period to judge a deleted pod's
// address acts on its flows at once.
func TestGraceStartsWhenTheChangeArrived(t *testing.T) {
	h, _, _ := startSlow(t, nil)
	poll.Until(t, patience, "the flow deleted by the audit that judged it", func() bool { return h.tab.count() == 1 })
	if n := h.actions(remedy.Pending); n != 0 {
		t.Errorf("%v actions pending before the deletion: the grace started at the audit", n)
	}
}

// When a source says it changed while a pass reads, what the pass read is
// not what the sources held when the changes it judges arrived: the grace
// starts when the pass ends.
func TestGraceStartsAtTheAuditWhenASourceSpokeMeanwhile(t *testing.T) {
	h, _, _ := startSlow(t, func(h *harness, c *Config) {
		c.Sources[1].(*slowPass).changeDuring = func() { h.agent.noteChange() } // the agent, once made
	})
	poll.Until(t, patience, "the flow's deletion pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows before their grace period, counted from the pass's end, was over", n)
	}
	h.clock.Advance(grace)
	signal(h.agent.poke) // the agent's timer counts the grace on the real clock
	poll.Until(t, patience, "the deletion after the grace period", func() bool { return h.tab.count() == 1 })
}

// When a grace period ends and nothing has changed since the last audit,
// the remedy acts on that audit's findings without reading the sources
// again.
func TestGraceEndActsWithoutReadingAgain(t *testing.T) {
	h, reads := startCounted(t)
	before, audits := reads.count(), h.audits("complete")
	h.clock.Advance(shortGrace)
	poll.Until(t, patience, "the deletion after the grace period", func() bool { return h.tab.count() == 1 })
	if n := reads.count() - before; n != 0 {
		t.Errorf("the table was read %d times at the grace period's end, with nothing changed since the audit", n)
	}
	if n := h.audits("complete") - audits; n != 0 {
		t.Errorf("%v audits at the grace period's end, with nothing changed since the last", n)
	}
}

// A ledger that cannot be watched may have changed unseen: the grace
// period's end reads every source again.
func TestGraceEndReadsAgainWhenALedgerIsNotWatched(t *testing.T) {
	h, reads := startCounted(t, unwatchedLedger{})
	before := reads.count()
	h.clock.Advance(shortGrace)
	poll.Until(t, patience, "the deletion after the grace period", func() bool { return h.tab.count() == 1 })
	if reads.count() == before {
		t.Errorf("the table was not read again at the grace period's end, with a ledger unwatched")
	}
}

// shortGrace is a grace period whose end the agent's timer reaches soon.
const shortGrace = 200 * time.Millisecond

// startCounted runs an agent with shortGrace and no scheduled audit on a
// stale flow, and waits for its deletion to be pending.
func startCounted(t *testing.T, ledgers ...source.Source) (*harness, *slowPass) {
	t.Helper()
	var reads *slowPass
	h := startWith(t, fake.NewClientset(cluster()...), &remedy.Settings{Grace: shortGrace, Budget: 10, BudgetInterval: time.Minute}, func(h *harness, c *Config) {
		c.AuditInterval = time.Hour
		reads = &slowPass{Watch: h.ct, clock: h.clock}
		c.Sources[1] = reads
		c.Ledgers = ledgers
	}, staleFlow())
	poll.Until(t, patience, "the stale flow to be pending", func() bool { return h.actions(remedy.Pending) >= 1 })
	return h, reads
}

// unwatchedLedger is a live ledger whose watch could not be set up.
type unwatchedLedger struct{}

func (unwatchedLedger) Name() string                                      { return "unwatched" }
func (unwatchedLedger) Collect(context.Context, *snapshot.Snapshot) error { return nil }
func (unwatchedLedger) Start(context.Context) error                       { return nil }
func (unwatchedLedger) Ready(time.Time) error                             { return nil }
func (unwatchedLedger) Changes() source.Changes                           { return source.Changes{} }
func (unwatchedLedger) OnChange(func())                                   {}
func (unwatchedLedger) Unsure() bool                                      { return true }
