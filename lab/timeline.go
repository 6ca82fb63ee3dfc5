package lab

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline prints what happens, stamped with the time since the scenario
// started. When a write fails (the reader is gone: a closed pipe or
// terminal) it writes nothing more and calls failed once with the error,
// so that the run can stop and clean up instead of going on unseen.
type timeline struct {
	mu     sync.Mutex
	w      io.Writer
	start  time.Time
	now    func() time.Time
	failed func(error)
	err    error
}

func newTimeline(w io.Writer, start time.Time) *timeline {
	return &timeline{w: w, start: start, now: time.Now}
}

// since is the time from the scenario's start to t, in seconds.
func (t *timeline) since(at time.Time) float64 { return at.Sub(t.start).Seconds() }

// logf prints one event line: "[  1.23s] who: what".
func (t *timeline) logf(who, format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.write(fmt.Sprintf("[%6.2fs] %-9s %s\n", t.since(t.now()), who+":", fmt.Sprintf(format, a...)))
}

// section prints a heading.
func (t *timeline) section(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.write(fmt.Sprintf("\n== %s\n", fmt.Sprintf(format, a...)))
}

// write writes s unless there is no writer or a write failed before. The
// caller holds t.mu.
func (t *timeline) write(s string) {
	if t.w == nil || t.err != nil {
		return
	}
	if _, err := io.WriteString(t.w, s); err != nil {
		t.err = err
		if t.failed != nil {
			t.failed(err)
		}
	}
}
