package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// An API server that stops answering without failing anything (its
// process stopped: the watches stay open and silent) makes the agent
// degraded and not ready, saying why, within two pulses; it deletes
// nothing meanwhile, and is ready again once the server answers. (Its
// /readyz said ok throughout: a silent watch reads as a quiet cluster
// for the informers' silence, minutes.)
func TestHungAPIServerIsNotReady(t *testing.T) {
	hangAPIServer(t)
}

// The same while an audit waits on the hung server, looking up who holds
// a suspect backend's address: /readyz says what the sources say now, not
// what the last audit that ended said. (It said ok for as long as the
// look-up waited, a minute in a real cluster.) The audit that waited is
// incomplete once it ends: its sources were not current throughout, and
// the grace periods start over. (It acted on its findings at once.)
func TestHungAPIServerIsNotReadyDuringALookUp(t *testing.T) {
	h := hangAPIServer(t, staleFlow())
	if !strings.Contains(h.logs.String(), "the sources were not current during the audit") {
		t.Errorf("the audit that waited on the hung server was not found incomplete; the log:\n%s", h.logs.String())
	}
}

func hangAPIServer(t *testing.T, flows ...snapshot.Flow) *harness {
	client := fake.NewClientset(cluster()...)
	var mu sync.Mutex
	var hung chan struct{}
	client.PrependReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		c := hung
		mu.Unlock()
		if c != nil {
			<-c
		}
		return false, nil, nil
	})
	client.Discovery().(interface {
		PrependReactor(string, string, clienttesting.ReactionFunc)
	}).PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		c := hung
		mu.Unlock()
		if c != nil {
			<-c
		}
		return false, nil, nil
	})
	resume := func() {
		mu.Lock()
		defer mu.Unlock()
		if hung != nil {
			close(hung)
			hung = nil
		}
	}
	h := start(t, client, reportOnly, flows...)
	t.Cleanup(resume) // before the agent stops: an audit may wait on the server

	h.settle(t, 2)
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		h.agent.Handler(h.reg).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz before = %d %q", code, body)
	}

	mu.Lock()
	hung = make(chan struct{})
	mu.Unlock()
	var body string
	poll.Until(t, poll.Patience, "/readyz to say the API server does not answer", func() bool {
		// The harness's clock moves only when told: the silence is
		// measured on it, the pulse's own waits on the machine's.
		h.clock.Advance(time.Second)
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "the API server has not answered for") {
		t.Errorf("/readyz while the API server hangs: %q", body)
	}

	// The hang lasts until the agent's own watch of its sources has
	// seen it, as one of seconds does.
	poll.Until(t, poll.Patience, "the agent to see its sources not current", func() bool { return h.agent.unready.Load() > 0 })
	resume()
	poll.Until(t, poll.Patience, "the agent ready again", func() bool {
		h.clock.Advance(time.Second)
		code, _ := readyz()
		return code == http.StatusOK
	})
	return h
}

// A remedy whose re-check waits on a hung API server acts on nothing once
// it answers: the sources were not current while it waited, so what the
// audit judged is refused and waits a grace period of complete audits
// again. (The fresh read, answered once the server ran again, deleted the
// flow the moment it came.)
func TestRecheckThroughAHungAPIServerActsOnNothing(t *testing.T) {
	client := fake.NewClientset(cluster()...)
	var mu sync.Mutex
	var armed bool
	var hung chan struct{}
	wait := func() {
		mu.Lock()
		c := hung
		mu.Unlock()
		if c != nil {
			<-c
		}
	}
	client.PrependReactor("*", "*", func(act clienttesting.Action) (bool, runtime.Object, error) {
		// The re-check's quorum read of the Service, by name, hangs the
		// server; every request then waits.
		if l, ok := act.(clienttesting.ListAction); ok && act.GetResource().Resource == "services" && !l.GetListRestrictions().Fields.Empty() {
			mu.Lock()
			if armed && hung == nil {
				hung = make(chan struct{})
			}
			mu.Unlock()
		}
		wait()
		return false, nil, nil
	})
	client.Discovery().(interface {
		PrependReactor(string, string, clienttesting.ReactionFunc)
	}).PrependReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		wait()
		return false, nil, nil
	})
	resume := func() {
		mu.Lock()
		defer mu.Unlock()
		armed = false
		if hung != nil {
			close(hung)
			hung = nil
		}
	}
	h := start(t, client, graceRemedy(), staleFlow())
	t.Cleanup(resume)
	h.settle(t, 2)
	mu.Lock()
	armed = true
	mu.Unlock()
	h.clock.Advance(grace + time.Second)
	poll.Until(t, poll.Patience, "the re-check to wait on the hung server", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hung != nil
	})
	poll.Until(t, poll.Patience, "the agent to see its sources not current", func() bool {
		h.clock.Advance(time.Second)
		return h.agent.unready.Load() > 0
	})
	resume()
	h.settle(t, 2)
	if n := h.tab.count(); n != 0 {
		t.Fatalf("deleted %d flows on a re-check that waited through a hung API server", n)
	}
	// A grace period of complete audits later, it acts.
	poll.Until(t, poll.Patience, "the flow deleted a grace period later", func() bool {
		h.clock.Advance(time.Second)
		return h.tab.count() == 1
	})
}
