package remedy

import (
	"testing"
	"time"
)

func TestBudgetSlidingWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &Budget{Max: 2, Interval: time.Minute}
	if !b.take(t0) || !b.take(t0.Add(10*time.Second)) {
		t.Fatal("the first two actions must be allowed")
	}
	if b.take(t0.Add(20*time.Second)) || b.remaining(t0.Add(20*time.Second)) != 0 {
		t.Fatal("a third action inside the window was allowed")
	}
	if b.remaining(t0.Add(time.Minute)) != 1 || !b.take(t0.Add(time.Minute)) {
		t.Fatal("the first action's slot must free after the interval")
	}
	if (&Budget{}).take(t0) {
		t.Fatal("the zero budget allowed an action")
	}
}
