package rule

import (
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
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: err.Error(), NotApplicable: unsupported(s, info.Sources)})
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
		for _, name := range r.Info().Sources {
			if name == source {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// unsupported reports whether every source of names that is not ready was
// found unsupported: the ledger does not exist here.
func unsupported(s *snapshot.Snapshot, names []string) bool {
	for _, n := range names {
		st, ok := s.Source(n)
		if !ok || (st.Status != snapshot.StatusOK && st.Status != snapshot.StatusUnsupported) {
			return false
		}
	}
	return true
}
