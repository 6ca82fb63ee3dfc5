package remedy

import (
	"fmt"
	"sync"
	"time"
)

// Budget caps how many actions may be taken in any sliding window of
// Interval. The zero value allows nothing.
type Budget struct {
	// Max actions per Interval.
	Max int
	// Interval is the window the cap applies to.
	Interval time.Duration

	mu    sync.Mutex
	spent []time.Time
}

// BudgetError is returned when acting on every due finding would exceed the
// budget. Nothing of the batch is done: a batch larger than the budget is
// the signature of a broken view of the world (an emptied cache, a
// misread table), and a partial clean-up would hide it.
type BudgetError struct {
	Rule      string
	Due       int
	Remaining int
	Max       int
	Interval  time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s: %d actions due but only %d of %d per %s left in the budget: none taken",
		e.Rule, e.Due, e.Remaining, e.Max, e.Interval)
}

// remaining returns how many actions the window still allows at now.
func (b *Budget) remaining(now time.Time) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return b.Max - len(b.spent)
}

// take records one action at now; it reports false when none is left.
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
