package remedy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Result is what became of one finding.
type Result string

// Results, as they appear in metrics and Events.
const (
	// Done: the action was taken (the flow deleted, the IP reserved).
	Done Result = "done"
	// DryRun: the action would have been taken.
	DryRun Result = "dry-run"
	// Pending: the evidence has not held for the grace period yet.
	Pending Result = "pending"
	// Refused: a safety check said no (re-check, budget, cap).
	Refused Result = "refused"
	// Gone: the target no longer existed when the remedy came to it.
	Gone Result = "gone"
	// Failed: the ledger refused the action.
	Failed Result = "failed"
)

// Results lists every Result, for metrics that are set up in advance.
var Results = []Result{Done, DryRun, Pending, Refused, Gone, Failed}

// Action reports what was done, or not, about one finding, and why.
type Action struct {
	// Remedy is the remedy's ID; Rule the rule whose finding it is.
	Remedy, Rule string
	Result       Result
	Reason       string
	Finding      finding.Finding
	// Limit is a *BudgetError or *CapError when a limit refused the
	// action, nil otherwise.
	Limit error
	// Due is when a Pending action's grace period ends, if its finding
	// holds until then.
	Due time.Time
	// Acted is how many of the target's entries were acted on (Done), or
	// would have been (DryRun): its flows deleted, 1 for a target of one.
	Acted int
}

// ErrIncompleteEvidence is returned when a source the rule used is not
// ready: nothing is done, and every grace period starts over.
var ErrIncompleteEvidence = errors.New("evidence incomplete")

// ErrGone is wrapped by an Actuator's error when the target no longer
// exists: there is nothing left to act on.
var ErrGone = errors.New("target gone")

// ErrRefused is wrapped by an Actuator's Act error when the check it makes
// on the very data it read right before acting said no (the member is
// listed alive again, the list could not be read again): nothing was
// sent to the ledger, so the action is refused, not failed.
var ErrRefused = errors.New("refused by the check before acting")

// Refusal wraps err as ErrRefused, keeping err's message.
func Refusal(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{r.err, ErrRefused} }

// Actuator performs one kind of action on one kind of finding.Target.
type Actuator interface {
	// Kind is the finding.Target kind it acts on.
	Kind() string
	// Verify re-reads the target from its own ledger right before the
	// action: nil when it is still exactly what the finding named, an error
	// wrapping ErrGone when it no longer exists.
	Verify(ctx context.Context, t finding.Target) error
	// Act performs the action on exactly the target. An error wrapping
	// ErrGone means it no longer existed.
	Act(ctx context.Context, t finding.Target) error
}

// Counting is an Actuator whose targets hold several entries (a
// finding.FlowTarget's flows): it reads each back from its ledger right
// before acting on it, and acts on exactly those still as judged. It
// replaces Verify and Act for such targets.
type Counting interface {
	Actuator
	// ActEach acts on every entry of t that is still as judged, or, with
	// dryRun, only reads each back, and says what came of them.
	ActEach(ctx context.Context, t finding.Target, dryRun bool) Tally
}

// Tally is what came of the entries of one target.
type Tally struct {
	// Done were acted on (or would have been, in a dry run); Gone no
	// longer existed; Changed had changed since they were judged (another
	// entry took the tuple, it translates elsewhere) and were left alone;
	// Failed were refused by the ledger.
	Done, Gone, Changed, Failed int
	// Nudged are the clients of entries done that a Nudger told.
	Nudged int
	// Why is why the first entry that was not acted on was not.
	Why string
}

// Recheck re-judges the findings of one group against evidence read afresh
// from the source of truth (quorum reads of the API server, never the
// caches that produced them). It returns one error per finding: nil when
// the finding still holds.
type Recheck func(ctx context.Context, fs []finding.Finding) []error

// Remedy acts on the findings of one rule under the safety invariants:
// complete evidence only, evidence that has held through every complete
// pass for the grace period, a re-check against the source of truth and
// against the target's own ledger right before acting, a budget of groups
// (ghost IPs) per interval and a cap on targets per group, a batch beyond
// the budget refused whole, and only the exact target a finding names.
type Remedy struct {
	// Rule describes the rule whose findings are acted on; Rule.Remedy
	// must be set.
	Rule rule.Info
	// Grace is how long a target must have been reported, in every
	// consecutive complete pass, before it is acted on.
	Grace time.Duration
	// DryRun reports what would be done and does nothing.
	DryRun bool
	// Budget caps how many groups are acted on per interval; nil allows
	// none (dry-run still reports).
	Budget *Budget
	// MaxPerGroup caps the targets of one group acted on together: a
	// sanity bound, not a rate. Zero means no cap.
	MaxPerGroup int
	// Actuator does the work.
	Actuator Actuator
	// Recheck re-judges each group right before acting; nil refuses all.
	Recheck Recheck
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	firstSeen map[any]time.Time
	// settled is when the last pass, or the last Reset, ended: a target
	// that pass did not report cannot have held since before it.
	settled time.Time
}

// ID is the remedy's ID.
func (r *Remedy) ID() string { return r.Rule.Remedy.ID }

// Reset forgets every grace period. Call it after a pass that was degraded
// or incomplete: evidence must hold through complete passes only.
func (r *Remedy) Reset() { r.firstSeen, r.settled = nil, r.now() }

func (r *Remedy) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Apply acts on the rule's findings of one complete pass over s. Findings
// of other rules, and findings without a target of the actuator's kind, are
// ignored. It returns one Action per finding it considered; the error is
// ErrIncompleteEvidence or a *BudgetError when nothing could be done at
// all.
func (r *Remedy) Apply(ctx context.Context, s *snapshot.Snapshot, fs []finding.Finding) ([]Action, error) {
	return r.ApplySince(ctx, s, fs, nil)
}

// Since says when the evidence of a finding a pass reports for the first
// time came to be known: when the change that brought it reached the
// process (its handler's time, on the remedy's clock), or zero when that
// is not known.
type Since func(finding.Finding) time.Time

// ApplySince is Apply, with the grace period of each target reported for
// the first time starting when since says its evidence came to be known,
// rather than at this pass: a change's evidence holds from the moment it
// arrived, not from the moment a pass got round to judging it. It never
// starts before the last pass (or Reset) ended, which did not report the
// target, nor after this one began; nil since is Apply.
func (r *Remedy) ApplySince(ctx context.Context, s *snapshot.Snapshot, fs []finding.Finding, since Since) ([]Action, error) {
	t := r.now()
	defer func() { r.settled = r.now() }()
	need := r.Rule.Sources
	if r.Rule.Remedy != nil && r.Rule.Remedy.Ledger != "" {
		need = append(append([]string(nil), need...), r.Rule.Remedy.Ledger)
	}
	if err := s.Ready(need...); err != nil {
		r.Reset()
		return nil, fmt.Errorf("%w: %v", ErrIncompleteEvidence, err)
	}
	seen := map[any]time.Time{}
	var actions []Action
	var due []int
	for _, f := range fs {
		if f.Rule != r.Rule.ID || f.Target == nil || f.Target.Kind() != r.Actuator.Kind() {
			continue
		}
		k := f.Target.Key()
		first, ok := r.firstSeen[k]
		if !ok {
			first = t
			if since != nil {
				if at := since(f); !at.IsZero() && at.Before(t) {
					first = maxTime(at, r.settled)
				}
			}
		}
		seen[k] = first
		a := Action{Remedy: r.ID(), Rule: f.Rule, Finding: f}
		if held := t.Sub(first); held < r.Grace {
			a.Result, a.Reason = Pending, fmt.Sprintf("reported for %s of the %s grace period", held.Round(time.Millisecond), r.Grace)
			a.Due = first.Add(r.Grace)
		} else {
			due = append(due, len(actions))
		}
		actions = append(actions, a)
	}
	// Targets no longer reported start their grace period over.
	r.firstSeen = seen
	if len(due) == 0 {
		return actions, nil
	}

	groups, order := map[string][]int{}, []string(nil)
	for _, i := range due {
		g := actions[i].Finding.Target.Group()
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	var admitted []string
	for _, g := range order {
		size := 0
		for _, i := range groups[g] {
			size += actions[i].Finding.Target.Size()
		}
		if r.MaxPerGroup > 0 && size > r.MaxPerGroup {
			err := &CapError{Remedy: r.ID(), Group: g, Due: size, Max: r.MaxPerGroup}
			for _, i := range groups[g] {
				actions[i].Result, actions[i].Reason, actions[i].Limit = Refused, err.Error(), err
			}
			continue
		}
		admitted = append(admitted, g)
	}
	if !r.DryRun && len(admitted) > 0 {
		left, err := r.Budget.remaining(ctx, t)
		if err != nil {
			for _, g := range admitted {
				for _, i := range groups[g] {
					actions[i].Result, actions[i].Reason = Refused, err.Error()+": nothing acted on"
				}
			}
			return actions, fmt.Errorf("%s: %w: nothing acted on", r.ID(), err)
		}
		if len(admitted) > left {
			err := &BudgetError{Remedy: r.ID(), Due: len(admitted), Remaining: left}
			if r.Budget != nil {
				err.Max, err.Interval = r.Budget.Max, r.Budget.Interval
			}
			for _, g := range admitted {
				for _, i := range groups[g] {
					actions[i].Result, actions[i].Reason, actions[i].Limit = Refused, err.Error(), err
				}
			}
			return actions, err
		}
	}
	for _, g := range admitted {
		r.actOnGroup(ctx, t, actions, groups[g])
	}
	return actions, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// actOnGroup re-checks one group and acts on what survives the re-check.
func (r *Remedy) actOnGroup(ctx context.Context, t time.Time, actions []Action, idx []int) {
	refuse := func(i int, why string) {
		actions[i].Result, actions[i].Reason = Refused, why
		delete(r.firstSeen, actions[i].Finding.Target.Key())
	}
	if r.Recheck == nil {
		for _, i := range idx {
			refuse(i, "no re-check configured")
		}
		return
	}
	fs := make([]finding.Finding, len(idx))
	for n, i := range idx {
		fs[n] = actions[i].Finding
	}
	errs := r.Recheck(ctx, fs)
	var act []int
	for n, i := range idx {
		var err error
		if n < len(errs) {
			err = errs[n]
		} else {
			err = errors.New("the re-check gave no answer")
		}
		if err != nil {
			refuse(i, "re-check: "+err.Error())
			continue
		}
		tg := actions[i].Finding.Target
		if _, each := r.Actuator.(Counting); each {
			// Each entry is read back right before it is acted on.
			act = append(act, i)
			continue
		}
		switch err := r.Actuator.Verify(ctx, tg); {
		case errors.Is(err, ErrGone):
			actions[i].Result, actions[i].Reason = Gone, err.Error()
			delete(r.firstSeen, tg.Key())
		case err != nil:
			refuse(i, "re-check: "+err.Error())
		default:
			act = append(act, i)
		}
	}
	if len(act) == 0 {
		return
	}
	if r.DryRun {
		for _, i := range act {
			tg := actions[i].Finding.Target
			if c, each := r.Actuator.(Counting); each {
				r.tallied(&actions[i], c.ActEach(ctx, tg, true))
				continue
			}
			actions[i].Result, actions[i].Reason, actions[i].Acted = DryRun, "would "+r.Rule.Remedy.Verb+" "+tg.String(), 1
		}
		return
	}
	switch ok, err := r.Budget.take(ctx, t); {
	case err != nil:
		for _, i := range act {
			refuse(i, err.Error()+": nothing acted on")
		}
		return
	case !ok:
		for _, i := range act {
			refuse(i, "budget exhausted")
		}
		return
	}
	for _, i := range act {
		tg := actions[i].Finding.Target
		if c, each := r.Actuator.(Counting); each {
			r.tallied(&actions[i], c.ActEach(ctx, tg, false))
			if actions[i].Result != Failed {
				delete(r.firstSeen, tg.Key())
			}
			continue
		}
		switch err := r.Actuator.Act(ctx, tg); {
		case err == nil:
			actions[i].Result, actions[i].Reason, actions[i].Acted = Done, r.Rule.Remedy.Past+" "+tg.String(), 1
			delete(r.firstSeen, tg.Key())
		case errors.Is(err, ErrGone):
			actions[i].Result, actions[i].Reason = Gone, err.Error()
			delete(r.firstSeen, tg.Key())
		case errors.Is(err, ErrRefused):
			refuse(i, "re-check: "+err.Error())
		default:
			actions[i].Result, actions[i].Reason = Failed, err.Error()
		}
	}
}

// tallied sets a's result from what came of its target's entries: done
// when any was acted on (the reason says what came of the others), else
// failed when the ledger refused one, refused when they had changed, gone
// when none was left.
func (r *Remedy) tallied(a *Action, tl Tally) {
	verb := r.Rule.Remedy.Past
	a.Result = Done
	if r.DryRun {
		a.Result, verb = DryRun, "would "+r.Rule.Remedy.Verb
	}
	a.Acted = tl.Done
	switch {
	case tl.Done > 0:
		a.Reason = verb + " " + a.Finding.Target.String()
		if n := a.Finding.Target.Size(); tl.Done < n {
			a.Reason = fmt.Sprintf("%s %d of %s", verb, tl.Done, a.Finding.Target.String())
		}
		var rest []string
		if tl.Gone > 0 {
			rest = append(rest, fmt.Sprintf("%d gone since judged", tl.Gone))
		}
		if tl.Changed > 0 {
			rest = append(rest, fmt.Sprintf("%d changed since judged, left alone", tl.Changed))
		}
		if tl.Failed > 0 {
			rest = append(rest, fmt.Sprintf("%d refused by the ledger", tl.Failed))
		}
		if len(rest) > 0 {
			a.Reason += " (" + strings.Join(rest, ", ") + "; first: " + tl.Why + ")"
		}
		if tl.Nudged > 0 {
			a.Reason += fmt.Sprintf("; %d of their clients reset", tl.Nudged)
		}
	case tl.Failed > 0:
		a.Result, a.Reason = Failed, tl.Why
	case tl.Changed > 0:
		a.Result, a.Reason = Refused, "re-check: "+tl.Why
	default:
		a.Result, a.Reason = Gone, tl.Why
	}
}

// Defaults of the settings, as the agent's flags have them.
const (
	// DefaultGrace and MinGrace: how long evidence must hold through
	// complete passes before a remedy acts, and the least the agent
	// accepts. MinGrace is the agent's new-flow interval, so that a
	// finding holds in at least two passes that saw the API's events and
	// the table's new flows of a whole second between them. No healthy
	// flow was deleted at any grace down to 0 on the real control plane
	// (scripts/measure-grace.sh) nor at 1s in 1,000 replacements a
	// kube-proxy mode on a real node (scripts/measure-window.sh). The
	// margin a longer grace once kept against watches lagging under load
	// is the quorum re-check's, which reads the API server itself right
	// before acting; and each second of grace is a second of errors for a
	// client pinned to a dead pod (docs/agent.md, "How the grace period
	// was chosen").
	DefaultGrace = time.Second
	MinGrace     = time.Second
	// DefaultBudget ghost IPs per DefaultBudgetInterval: a rolling deploy
	// kills a few backends a minute; a broken view of the world kills them
	// all at once.
	DefaultBudget         = 20
	DefaultBudgetInterval = time.Minute
	// DefaultMaxPerGroup is far more connections than one node holds to
	// one backend in practice (the busiest backend of the benchmarks has
	// 266): beyond it, a misread is likelier than a ghost.
	DefaultMaxPerGroup = 10000
)

// Settings are what every remedy of one process shares.
type Settings struct {
	Grace  time.Duration
	DryRun bool
	// Budget and BudgetInterval: at most Budget groups (ghost IPs) per
	// BudgetInterval, for each remedy.
	Budget         int
	BudgetInterval time.Duration
	// MaxPerGroup caps the targets of one group; 0 means no cap.
	MaxPerGroup int
	// BudgetStore, when set, keeps each remedy's budget where every
	// replica reads it (under the remedy's ID); nil keeps it in the
	// process.
	BudgetStore BudgetStore
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Build returns the remedies named by ids, each for the rule of rules whose
// remedy it is, acting through the actuator of its target kind. An unknown
// ID, or a remedy whose target no actuator handles, is an error that says
// which remedies there are.
func Build(rules []rule.Rule, ids []string, st Settings, actuators ...Actuator) ([]*Remedy, error) {
	var out []*Remedy
	for _, id := range ids {
		r, ok := rule.ByRemedy(rules, id)
		if !ok {
			return nil, fmt.Errorf("unknown remedy %q (the remedies are: %s)", id, joinOr(rule.RemedyIDs(rules)))
		}
		info := r.Info()
		var act Actuator
		for _, a := range actuators {
			if a.Kind() == info.Remedy.Target {
				act = a
			}
		}
		if act == nil {
			return nil, fmt.Errorf("remedy %q acts on %s, which nothing here can act on", id, info.Remedy.Target)
		}
		out = append(out, &Remedy{
			Rule: info, Grace: st.Grace, DryRun: st.DryRun,
			Budget:      &Budget{Max: st.Budget, Interval: st.BudgetInterval, Store: st.BudgetStore, Key: id},
			MaxPerGroup: st.MaxPerGroup, Actuator: act, Now: st.Now,
		})
	}
	return out, nil
}

func joinOr(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	s := ids[0]
	for _, id := range ids[1:] {
		s += ", " + id
	}
	return s
}
