package live

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/kubefake"
	"github.com/ghostwatch/ghostwatch/internal/poll"
)

// stoppable makes a fake client's calls block while hung, as a stopped API
// server's do: nothing answers, nothing fails.
type stoppable struct {
	mu   sync.Mutex
	hung chan struct{}
}

func (h *stoppable) react(k8stesting.Action) (bool, runtime.Object, error) {
	h.mu.Lock()
	c := h.hung
	h.mu.Unlock()
	if c != nil {
		<-c
	}
	return false, nil, nil
}

func (h *stoppable) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hung = make(chan struct{})
}

func (h *stoppable) resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hung != nil {
		close(h.hung)
		h.hung = nil
	}
}

// A hung API server (it answers nothing, fails nothing) is told from a
// quiet one within twice the pulse's interval, and its answering again is
// seen; a watch that heard from the server recently answers for it, and
// the server is not asked.
func TestPulseTellsAHungServer(t *testing.T) {
	client := kubefake.NewClientset()
	h := &stoppable{}
	client.PrependReactor("*", "*", h.react)
	t.Cleanup(h.resume)
	var mu sync.Mutex
	var heard time.Time
	changes := make(chan struct{}, 8)
	p := &Pulse{Client: client, Interval: 20 * time.Millisecond, Heard: func() time.Time { mu.Lock(); defer mu.Unlock(); return heard }}
	p.OnChange(func() { changes <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Start(ctx)
	poll.Until(t, time.Minute, "answered pulses", func() bool { return p.Ready(time.Now()) == nil && !p.lastAnswer().IsZero() })

	h.stop()
	var err error
	poll.Until(t, time.Minute, "the hung server told", func() bool { err = p.Ready(time.Now()); return err != nil })
	if !strings.Contains(err.Error(), "the API server has not answered for") || !strings.Contains(err.Error(), "no answer within 20ms") {
		t.Errorf("Ready = %v", err)
	}
	<-changes
	// A watch heard from it just now: trusted again, though the pulse
	// still fails.
	mu.Lock()
	heard = time.Now()
	mu.Unlock()
	if err := p.Ready(time.Now()); err != nil {
		t.Errorf("Ready just after a watch heard from the server = %v", err)
	}
	mu.Lock()
	heard = time.Time{}
	mu.Unlock()

	h.resume()
	poll.Until(t, time.Minute, "the server heard again", func() bool { return p.Ready(time.Now()) == nil })
	<-changes
}

// lastAnswer is when the server last answered a pulse.
func (p *Pulse) lastAnswer() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}
