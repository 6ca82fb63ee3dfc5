package remedy

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Result is what became of one finding.
type Result string

// Results, as they appear in metrics and Events.
const (
	// Deleted: the flow was removed from the kernel.
	Deleted Result = "deleted"
	// DryRun: the flow would have been removed.
	DryRun Result = "dry-run"
	// Pending: the evidence has not held for the grace period yet.
	Pending Result = "pending"
	// Refused: a safety check said no (re-check failed, budget exceeded).
	Refused Result = "refused"
	// Gone: the kernel no longer had the flow (it ended, or its ID changed).
	Gone Result = "gone"
	// Failed: the kernel refused the delete.
	Failed Result = "failed"
)

// Action reports what was done, or not, about one finding, and why.
type Action struct {
	Rule    string
	Result  Result
	Reason  string
	Finding finding.Finding
}

// ErrIncompleteEvidence is returned when a source the rule used is not
// ready: nothing is done, and every grace period starts over.
var ErrIncompleteEvidence = errors.New("evidence incomplete")

// FlowDeleter removes one exact conntrack entry (conntrack.Conn does).
type FlowDeleter interface {
	Delete(f *snapshot.Flow) error
}

// StaleFlows removes the conntrack entries stale-nat-flow findings name.
type StaleFlows struct {
	// Grace is how long a flow must have been reported, in every
	// consecutive Apply, before it is acted on.
	Grace time.Duration
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// Budget caps deletions; nil allows none (dry-run still reports).
	Budget *Budget
	// Deleter removes flows from the kernel.
	Deleter FlowDeleter
	// Recheck re-judges a flow against the freshest evidence right before
	// it is deleted; nil means the flow no longer qualifies. See
	// rule.Judge.StillStale.
	Recheck func(f *snapshot.Flow) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	firstSeen map[flowKey]time.Time
}

// flowKey identifies one kernel entry: its original tuple, zone and ID.
type flowKey struct {
	proto snapshot.Proto
	orig  snapshot.Tuple
	zone  uint16
	id    uint32
}

func keyOf(f *snapshot.Flow) flowKey { return flowKey{f.Proto, f.Orig, f.Zone, f.ID} }

// Apply acts on the stale-nat-flow findings of one audit of s. Findings of
// other rules are ignored. It returns one Action per stale-nat-flow
// finding; the error is ErrIncompleteEvidence or a *BudgetError when
// nothing could be done at all.
func (r *StaleFlows) Apply(s *snapshot.Snapshot, fs []finding.Finding) ([]Action, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now()
	if err := s.Ready(rule.StaleNATFlow{}.Info().Sources...); err != nil {
		r.firstSeen = nil
		return nil, fmt.Errorf("%w: %v", ErrIncompleteEvidence, err)
	}
	seen := map[flowKey]time.Time{}
	var actions []Action
	var due []int
	for _, f := range fs {
		if f.Rule != rule.StaleNATFlowID || f.Flow == nil {
			continue
		}
		k := keyOf(f.Flow)
		first, ok := r.firstSeen[k]
		if !ok {
			first = t
		}
		seen[k] = first
		a := Action{Rule: f.Rule, Finding: f}
		if held := t.Sub(first); held < r.Grace {
			a.Result, a.Reason = Pending, fmt.Sprintf("reported for %s of the %s grace period", held.Round(time.Millisecond), r.Grace)
		} else {
			due = append(due, len(actions))
		}
		actions = append(actions, a)
	}
	// Flows no longer reported start their grace period over.
	r.firstSeen = seen

	if !r.DryRun && len(due) > 0 {
		left := 0
		if r.Budget != nil {
			left = r.Budget.remaining(t)
		}
		if len(due) > left {
			err := &BudgetError{Rule: rule.StaleNATFlowID, Due: len(due), Remaining: left}
			if r.Budget != nil {
				err.Max, err.Interval = r.Budget.Max, r.Budget.Interval
			}
			for _, i := range due {
				actions[i].Result, actions[i].Reason = Refused, err.Error()
			}
			return actions, err
		}
	}
	for _, i := range due {
		a := &actions[i]
		fl := a.Finding.Flow
		if r.Recheck == nil {
			a.Result, a.Reason = Refused, "no re-check configured"
			continue
		}
		if err := r.Recheck(fl); err != nil {
			a.Result, a.Reason = Refused, "re-check: "+err.Error()
			delete(r.firstSeen, keyOf(fl))
			continue
		}
		if r.DryRun {
			a.Result, a.Reason = DryRun, "would delete "+describe(fl)
			continue
		}
		if !r.Budget.take(t) {
			a.Result, a.Reason = Refused, "budget exhausted"
			continue
		}
		switch err := r.Deleter.Delete(fl); {
		case err == nil:
			a.Result, a.Reason = Deleted, "deleted "+describe(fl)
			delete(r.firstSeen, keyOf(fl))
		case errors.Is(err, syscall.ENOENT):
			a.Result, a.Reason = Gone, "the kernel no longer has "+describe(fl)
			delete(r.firstSeen, keyOf(fl))
		default:
			a.Result, a.Reason = Failed, err.Error()
		}
	}
	return actions, nil
}

func describe(f *snapshot.Flow) string {
	s := f.String() + " (DNAT to " + f.Backend().String()
	if f.ID != 0 {
		s += fmt.Sprintf(", conntrack id %d", f.ID)
	}
	return s + ")"
}
