package remedy

import (
	"fmt"
	"sync"
	"time"
)

// Budget caps how many groups (ghost IPs) may be acted on in any sliding
// window of Interval. The zero value allows nothing.
type Budget struct {
	// Max groups per Interval.
	Max int
	// Interval is the window the cap applies to.
	Interval time.Duration

	mu    sync.Mutex
	spent []time.Time
}

// BudgetError is returned when acting on every due group would exceed the
// budget. Nothing of the batch is done: a batch larger than the budget is
// the signature of a broken view of the world (an emptied cache, a
// misread table), and a partial clean-up would hide it.
type BudgetError struct {
	Remedy    string
	Due       int
	Remaining int
	Max       int
	Interval  time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s: %d ghost IPs due but only %d of %d per %s left in the budget: none acted on",
		e.Remedy, e.Due, e.Remaining, e.Max, e.Interval)
}

// CapError refuses one group whose targets outnumber the cap on targets
// per group: a backend with more flows than any node should hold is more
// likely a misread than a ghost.
type CapError struct {
	Remedy string
	Group  string
	Due    int
	Max    int
}

func (e *CapError) Error() string {
	return fmt.Sprintf("%s: %d targets due for %s, more than the cap of %d per ghost IP: none acted on",
		e.Remedy, e.Due, e.Group, e.Max)
}

// remaining returns how many groups the window still allows at now.
func (b *Budget) remaining(now time.Time) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return b.Max - len(b.spent)
}

// take records one group at now; it reports false when none is left.
func (b *Budget) take(now time.Time) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	if len(b.spent) >= b.Max {
		return false
	}
	b.spent = append(b.spent, now)
	return true
}

func (b *Budget) expire(now time.Time) {
	i := 0
	for i < len(b.spent) && now.Sub(b.spent[i]) >= b.Interval {
		i++
	}
	b.spent = b.spent[i:]
}
