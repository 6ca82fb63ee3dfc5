package rule

import (
	"fmt"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Run evaluates every rule whose sources are ready in s. A rule whose
// evidence is incomplete or unsupported is skipped, with the reason, never
// run on partial data: an unreachable API server must not look like "every
// backend is gone".
func Run(s *snapshot.Snapshot, rules []Rule) ([]finding.Finding, []finding.Skipped) {
	var each [][]finding.Finding
	var skipped []finding.Skipped
	n := 0
	for _, r := range rules {
		info := r.Info()
		if err := s.Ready(info.Sources...); err != nil {
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: err.Error(), NotApplicable: unsupported(s, info.Sources, false)})
			continue
		}
		if err := anyLedger(s, info.Ledgers); err != nil {
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: err.Error(), NotApplicable: unsupported(s, ledgerSources(info.Ledgers), true)})
			continue
		}
		fs := r.Evaluate(s)
		each = append(each, fs)
		n += len(fs)
	}
	if len(each) == 1 {
		return each[0], skipped
	}
	var out []finding.Finding
	if n > 0 {
		out = make([]finding.Finding, 0, n)
	}
	for _, fs := range each {
		out = append(out, fs...)
	}
	return out, skipped
}

// ReadersOf returns, as a source's Narrow expects them, the rules that read
// the named source.
func ReadersOf(rules []Rule, source string) []any {
	var out []any
	for _, r := range rules {
		for _, name := range r.Info().Reads() {
			if name == source {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// unsupported reports whether every source of names that is not ready was
// found unsupported: the ledger does not exist here. With absentToo, a
// source not collected at all counts as unsupported too: a ledger this
// process does not read (the agent reads no Calico datastore, the
// controller no node's files).
func unsupported(s *snapshot.Snapshot, names []string, absentToo bool) bool {
	for _, n := range names {
		st, ok := s.Source(n)
		if !ok && absentToo {
			continue
		}
		if !ok || (st.Status != snapshot.StatusOK && st.Status != snapshot.StatusUnsupported) {
			return false
		}
	}
	return true
}

// anyLedger returns nil when ledgers is empty or one of them is ready, and
// otherwise why none is.
func anyLedger(s *snapshot.Snapshot, ledgers []Ledger) error {
	if len(ledgers) == 0 {
		return nil
	}
	names := ledgerSources(ledgers)
	for _, n := range names {
		if s.Ready(n) == nil {
			return nil
		}
	}
	return fmt.Errorf("no IPAM ledger ready: %w", s.Ready(names...))
}

func ledgerSources(ledgers []Ledger) []string {
	var out []string
	for _, l := range ledgers {
		out = append(out, l.Source)
	}
	return out
}

// ready reports whether the source name is ready in s: a rule with
// Ledgers judges each ledger for which it is.
func ready(s *snapshot.Snapshot, name string) bool { return s.Ready(name) == nil }
