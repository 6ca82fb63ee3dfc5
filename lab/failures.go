package lab

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"

	"github.com/ghostwatch/ghostwatch/internal/text"
)

// failureKind names why a request failed as a person reads it: a
// timeout (no answer within the client's deadline), what the kernel said
// (connection reset, connection refused, no route to host, connection
// timed out), or the server closing the connection.
// Errors of no known kind are named by their innermost error.
func failureKind(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ETIMEDOUT):
		// The kernel gave up retransmitting, not the client waiting.
		return "connection timed out"
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to host"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the server"
	case errors.As(err, &errno):
		return errno.Error()
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err.Error()
		}
		err = inner
	}
}

// failureLog prints the client's failures on the timeline as they happen:
// the first failed request, and the first after each change of kind, with
// its error. Identical failures that follow are counted, and the count is
// printed when the kind changes, when a request succeeds again, or when
// the log is stopped, so that a long outage is one or two lines, not one
// per request.
type failureLog struct {
	tl *timeline

	mu      sync.Mutex
	stopped bool
	// The current streak of failures of one kind; n is 0 when the last
	// request succeeded.
	kind string
	n    int
	last Outcome
}

// add takes the outcome of one request, in the order they were made.
func (f *failureLog) add(o Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	kind := failureKind(o.Err)
	if f.n > 0 && kind == f.kind {
		f.n++
		f.last = o
		return
	}
	f.summarize()
	if kind != "" {
		f.kind, f.n, f.last = kind, 1, o
		f.tl.logf("client", "request failed: %s (%v)", kind, o.Err)
	}
}

// stop prints the count of the streak under way and ignores what follows:
// the run is drawing its conclusions.
func (f *failureLog) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.summarize()
		f.stopped = true
	}
}

// summarize prints how many more requests failed as the first of the
// streak did, and ends the streak. The caller holds f.mu.
func (f *failureLog) summarize() {
	if f.n > 1 {
		f.tl.logf("client", "%s failed the same way (%s), the last one sent at %.2fs",
			text.Count(f.n-1, "more request", "more requests"), f.kind, f.tl.since(f.last.Sent))
	}
	f.kind, f.n = "", 0
}
