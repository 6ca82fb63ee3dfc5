package remedy

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Store, when set, keeps the spending outside the process, under Key:
	// every replica of the program reads and writes the same record, so a
	// failover or a restart does not hand out a fresh budget. It is read
	// before every decision and written, with the version read, on every
	// group acted on; a budget that cannot be read or written allows
	// nothing. Nil keeps the spending in this process only.
	Store BudgetStore
	// Key names the budget in Store: the remedy's ID.
	Key string

	mu    sync.Mutex
	spent []time.Time
}

// BudgetStore keeps budgets' spending where every replica of a program
// reads it.
type BudgetStore interface {
	// Spent returns the times groups were acted on under key, on this
	// process's clock, and the version of the record they were read from.
	Spent(ctx context.Context, key string) (spent []time.Time, version string, err error)
	// Spend makes spent the times of key, provided the record is still at
	// version; otherwise it returns an error wrapping ErrBudgetChanged.
	Spend(ctx context.Context, key string, spent []time.Time, version string) error
}

// ErrBudgetChanged is wrapped by BudgetStore.Spend when another replica
// wrote the record since it was read: read it again.
var ErrBudgetChanged = errors.New("the budget's record changed since it was read")

// budgetRetries bounds the reads and writes of one spending that another
// replica's writes keep overtaking.
const budgetRetries = 5

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
func (b *Budget) remaining(ctx context.Context, now time.Time) (int, error) {
	if b == nil {
		return 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Store != nil {
		spent, _, err := b.Store.Spent(ctx, b.Key)
		if err != nil {
			return 0, fmt.Errorf("reading the budget: %w", err)
		}
		b.spent = spent
	}
	b.expire(now)
	return max(b.Max-len(b.spent), 0), nil
}

// take records one group at now; it reports false when none is left.
func (b *Budget) take(ctx context.Context, now time.Time) (bool, error) {
	if b == nil {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Store == nil {
		b.expire(now)
		if len(b.spent) >= b.Max {
			return false, nil
		}
		b.spent = append(b.spent, now)
		return true, nil
	}
	for range budgetRetries {
		spent, version, err := b.Store.Spent(ctx, b.Key)
		if err != nil {
			return false, fmt.Errorf("reading the budget: %w", err)
		}
		b.spent = spent
		b.expire(now)
		if len(b.spent) >= b.Max {
			return false, nil
		}
		next := append(slices.Clone(b.spent), now)
		err = b.Store.Spend(ctx, b.Key, next, version)
		if errors.Is(err, ErrBudgetChanged) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("recording the budget spent: %w", err)
		}
		b.spent = next
		return true, nil
	}
	return false, fmt.Errorf("recording the budget spent: %w %d times in a row", ErrBudgetChanged, budgetRetries)
}

// expire forgets what was spent before the window that ends at now. A
// time after now (another replica's clock ahead of this one's, beyond
// what its store allowed for) stays until the window has passed it.
func (b *Budget) expire(now time.Time) {
	slices.SortFunc(b.spent, func(x, y time.Time) int { return x.Compare(y) })
	i := 0
	for i < len(b.spent) && now.Sub(b.spent[i]) >= b.Interval {
		i++
	}
	b.spent = b.spent[i:]
}
