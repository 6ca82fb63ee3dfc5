package remedy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestBudgetSlidingWindow(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, store := range []BudgetStore{nil, &memoryStore{}} {
		b := &Budget{Max: 2, Interval: time.Minute, Store: store, Key: "r"}
		take := func(at time.Time) bool {
			ok, err := b.take(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		left := func(at time.Time) int {
			n, err := b.remaining(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if !take(t0) || !take(t0.Add(10*time.Second)) {
			t.Fatal("the first two actions must be allowed")
		}
		if take(t0.Add(20*time.Second)) || left(t0.Add(20*time.Second)) != 0 {
			t.Fatal("a third action inside the window was allowed")
		}
		if left(t0.Add(time.Minute)) != 1 || !take(t0.Add(time.Minute)) {
			t.Fatal("the first action's slot must free after the interval")
		}
	}
	if ok, _ := (&Budget{}).take(ctx, t0); ok {
		t.Fatal("the zero budget allowed an action")
	}
}

// memoryStore is a BudgetStore in memory, as two replicas share one on the
// API server: a write at a version another write overtook is refused.
type memoryStore struct {
	mu      sync.Mutex
	spent   map[string][]time.Time
	version int
	// fail, when set, fails every read and write; overtake makes the
	// next n writes find the record changed, as another replica's would.
	fail     error
	overtake int
	writes   int
}

func (m *memoryStore) Spent(_ context.Context, key string) ([]time.Time, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, "", m.fail
	}
	return slices.Clone(m.spent[key]), strconv.Itoa(m.version), nil
}

func (m *memoryStore) Spend(_ context.Context, key string, spent []time.Time, version string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.overtake > 0 {
		m.overtake--
		m.version++
	}
	if version != strconv.Itoa(m.version) {
		return fmt.Errorf("lease ghostwatch/budget: %w", ErrBudgetChanged)
	}
	if m.spent == nil {
		m.spent = map[string][]time.Time{}
	}
	m.spent[key] = slices.Clone(spent)
	m.version++
	m.writes++
	return nil
}

// Two replicas sharing one store never spend more than the budget
// between them, however their takes interleave; a replica that restarts
// (a new Budget) finds what was spent.
func TestBudgetSharedByReplicas(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := &memoryStore{}
	a := &Budget{Max: 5, Interval: 10 * time.Minute, Store: store, Key: "gossip-force-leave"}
	b := &Budget{Max: 5, Interval: 10 * time.Minute, Store: store, Key: "gossip-force-leave"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rb := a
			if i%2 == 1 {
				rb = b
			}
			if ok, err := rb.take(ctx, t0.Add(time.Duration(i)*time.Second)); err == nil && ok {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 5 {
		t.Fatalf("%d actions allowed between two replicas, want the budget's 5", allowed)
	}
	restarted := &Budget{Max: 5, Interval: 10 * time.Minute, Store: store, Key: "gossip-force-leave"}
	if n, err := restarted.remaining(ctx, t0.Add(time.Minute)); err != nil || n != 0 {
		t.Errorf("a restarted replica finds %d left (%v), want 0", n, err)
	}
	if n, err := restarted.remaining(ctx, t0.Add(11*time.Minute)); err != nil || n != 5 {
		t.Errorf("after the interval: %d left (%v), want 5", n, err)
	}
}

// A budget whose store cannot be read or written allows nothing, and
// says why; one whose record keeps changing under it gives up.
func TestBudgetStoreFailuresAllowNothing(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := &memoryStore{fail: errors.New("leases.coordination.k8s.io \"ghostwatch-controller-budget\" is forbidden")}
	b := &Budget{Max: 5, Interval: time.Minute, Store: store, Key: "k"}
	if n, err := b.remaining(ctx, t0); err == nil || n != 0 {
		t.Errorf("remaining = %d, %v; want 0 and the store's error", n, err)
	}
	if ok, err := b.take(ctx, t0); ok || err == nil || !errors.Is(err, store.fail) {
		t.Errorf("take = %v, %v; want false and the store's error", ok, err)
	}
	store = &memoryStore{overtake: 2}
	b = &Budget{Max: 5, Interval: time.Minute, Store: store, Key: "k"}
	if ok, err := b.take(ctx, t0); !ok || err != nil || store.writes != 1 {
		t.Errorf("take overtaken twice = %v, %v (%d writes); want it recorded on the third try", ok, err, store.writes)
	}
	store.overtake = budgetRetries
	if ok, err := b.take(ctx, t0); ok || !errors.Is(err, ErrBudgetChanged) {
		t.Errorf("take overtaken every time = %v, %v; want false and ErrBudgetChanged", ok, err)
	}
}
