package fakeclock

import (
	"sync"
	"time"
)

// Clock is a time that changes only through Advance and Set. It is safe
// for concurrent use: the code under test may read it from its own
// goroutines while the test moves it. The zero value reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading t.
func New(t time.Time) *Clock {
	return &Clock{t: t}
}

// Now returns the clock's time. Its method value, c.Now, is what the code
// under test takes as its clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock d forward; a negative d moves it back.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set makes the clock read t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
