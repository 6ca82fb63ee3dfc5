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
		poll.UntilNoted(t, poll.Patience, "cache-c alive in "+n.name+"'s list", stateOf(t, n, "cache-c", StateAlive))
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- LeaveOnDone(ctx, c.ml, time.Second) }()
	select {
	case err := <-done:
		t.Fatalf("LeaveOnDone returned %v before its context was done", err)
	case <-time.After(50 * time.Millisecond):
	}
	// On a busy machine a live member may miss an ack, be declared dead
	// and refute it: only what the others log once it leaves counts.
	failedBefore := map[string]int{}
	for _, n := range []*testNode{a, b} {
		failedBefore[n.name] = len(n.log.Lines("Marking cache-c as failed"))
	}
	stopped := time.Now()
	stop() // SIGTERM
	// No error says the broadcast went out within the timeout: past it,
	// LeaveOnDone returns ErrLeaveTimeout (TestLeaveOnDoneTimeout).
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LeaveOnDone: %v", err)
		}
	case <-time.After(poll.Patience):
		t.Fatalf("LeaveOnDone did not return within %v of its context's end, with a timeout of 1s", poll.Patience)
	}
	t.Logf("left and shut down %v after the context ended", time.Since(stopped))

	// The others mark it left, not dead: they heard it leave, and did
	// not wait for their probes to fail. (A probe sent just before the
	// leave may still fail and log "Suspect cache-c has failed", which
	// changes nothing: memberlist suspects only live members.)
	for _, n := range []*testNode{a, b} {
		poll.UntilNoted(t, poll.Patience, "cache-c left in "+n.name+"'s list", stateOf(t, n, "cache-c", StateLeft))
		l, _ := n.members(t)
		if m := l.member("cache-c"); m.Since == "" {
			t.Errorf("%s's list gives no time for cache-c's leave: %+v", n.name, m)
		}
		if lines := n.log.Lines("Marking cache-c as failed"); len(lines) > failedBefore[n.name] {
			t.Errorf("%s declared cache-c dead, which left: %v", n.name, lines[failedBefore[n.name]:])
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
	poll.UntilNoted(t, poll.Patience, "cache-mute alive in cache-a's list", stateOf(t, a, "cache-mute", StateAlive))

	ctx, stop := context.WithCancel(context.Background())
	stop()
	// The mute member gets no broadcast out for an hour: LeaveOnDone
	// returning with ErrLeaveTimeout, and not before the timeout, shows it
	// kept to its timeout, however long a busy machine made it take.
	const timeout = 200 * time.Millisecond
	start := time.Now()
	err := LeaveOnDone(ctx, mute.ml, timeout)
	if !errors.Is(err, ErrLeaveTimeout) || !strings.Contains(err.Error(), "cache-mute") {
		t.Fatalf("LeaveOnDone: %v; want ErrLeaveTimeout naming cache-mute", err)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("LeaveOnDone gave up after %v, before its timeout of %v", took, timeout)
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
