//go:build linux

package conntrack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Kernel tests of conntrack events, each in a network namespace of its own
// (see inNewNetns). The kernel queues an event on the subscribers' sockets
// before Create or Delete returns, so a test can create entries and then
// read their events; it never sleeps, and waits for an event at most
// eventWait: the suite's patience, which only a hang reaches.

const eventWait = poll.Patience

func subscribeT(tb testing.TB) *Subscription {
	tb.Helper()
	s, err := Subscribe()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

var errEnough = errors.New("enough events")

// collect runs s.Run until n events have come and returns them; it fails
// the test when Run stops first or eventWait passes.
func collect(tb testing.TB, s *Subscription, n int) []Event {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	var got []Event
	err := s.Run(ctx, func(ev Event) error {
		got = append(got, ev)
		if len(got) == n {
			return errEnough
		}
		return nil
	})
	if err != errEnough {
		tb.Fatalf("after %d of %d events: %v", len(got), n, err)
	}
	return got
}

// setSysctl writes a per-namespace sysctl in the calling thread's
// namespace.
func setSysctl(tb testing.TB, name, value string) {
	tb.Helper()
	path := filepath.Join("/proc/sys/net/netfilter", name)
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// checkEvent checks an event's type and the entry it names: protocol,
// tuples, mark and zone as created, and an ID.
func checkEvent(tb testing.TB, ev *Event, typ EventType, want *snapshot.Flow) {
	tb.Helper()
	f := &ev.Flow
	switch {
	case ev.Type != typ:
		tb.Errorf("%v event for %v, want %v", ev.Type, f, typ)
	case f.Proto != want.Proto, f.Orig != want.Orig, f.Reply != want.Reply:
		tb.Errorf("%v event for %v %+v %+v, want %v %+v %+v", typ, f.Proto, f.Orig, f.Reply, want.Proto, want.Orig, want.Reply)
	case f.Mark != want.Mark || f.Zone != want.Zone:
		tb.Errorf("%v event for %v: mark %#x zone %d, want %#x %d", typ, f, f.Mark, f.Zone, want.Mark, want.Zone)
	case f.ID == 0:
		tb.Errorf("%v event for %v without an ID", typ, f)
	}
}

// marker is an entry no other test flow uses; creating it and waiting for
// its event shows that nothing was queued before it.
func marker(port uint16) snapshot.Flow {
	return snapshot.Flow{Proto: snapshot.ProtoUDP, Timeout: 60,
		Orig: tuple("10.99.0.1", "10.99.0.2", port, 9), Reply: tuple("10.99.0.2", "10.99.0.1", 9, port)}
}

// TestEvents creates an IPv4 TCP (DNATed) and an IPv6 UDP entry and deletes
// the first while Run is reading: the events are new, new, destroy, in that
// order (each is queued before the request that caused it returns), and the
// destroy event carries the tuples, the ID of the new one and the start
// time.
func TestEvents(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	setSysctl(t, "nf_conntrack_timestamp", "1")
	s := subscribeT(t)

	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(ev Event) error {
			select {
			case events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	next := func() Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		case <-time.After(eventWait):
			t.Fatalf("no event within %v", eventWait)
		}
		return Event{}
	}

	flows := labFlows()
	tcp4, udp6 := flows[0], flows[5]
	before := time.Now()
	create(t, c, []snapshot.Flow{tcp4, udp6})
	after := time.Now()
	newTCP := next()
	checkEvent(t, &newTCP, EventNew, &tcp4)
	newUDP := next()
	checkEvent(t, &newUDP, EventNew, &udp6)
	// A new event has the entry as created, but no start time (the
	// kernel sends the timestamp only in destroy events).
	if newTCP.Flow.State != "ESTABLISHED" || newTCP.Flow.Status&assuredReplied != assuredReplied ||
		newTCP.Flow.Timeout == 0 || !newTCP.Flow.Start.IsZero() {
		t.Errorf("new event: %+v", newTCP.Flow)
	}
	if newUDP.Flow.State != "" || newTCP.Flow.ID == newUDP.Flow.ID {
		t.Errorf("new events: %+v and %+v", newTCP.Flow, newUDP.Flow)
	}
	dumped := dumpAll(t, c)
	if id := dumped[keyOf(&tcp4)].ID; id != newTCP.Flow.ID {
		t.Errorf("new event ID %d, dumped %d", newTCP.Flow.ID, id)
	}

	target := dumped[keyOf(&tcp4)]
	if err := c.Delete(&target); err != nil {
		t.Fatal(err)
	}
	gone := next()
	checkEvent(t, &gone, EventDestroy, &tcp4)
	if gone.Flow.ID != newTCP.Flow.ID {
		t.Errorf("destroy event ID %d, new event ID %d", gone.Flow.ID, newTCP.Flow.ID)
	}
	const slack = 50 * time.Millisecond
	if st := gone.Flow.Start; st.Before(before.Add(-slack)) || st.After(after.Add(slack)) {
		t.Errorf("destroy event start %v, created between %v and %v", st, before, after)
	}
	if gone.Flow.State != "ESTABLISHED" || gone.Flow.Status&statusDying == 0 {
		t.Errorf("destroy event: state %q status %#x, want ESTABLISHED and IPS_DYING", gone.Flow.State, gone.Flow.Status)
	}

	// Nothing else was queued: the next event is that of a new entry.
	m := marker(1)
	create(t, c, []snapshot.Flow{m})
	ev := next()
	checkEvent(t, &ev, EventNew, &m)

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(eventWait):
		t.Fatal("Run did not return after cancel")
	}
}

// TestEventsCancelIdle ends Run's context while no events come: Run must
// notice without an event to wake it.
func TestEventsCancelIdle(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	s := subscribeT(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Run is waiting once it has handed over the one event there is.
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(Event) error {
			close(started)
			return nil
		})
	}()
	m := marker(2)
	create(t, c, []snapshot.Flow{m})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	case <-time.After(eventWait):
		t.Fatal("no event")
	}
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel: %v, want context.Canceled", err)
		}
		t.Logf("idle Run returned %v after cancel", time.Since(cancelled).Round(time.Millisecond))
	case <-time.After(eventWait):
		t.Fatalf("Run still running %v after cancel", eventWait)
	}

	// An ended context ends Run before it reads anything; a deadline as
	// well as a cancel.
	create(t, c, []snapshot.Flow{marker(3)})
	if err := s.Run(ctx, func(ev Event) error { return errors.New("event read") }); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	got := 0
	err := s.Run(dctx, func(Event) error { got++; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || got != 1 {
		t.Errorf("Run until a deadline: %d events, %v; want the one queued and DeadlineExceeded", got, err)
	}
}

// TestEventsOverflow lets events pile up on a socket with a small buffer:
// Run must report the loss, and then deliver the events that come after it
// and none queued before it.
func TestEventsOverflow(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	s, err := subscribe(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rcvbuf, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	fill(t, c, n)

	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	got := 0
	err = s.Run(ctx, func(Event) error { got++; return nil })
	if !errors.Is(err, ErrOverflow) {
		t.Fatalf("Run after %d entries on a %d-byte buffer: %d events, %v; want ErrOverflow", n, rcvbuf, got, err)
	}
	t.Logf("%d entries created, %d-byte receive buffer: %d events before ErrOverflow", n, rcvbuf, got)

	// The subscription still works, and begins after the loss.
	m := marker(4)
	create(t, c, []snapshot.Flow{m})
	if err := c.Delete(&m); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, s, 2)
	checkEvent(t, &evs[0], EventNew, &m)
	checkEvent(t, &evs[1], EventDestroy, &m)

	// A loss is reported again once the queue has been emptied.
	var f snapshot.Flow
	for i := 0; i < 200; i++ {
		f = marker(uint16(100 + i))
		create(t, c, []snapshot.Flow{f})
	}
	if err := s.Run(ctx, nil); !errors.Is(err, ErrOverflow) {
		t.Fatalf("second overflow: %v", err)
	}
	// Nothing is left queued: Run waits until its deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	got = 0
	if err := s.Run(short, func(Event) error { got++; return nil }); !errors.Is(err, context.DeadlineExceeded) || got != 0 {
		t.Fatalf("after the second overflow: %d events, %v", got, err)
	}
}

// TestEventsBeforeRun checks what a subscriber sees of entries that came
// before it: nothing of one created before Subscribe (but, with events
// always on, its destroy event), everything of one created between
// Subscribe and Run.
func TestEventsBeforeRun(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	// 1, not the default 2: the kernel then gives every entry event state,
	// including those created while nothing listens (under 2, whether
	// they get it depends on listeners anywhere on the host).
	setSysctl(t, "nf_conntrack_events", "1")
	flows := labFlows()
	early, late := flows[1], flows[4]
	create(t, c, []snapshot.Flow{early})
	s := subscribeT(t)
	create(t, c, []snapshot.Flow{late})
	if err := c.Delete(&early); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, s, 2)
	checkEvent(t, &evs[0], EventNew, &late)
	checkEvent(t, &evs[1], EventDestroy, &early)
}

// TestEventsOtherNamespace checks that a subscription sees only its own
// namespace's events: entries created in a second namespace, where a
// subscription of its own sees them, do not reach the first.
func TestEventsOtherNamespace(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	s := subscribeT(t)

	// A second namespace, held only by the sockets opened in it: a thread
	// enters it, opens them and ends.
	type opened struct {
		c   *Conn
		s   *Subscription
		err error
	}
	ch := make(chan opened)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var o opened
		defer func() { ch <- o }()
		ns, err := netns.New()
		if err != nil {
			o.err = err
			return
		}
		ns.Close()
		if o.c, o.err = Open(); o.err != nil {
			return
		}
		if o.s, o.err = Subscribe(); o.err != nil {
			o.c.Close()
		}
	}()
	other := <-ch
	if other.err != nil {
		t.Fatalf("second namespace: %v", other.err)
	}
	defer other.c.Close()
	defer other.s.Close()

	flows := labFlows()
	create(t, other.c, flows[:3])
	if err := other.c.Delete(&flows[0]); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, other.s, 4)
	for i := range 3 {
		checkEvent(t, &evs[i], EventNew, &flows[i])
	}
	checkEvent(t, &evs[3], EventDestroy, &flows[0])

	m := marker(5)
	create(t, c, []snapshot.Flow{m})
	evs = collect(t, s, 1)
	checkEvent(t, &evs[0], EventNew, &m)
}

// TestEventsCallbackError stops Run from the callback; the next Run goes on
// with the next event.
func TestEventsCallbackError(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	s := subscribeT(t)
	a, b := marker(6), marker(7)
	create(t, c, []snapshot.Flow{a, b})
	stop := errors.New("stop")
	var first Event
	err := s.Run(context.Background(), func(ev Event) error {
		first = ev
		return stop
	})
	if err != stop {
		t.Fatalf("Run: %v, want the callback's error as it is", err)
	}
	checkEvent(t, &first, EventNew, &a)
	evs := collect(t, s, 1)
	checkEvent(t, &evs[0], EventNew, &b)
}

// TestEventsDisabled turns events off in the namespace: EventsEnabled says
// so, and nothing is sent for entries created meanwhile.
func TestEventsDisabled(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	s := subscribeT(t)
	for _, v := range []string{"0", "1", "2"} {
		setSysctl(t, "nf_conntrack_events", v)
		on, err := EventsEnabled()
		if err != nil || on != (v != "0") {
			t.Errorf("nf_conntrack_events=%s: EventsEnabled() = %v, %v", v, on, err)
		}
	}
	setSysctl(t, "nf_conntrack_events", "0")
	quiet := marker(8)
	create(t, c, []snapshot.Flow{quiet})
	if err := c.Delete(&quiet); err != nil {
		t.Fatal(err)
	}
	setSysctl(t, "nf_conntrack_events", "1")
	m := marker(9)
	create(t, c, []snapshot.Flow{m})
	evs := collect(t, s, 1)
	checkEvent(t, &evs[0], EventNew, &m)
}

func TestEventsSysctlMissing(t *testing.T) {
	_, err := readEventsSysctl(filepath.Join(t.TempDir(), "nf_conntrack_events"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nf_conntrack is not loaded") {
		t.Errorf("missing sysctl: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if on, err := readEventsSysctl(bad); err == nil || on {
		t.Errorf("value 7: %v, %v", on, err)
	}
}

// TestEventsPermission subscribes from a thread without CAP_NET_ADMIN.
func TestEventsPermission(t *testing.T) {
	t.Parallel()
	name := inNewNetns(t)
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	done := make(chan error)
	go func() {
		// This thread keeps its reduced capabilities: it is never unlocked,
		// so it ends with the goroutine.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- err
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		s, err := Subscribe()
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	if err := <-done; !errors.Is(err, ErrPermission) || !errors.Is(err, unix.EPERM) {
		t.Errorf("Subscribe without CAP_NET_ADMIN: %v, want ErrPermission", err)
	}
}

// TestEventsRunDoesNotAllocate counts the allocations of Run over a
// thousand events. The count is process-wide, so a goroutine another test
// left behind may add a few: the least of three rounds is judged.
func TestEventsRunDoesNotAllocate(t *testing.T) {
	inNewNetns(t)
	c := open(t)
	s := subscribeT(t)
	const n = 1000
	ctx := context.Background()
	const rounds = 3
	fill(t, c, rounds*n) // the events wait in the socket's buffer
	least := uint64(1 << 63)
	for round := 0; round < rounds; round++ {
		seen := 0
		fn := func(Event) error {
			seen++
			if seen == n {
				return errEnough
			}
			return nil
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := s.Run(ctx, fn)
		runtime.ReadMemStats(&after)
		if err != errEnough {
			t.Fatalf("round %d, after %d events: %v", round, seen, err)
		}
		least = min(least, after.Mallocs-before.Mallocs)
	}
	// Not 0: the runtime may allocate in the background.
	if least > 2 {
		t.Errorf("Run allocated %d times for %d events (least of 3 rounds)", least, n)
	}
}

func TestEventsClosed(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	s, err := Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run after Close: %v", err)
	}
}
