package rule

import (
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Skipped names a rule that did not run and why.
type Skipped struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Run evaluates every rule whose sources are ready in s. A rule whose
// evidence is incomplete is skipped, never run on partial data: an
// unreachable API server must not look like "every backend is gone".
func Run(s *snapshot.Snapshot, rules []Rule) ([]finding.Finding, []Skipped) {
	var out []finding.Finding
	var skipped []Skipped
	for _, r := range rules {
		info := r.Info()
		if err := s.Ready(info.Sources...); err != nil {
			skipped = append(skipped, Skipped{Rule: info.ID, Reason: err.Error()})
			continue
		}
		out = append(out, r.Evaluate(s)...)
	}
	return out, skipped
}
