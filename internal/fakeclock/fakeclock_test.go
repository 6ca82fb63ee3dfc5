package fakeclock

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	c := New(t0)
	for _, step := range []struct {
		name string
		move func()
		want time.Time
	}{
		{"new", func() {}, t0},
		{"advance", func() { c.Advance(90 * time.Second) }, t0.Add(90 * time.Second)},
		{"advance back", func() { c.Advance(-30 * time.Second) }, t0.Add(time.Minute)},
		{"set", func() { c.Set(t0.Add(time.Hour)) }, t0.Add(time.Hour)},
		{"set back", func() { c.Set(t0) }, t0},
	} {
		step.move()
		if got := c.Now(); !got.Equal(step.want) {
			t.Errorf("after %s: Now() = %v, want %v", step.name, got, step.want)
		}
		time.Sleep(time.Millisecond)
		if got := c.Now(); !got.Equal(step.want) {
			t.Errorf("after %s and a real millisecond: Now() = %v, want %v", step.name, got, step.want)
		}
	}
}

func TestZeroClockReadsTheZeroTime(t *testing.T) {
	var c Clock
	if got := c.Now(); !got.IsZero() {
		t.Errorf("zero Clock: Now() = %v, want the zero time", got)
	}
}

// Readers on other goroutines and a writer share the clock; run with
// -race, this fails on an unguarded read.
func TestClockIsSafeForConcurrentUse(t *testing.T) {
	c := New(t0)
	now := c.Now
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := t0
			for range 1000 {
				got := now()
				if got.Before(last) {
					t.Errorf("Now() went back from %v to %v while only Advance ran", last, got)
					return
				}
				last = got
			}
		})
	}
	for range 1000 {
		c.Advance(time.Second)
	}
	wg.Wait()
	if got, want := c.Now(), t0.Add(1000*time.Second); !got.Equal(want) {
		t.Errorf("after 1000 advances of 1s: Now() = %v, want %v", got, want)
	}
}
