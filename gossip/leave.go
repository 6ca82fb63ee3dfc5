package gossip

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultLeaveTimeout is a leave timeout that fits Kubernetes' default
// terminationGracePeriodSeconds (30s) with room for the application's own
// shutdown. The leave broadcast goes out in RetransmitMult *
// ceil(log10(members+1)) gossip rounds: 4 rounds of GossipInterval
// (200ms), under a second, below 10 members.
const DefaultLeaveTimeout = 5 * time.Second

// ErrLeaveTimeout says the leave broadcast had not gone out when the
// timeout passed: the members that missed it declare this member dead
// after probing it, instead of left. The last members of a cluster that
// stops all at once get it too: memberlist gossips to no member that left
// (state.go gossip), so once its peers have left before it, a member has
// nobody to tell, and waits the timeout out.
var ErrLeaveTimeout = errors.New("the leave broadcast did not go out in time")

// LeaveOnDone blocks until ctx is done (signal.NotifyContext with
// SIGTERM: the kubelet's stop), then leaves the cluster: ml.Leave
// broadcasts that this member left, waiting at most timeout for the
// broadcast to go out, then ml.Shutdown stops it. Members that hear a
// leave mark the member left, which lets its name return at once and
// tells ghostwatch it is no ghost; without one, they probe it, suspect
// it, and keep it dead (seed 000). timeout must end well before the pod's
// terminationGracePeriodSeconds, after which the kubelet kills the
// process; DefaultLeaveTimeout when 0.
//
// It returns nil once the member left and shut down, an error wrapping
// ErrLeaveTimeout when the broadcast did not go out in time (the member
// is shut down all the same), or the error of Shutdown. Call it once, and
// do not shut ml down elsewhere: memberlist panics on a Leave after
// Shutdown, which LeaveOnDone reports as an error.
func LeaveOnDone(ctx context.Context, ml *memberlist.Memberlist, timeout time.Duration) error {
	<-ctx.Done()
	if timeout <= 0 {
		timeout = DefaultLeaveTimeout
	}
	start := time.Now()
	err := leave(ml, timeout)
	if serr := ml.Shutdown(); serr != nil {
		err = errors.Join(err, fmt.Errorf("shutting memberlist down: %w", serr))
	}
	if err != nil {
		return fmt.Errorf("leaving as %s after %v: %w", ml.LocalNode().Name, time.Since(start).Round(time.Millisecond), err)
	}
	return nil
}

// leave calls ml.Leave, turning its timeout error (a plain string in
// memberlist) into ErrLeaveTimeout, and its panic on a shut-down member
// into an error.
func leave(ml *memberlist.Memberlist, timeout time.Duration) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if s, ok := r.(string); ok && s == "leave after shutdown" {
				err = errors.New("memberlist was shut down before it could leave")
				return
			}
			panic(r)
		}
	}()
	if err := ml.Leave(timeout); err != nil {
		if err.Error() == "timeout waiting for leave broadcast" {
			return fmt.Errorf("%w (%v)", ErrLeaveTimeout, timeout)
		}
		return err
	}
	return nil
}
