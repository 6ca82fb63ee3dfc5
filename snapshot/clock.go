package snapshot

import (
	"fmt"
	"time"
)

// Clock is what the reader of a ledger measured of another party's clock
// (the API server's, a gossip agent's) against its own: that clock read
// Offset ahead of the reader's (behind when negative), give or take Bound.
// The zero Clock was not measured: a time read on it is compared with no
// time of another clock, because nothing says how far the two disagree.
type Clock struct {
	// Name is whose clock it is ("the API server's"), for a message.
	Name string
	// Measured is true when Offset and Bound come from a measurement.
	Measured bool
	// Offset is how far the clock runs ahead of the reader's.
	Offset time.Duration
	// Bound is how far the true offset may lie from Offset either way:
	// the measurement's own uncertainty (a round trip, a timestamp's
	// resolution).
	Bound time.Duration
	// By says how it was measured ("the Date of 40 answers of the API
	// server"), for a message.
	By string
}

// ReaderClock is the reader's own clock: the times the reader stamps
// itself (when it first read a member listed) are on it.
var ReaderClock = Clock{Name: "ghostwatch's", Measured: true, By: "its own"}

// String says whose clock it is, its offset and how it was measured, or
// that it was not.
func (c Clock) String() string {
	name := c.Name
	if name == "" {
		name = "an unnamed"
	}
	if !c.Measured {
		return name + " clock, not measured against ghostwatch's"
	}
	return fmt.Sprintf("%s clock, %s ahead of ghostwatch's ±%s (%s)", name, c.Offset.Round(time.Millisecond), c.Bound.Round(time.Millisecond), c.By)
}

// Stamp is a time read on one clock, true to within Resolution after it
// (a time written in whole seconds is up to a second early).
type Stamp struct {
	At         time.Time
	Clock      Clock
	Resolution time.Duration
}

// Before reports whether a certainly happened before b, their clocks'
// measured offsets and bounds allowed for: false whenever a clock was
// not measured, or a time is unknown. A proof that needs two clocks to
// agree asks this, and refuses when it is false.
func (a Stamp) Before(b Stamp) bool {
	if a.At.IsZero() || b.At.IsZero() || !a.Clock.Measured || !b.Clock.Measured {
		return false
	}
	// Each time on the reader's clock: the latest a may have been, and
	// the earliest b may have been.
	latestA := a.At.Add(a.Resolution).Add(-a.Clock.Offset).Add(a.Clock.Bound)
	earliestB := b.At.Add(-b.Clock.Offset).Add(-b.Clock.Bound)
	return latestA.Before(earliestB)
}

// Comparable says why a and b cannot be compared, or "" when they can.
func (a Stamp) Comparable(b Stamp) string {
	for _, s := range []Stamp{a, b} {
		if !s.Clock.Measured {
			return s.Clock.String()
		}
	}
	return ""
}
