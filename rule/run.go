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
	var out []finding.Finding
	var skipped []finding.Skipped
	for _, r := range rules {
		info := r.Info()
		if err := s.Ready(info.Sources...); err != nil {
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: err.Error()})
			continue
		}
		out = append(out, r.Evaluate(s)...)
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
