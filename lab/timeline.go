package lab

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline prints what happens, stamped with the time since the scenario
// started, and remembers it for the JSON report.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newTimeline(w io.Writer, start time.Time) *timeline {
	return &timeline{w: w, start: start}
}

// logf prints one event line: "[  1.23s] who: what".
func (t *timeline) logf(who, format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return
	}
	fmt.Fprintf(t.w, "[%6.2fs] %-9s %s\n", time.Since(t.start).Seconds(), who+":", fmt.Sprintf(format, a...))
}

// section prints a heading.
func (t *timeline) section(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return
	}
	fmt.Fprintf(t.w, "\n== %s\n", fmt.Sprintf(format, a...))
}
