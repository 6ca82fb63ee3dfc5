package lab

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	errTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	errReset   = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
)

func TestFailureKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errTimeout, "timeout"},
		{fmt.Errorf("dial: %w", errors.Join(errors.New("x"), os.ErrDeadlineExceeded)), "timeout"},
		{errReset, "connection reset"},
		{errRefused, "connection refused"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, "no route to host"},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, "broken pipe"},
		{io.EOF, "connection closed by the server"},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}, "connection timed out"},
		{fmt.Errorf("reading: %w", errors.New("HTTP 503")), "HTTP 503"},
	} {
		if got := failureKind(tc.err); got != tc.want {
			t.Errorf("failureKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// The timeline shows the first failure, and the first of each new kind,
// when it happens, with its error; repeats of one kind are one line that
// counts them, printed when the kind changes, when a request is answered
// again, or when the log stops.
func TestFailureLogShowsEachKindAndCountsRepeats(t *testing.T) {
	w := &brokenWriter{ok: 1 << 30}
	tl, clock := newTestTimeline(w)
	log := &failureLog{tl: tl}
	printed := 0
	step := func(err error, want ...string) {
		t.Helper()
		clock.Advance(100 * time.Millisecond)
		log.add(Outcome{Sent: clock.Now(), At: clock.Now(), Err: err})
		got := w.lines[printed:]
		printed = len(w.lines)
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("after a request failing with %v: printed %q, want %q", err, got, want)
		}
	}
	step(nil)
	step(nil)
	step(errTimeout, "[  0.30s] client:   request failed: timeout (read tcp: i/o timeout)\n")
	step(errTimeout)
	step(errTimeout)
	step(errTimeout)
	step(errReset,
		"[  0.70s] client:   3 more requests failed the same way (timeout), the last one sent at 0.60s\n",
		"[  0.70s] client:   request failed: connection reset (read tcp: read: connection reset by peer)\n")
	step(errRefused, "[  0.80s] client:   request failed: connection refused (dial tcp: connect: connection refused)\n")
	step(errRefused)
	step(nil, "[  1.00s] client:   1 more request failed the same way (connection refused), the last one sent at 0.90s\n")
	step(nil)
	step(errTimeout, "[  1.20s] client:   request failed: timeout (read tcp: i/o timeout)\n")
	step(errTimeout)
	step(errTimeout)
	clock.Advance(time.Second)
	log.stop()
	if got, want := w.lines[printed:], "[  2.40s] client:   2 more requests failed the same way (timeout), the last one sent at 1.40s\n"; strings.Join(got, "") != want {
		t.Errorf("stop printed %q, want %q", got, want)
	}
	printed = len(w.lines)
	step(errTimeout)
	step(errReset)
	log.stop()
	if len(w.lines) != printed {
		t.Errorf("printed after stop: %q", w.lines[printed:])
	}
}
