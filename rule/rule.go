package rule

import (
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Rule judges one kind of ghost.
type Rule interface {
	// Info describes the rule: its stable ID and runbook text.
	Info() Info
	// Evaluate returns the rule's findings. It is only called when every
	// source in Info().Sources is ready in the snapshot, and it must not do
	// I/O.
	Evaluate(s *snapshot.Snapshot) []finding.Finding
}

// Info describes a rule for reports and docs.
type Info struct {
	// ID is stable: it names metrics, remedies and runbook pages.
	ID string
	// Sources the rule reads; all must be ready for it to run.
	Sources []string
	// Summary is a one-line "why this matters".
	Summary string
	// Fix is the one-line first fix from the runbook.
	Fix string
	// Runbook is the path of the rule's runbook in the repository docs.
	Runbook string
}
