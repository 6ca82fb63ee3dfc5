package lab

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
)

// brokenWriter accepts ok writes, then fails every write with err, as
// stdout does once the reader of its pipe is gone.
type brokenWriter struct {
	ok     int
	err    error
	lines  []string
	writes int
}

func (w *brokenWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes > w.ok {
		return 0, w.err
	}
	w.lines = append(w.lines, string(p))
	return len(p), nil
}

// newTestTimeline returns a timeline writing to w and the clock it reads,
// which tests move by hand.
func newTestTimeline(w *brokenWriter) (*timeline, *fakeclock.Clock) {
	c := fakeclock.New(time.Date(2026, 11, 22, 14, 5, 0, 0, time.UTC))
	tl := newTimeline(w, c.Now())
	tl.now = c.Now
	return tl, c
}

// The first failed write is reported once, and nothing more is written:
// the run is told its reader is gone.
func TestTimelineReportsAFailedWriteOnce(t *testing.T) {
	w := &brokenWriter{ok: 2, err: syscall.EPIPE}
	tl, clock := newTestTimeline(w)
	var failures []error
	tl.failed = func(err error) { failures = append(failures, err) }
	tl.section("rollout")
	clock.Advance(1500 * time.Millisecond)
	tl.logf("api", "pod %s terminating", "web/api-v1")
	tl.logf("kubelet", "pod deleted")
	tl.logf("client", "request failed")
	tl.section("summary")
	if want := []string{"\n== rollout\n", "[  1.50s] api:      pod web/api-v1 terminating\n"}; strings.Join(w.lines, "") != strings.Join(want, "") {
		t.Errorf("written %q, want %q", w.lines, want)
	}
	if len(failures) != 1 || !errors.Is(failures[0], syscall.EPIPE) {
		t.Errorf("failures reported: %v, want one EPIPE", failures)
	}
	if w.writes != 3 {
		t.Errorf("%d writes, want 3: none after the one that failed", w.writes)
	}
}
