package poll

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and returns,
// where the real one would end the test.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// The waits run in synctest bubbles: the clock moves only when every
// goroutine of the test sleeps, so the times they see are exact.

// A condition that comes to hold is seen at most a pause later: a tenth
// of the wait, at least 1ms and at most 50ms.
func TestUntilSeesTheConditionSoonAfterItHolds(t *testing.T) {
	for _, tc := range []struct {
		holds time.Duration // when the condition comes to hold
		late  time.Duration // how much later it may be seen
	}{
		{0, 0},
		{500 * time.Microsecond, time.Millisecond},
		{5 * time.Millisecond, time.Millisecond},
		{100 * time.Millisecond, 10 * time.Millisecond},
		{2 * time.Second, 50 * time.Millisecond},
		{30 * time.Second, 50 * time.Millisecond},
	} {
		t.Run(tc.holds.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &recorder{TB: t}
				start := time.Now()
				took := Until(r, time.Minute, "the condition", func() bool { return time.Since(start) >= tc.holds })
				if len(r.failures) != 0 {
					t.Fatalf("failed with %q", r.failures)
				}
				if took < tc.holds || took > tc.holds+tc.late {
					t.Errorf("took %v for a condition that holds after %v, want at most %v more", took, tc.holds, tc.late)
				}
			})
		})
	}
}

// A condition that never holds fails the test at the deadline, with what
// was waited for and, from UntilNoted, what the last check saw; a long wait
// checks about once a maxPause, not in a spin.
func TestUntilFailsAtTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		within time.Duration
		noted  bool
		note   string
		want   string
	}{
		{name: "Until", within: 3 * time.Second,
			want: "timed out after 3s waiting for the thing"},
		{name: "UntilNoted", within: 10 * time.Second, noted: true, note: "state 3",
			want: "timed out after 10s waiting for the thing; last seen: state 3"},
		{name: "UntilNoted without a note", within: 10 * time.Second, noted: true,
			want: "timed out after 10s waiting for the thing"},
		{name: "a minute", within: time.Minute,
			want: "timed out after 1m0s waiting for the thing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &recorder{TB: t}
				checks := 0
				var took time.Duration
				if tc.noted {
					took = UntilNoted(r, tc.within, "the thing", func() (bool, string) { checks++; return false, tc.note })
				} else {
					took = Until(r, tc.within, "the thing", func() bool { checks++; return false })
				}
				if len(r.failures) != 1 || r.failures[0] != tc.want {
					t.Errorf("failures %q, want one: %q", r.failures, tc.want)
				}
				if took != tc.within {
					t.Errorf("gave up after %v, want at the deadline, %v", took, tc.within)
				}
				// Pauses of 1ms to 0.5s, then of maxPause.
				if most := 60 + int(tc.within/maxPause); checks > most {
					t.Errorf("checked %d times in %v, want at most %d", checks, tc.within, most)
				}
			})
		})
	}
}

// Outside a bubble the pauses are real: a condition another goroutine
// makes true is seen.
func TestUntilSeesAnotherGoroutine(t *testing.T) {
	done := make(chan struct{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(done)
	}()
	took := Until(t, 10*time.Second, "the goroutine to finish", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if took < 20*time.Millisecond {
		t.Errorf("saw the goroutine finish after %v, before it slept 20ms", took)
	}
}
