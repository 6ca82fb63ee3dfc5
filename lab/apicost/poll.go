package apicost

import (
	"context"
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
				note = ": " + note
			}
			return fmt.Errorf("no %s after %s%s (%w)", what, timeout, note, ctx.Err())
		case <-tick.C:
		}
	}
}
