package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Recheck returns the last re-check of a remedy of rule r, as
// remedy.Recheck runs it right before acting: every live source the rule
// reads must still be ready, and the rule's findings must still hold on
// what the sources that read afresh (source.Fresher: quorum reads of the
// API server, a gossip cluster's member list read again) read of what the
// rule names (rule.Rechecker), the rest of the snapshot being the last
// pass's (the host's addresses name frontends, not holders: an address
// removed since leaves a flow as stale as it was). last returns the
// snapshot of the last complete pass, the one the findings came from.
func Recheck(r rule.Rule, sources []source.Source, last func() *snapshot.Snapshot, now func() time.Time) func(context.Context, []finding.Finding) []error {
	rc, _ := r.(rule.Rechecker)
	reads := r.Info().Reads()
	return func(ctx context.Context, fs []finding.Finding) []error {
		fail := func(err error) []error {
			errs := make([]error, len(fs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		s := last()
		switch {
		case rc == nil:
			return fail(errors.New("the rule cannot re-check its findings"))
		case s == nil:
			return fail(errors.New("no complete pass to re-check against"))
		}
		at := now()
		for _, src := range sources {
			if l, ok := src.(source.Live); ok && slices.Contains(reads, src.Name()) {
				if err := l.Ready(at); err != nil {
					return fail(err)
				}
			}
		}
		var q snapshot.Query
		for _, f := range fs {
			q.Add(rc.RecheckQuery(s, f))
		}
		fresh := *s
		fresh.Taken = at
		for _, src := range sources {
			if fr, ok := src.(source.Fresher); ok {
				if err := fr.Fresh(ctx, q, &fresh); err != nil {
					return fail(err)
				}
			}
		}
		errs := rc.Recheck(&fresh, fs)
		in := readAfresh(q)
		for i, err := range errs {
			if err != nil && in != "" {
				errs[i] = fmt.Errorf("in %s: %w", in, err)
			}
		}
		return errs
	}
}

// readAfresh says what a re-check read afresh.
func readAfresh(q snapshot.Query) string {
	switch {
	case q.Kube() && len(q.Gossip) > 0:
		return "a quorum read of the API server and a new read of the member list"
	case q.Kube():
		return "a quorum read of the API server"
	case len(q.Gossip) > 0:
		return "a new read of the member list"
	}
	return ""
}
