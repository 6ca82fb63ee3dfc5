package apicost

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPollSaysWhyItStopped(t *testing.T) {
	never := func() (bool, string, error) { return false, "3 of 4", nil }
	err := poll(context.Background(), 30*time.Millisecond, time.Millisecond, "the thing", never)
	if err == nil || !strings.Contains(err.Error(), "not done after 30ms (3 of 4)") {
		t.Errorf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := poll(ctx, time.Minute, time.Millisecond, "the thing", never); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "after") {
		t.Errorf("canceled: %v", err)
	}
	if err := poll(context.Background(), time.Minute, time.Millisecond, "the thing", func() (bool, string, error) { return true, "", nil }); err != nil {
		t.Errorf("done at once: %v", err)
	}
}
