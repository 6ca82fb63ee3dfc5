package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// The stale flows to more ghost backends than are reported one by one
// are one finding (a crowd); what the agent keeps of it still names each
// of its addresses, and nothing else.
func TestACrowdIsNamedAtEachOfItsAddresses(t *testing.T) {
	const many = rule.DefaultOneByOne + 50
	var flows []snapshot.Flow
	for k := range many {
		flows = append(flows, flowTo(fmt.Sprintf("10.244.%d.%d", 100+k/250, k%250+1), uint16(40000+k)))
	}
	h := start(t, fake.NewClientset(cluster()...), reportOnly, flows...)
	h.settle(t, 1)
	at := h.agent.At(netip.MustParseAddr("10.244.100.17"))
	if len(at.Findings) != 1 || at.Findings[0].Rule != rule.StaleNATFlowID ||
		!strings.Contains(at.Findings[0].Message, fmt.Sprintf("still go to %d addresses", many)) {
		t.Errorf("at a ghost backend of the crowd: %+v", at)
	}
	if at := h.agent.At(netip.MustParseAddr("10.244.0.5")); len(at.Findings) != 0 {
		t.Errorf("at a live backend: %+v", at)
	}
	if st := h.agent.Status(); st.Findings != 1 {
		t.Errorf("status %+v, want one finding", st)
	}
}

// slowSource fails its first collection, and holds the next until let
// go, saying meanwhile what it is waiting on.
type slowSource struct {
	mu      sync.Mutex
	calls   int
	waiting bool
	release chan struct{}
}

func (*slowSource) Name() string { return "slow" }

func (s *slowSource) Collect(ctx context.Context, _ *snapshot.Snapshot) error {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	if !first {
		s.waiting = true
	}
	s.mu.Unlock()
	if first {
		return errors.New("boom")
	}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.waiting = false
	s.mu.Unlock()
	return nil
}

func (s *slowSource) Progress() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting {
		return ""
	}
	return "reading 3 of 5"
}

// While an audit waits on a source, the agent's status says what it
// waits on, before what made the last audit incomplete: the last reason
// may no longer hold.
func TestStatusSaysWhatTheAuditWaitsOn(t *testing.T) {
	slow := &slowSource{release: make(chan struct{})}
	var once sync.Once
	h := startWith(t, fake.NewClientset(cluster()...), reportOnly, func(h *harness, c *Config) {
		c.Sources = []source.Source{h.kube, slow, h.ct}
	})
	defer once.Do(func() { close(slow.release) })
	poll.Until(t, patience, "an audit waiting on the slow source", func() bool { return h.agent.Status().Busy != "" })
	st := h.agent.Status()
	if st.Busy != "slow: reading 3 of 5" ||
		!strings.HasPrefix(st.Degraded, "an audit is under way (slow: reading 3 of 5); the last one was incomplete: source-error: slow error: boom") {
		t.Errorf("status %+v", st)
	}
	once.Do(func() { close(slow.release) })
	h.settle(t, 1)
	if st := h.agent.Status(); st.Busy != "" || st.Degraded != "" {
		t.Errorf("after the audit: status %+v", st)
	}
}
