package gossip

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/internal/poll"
)

func TestLeaveOnDone(t *testing.T) {
	a := startNode(t, "cache-a", "127.0.0.31", 0, testLabel, nil)
	b := startNode(t, "cache-b", "127.0.0.32", 0, testLabel, nil)
	c := startNode(t, "cache-c", "127.0.0.33", 0, testLabel, nil)
	b.join(t, a)
	c.join(t, a)
	for _, n := range []*testNode{a, b} {
		poll.UntilNoted(t, 10*time.Second, "cache-c alive in "+n.name+"'s list", stateOf(t, n, "cache-c", StateAlive))
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- LeaveOnDone(ctx, c.ml, time.Second) }()
	select {
	case err := <-done:
		t.Fatalf("LeaveOnDone returned %v before its context was done", err)
	case <-time.After(50 * time.Millisecond):
	}
	stopped := time.Now()
	stop() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LeaveOnDone: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LeaveOnDone did not return within 5s of its context's end, with a timeout of 1s")
	}
	took := time.Since(stopped)
	if took > 1500*time.Millisecond {
		t.Errorf("leaving took %v, beyond the timeout of 1s", took)
	}
	t.Logf("left and shut down %v after the context ended", took)

	// The others mark it left, not dead: they heard it leave, and did
	// not wait for their probes to fail. (A probe sent just before the
	// leave may still fail and log "Suspect cache-c has failed", which
	// changes nothing: memberlist suspects only live members.)
	for _, n := range []*testNode{a, b} {
		poll.UntilNoted(t, 5*time.Second, "cache-c left in "+n.name+"'s list", stateOf(t, n, "cache-c", StateLeft))
		l, _ := n.members(t)
		if m := l.member("cache-c"); m.Since == "" {
			t.Errorf("%s's list gives no time for cache-c's leave: %+v", n.name, m)
		}
		if lines := n.log.Lines("Marking cache-c as failed"); len(lines) > 0 {
			t.Errorf("%s declared cache-c dead, which left: %v", n.name, lines)
		}
	}
	resp, err := http.Get(c.url + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("cache-c's own list after it shut down: %s, want 503", resp.Status)
	}
}

// TestLeaveOnDoneTimeout: a member whose leave broadcast cannot go out in
// time (it neither gossips nor probes within the test) is shut down all
// the same, and says why.
func TestLeaveOnDoneTimeout(t *testing.T) {
	a := startNode(t, "cache-a", "127.0.0.34", 0, testLabel, nil)
	mute := startNode(t, "cache-mute", "127.0.0.35", 0, testLabel, func(c *memberlist.Config) {
		c.GossipInterval = 0 // no gossip but what rides on probes
		c.ProbeInterval = time.Hour
	})
	mute.join(t, a)
	poll.UntilNoted(t, 10*time.Second, "cache-mute alive in cache-a's list", stateOf(t, a, "cache-mute", StateAlive))

	ctx, stop := context.WithCancel(context.Background())
	stop()
	start := time.Now()
	err := LeaveOnDone(ctx, mute.ml, 200*time.Millisecond)
	if !errors.Is(err, ErrLeaveTimeout) || !strings.Contains(err.Error(), "cache-mute") {
		t.Fatalf("LeaveOnDone: %v; want ErrLeaveTimeout naming cache-mute", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("LeaveOnDone took %v with a timeout of 200ms", took)
	}
	resp, err := http.Get(mute.url + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("cache-mute's list after LeaveOnDone: %s; want 503: it was not shut down", resp.Status)
	}
}

func TestLeaveOnDoneAfterShutdown(t *testing.T) {
	a := startNode(t, "cache-a", "127.0.0.36", 0, testLabel, nil)
	if err := a.ml.Shutdown(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stop()
	err := LeaveOnDone(ctx, a.ml, 0)
	if err == nil || !strings.Contains(err.Error(), "shut down before it could leave") {
		t.Errorf("LeaveOnDone on a member shut down: %v; want an error, not memberlist's panic", err)
	}
}
