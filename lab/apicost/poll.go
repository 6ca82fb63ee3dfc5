package apicost

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// poll calls cond every interval until it reports done, fails, ctx ends
// or timeout passes. cond's note (what it still waits for) goes into the
// timeout's error.
func poll(ctx context.Context, timeout, interval time.Duration, what string, cond func() (done bool, note string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		done, note, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if note != "" {
				note = " (" + note + ")"
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("waiting for %s: not done after %s%s", what, timeout, note)
			}
			return fmt.Errorf("waiting for %s%s: %w", what, note, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
