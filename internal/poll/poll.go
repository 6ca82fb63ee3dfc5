package poll

import (
	"testing"
	"time"
)

// Patience is the one ceiling of the suite's waits: how long a test waits
// for a condition that holds within seconds on an idle machine before it
// calls it a hang. It is long because a loaded machine (go test ./... on
// two cores beside a kube-apiserver, a shared CI runner) stretches every
// wait, and a wait that fails there tells nothing about the code: only a
// hang should reach it. A test whose point is how soon a thing happens
// asserts the order of events, or a lower bound, not a shorter ceiling.
const Patience = 2 * time.Minute

// minPause and maxPause bound the pause between two checks, which is a
// tenth of the time waited so far: a wait overshoots the moment its
// condition holds by about a tenth, and a long one does not spin on a
// condition that asks an API server or a peer.
const (
	minPause = time.Millisecond
	maxPause = 50 * time.Millisecond
)

// pause is how long to wait before the next check, waited into the wait.
func pause(waited time.Duration) time.Duration {
	return min(max(waited/10, minPause), maxPause)
}

// Until checks cond at once, then again after each pause, until it holds,
// and returns how long that took (to within the last pause). When cond has
// not held within the given time it fails tb with "timed out after
// <within> waiting for <what>"; the last check comes at that deadline.
// cond runs on the caller's goroutine, so it may fail or skip tb itself.
func Until(tb testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	return UntilNoted(tb, within, what, func() (bool, string) { return cond(), "" })
}

// UntilNoted is Until for a cond that also says what it saw: the failure
// ends with the note of the last check, "; last seen: <note>", unless that
// note is empty.
func UntilNoted(tb testing.TB, within time.Duration, what string, cond func() (ok bool, note string)) time.Duration {
	tb.Helper()
	start := time.Now()
	for {
		ok, note := cond()
		waited := time.Since(start)
		if ok {
			return waited
		}
		if waited >= within {
			if note != "" {
				note = "; last seen: " + note
			}
			tb.Fatalf("timed out after %v waiting for %s%s", within, what, note)
			return waited
		}
		time.Sleep(min(pause(waited), within-waited))
	}
}
