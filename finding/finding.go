package finding

import (
	"fmt"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Severity orders findings; higher is worse.
type Severity int

// Severities, from least to most severe.
const (
	Info Severity = iota + 1
	Warning
	Critical
)

// String returns "info", "warning" or "critical".
func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// ParseSeverity accepts the names String returns.
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToLower(s) {
	case "info":
		return Info, nil
	case "warning":
		return Warning, nil
	case "critical":
		return Critical, nil
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warning or critical)", s)
}

// MarshalText encodes the severity by name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a severity name.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Subject names what a finding is about. IP is the ghost IP: the address
// whose binding outlived its owner.
type Subject struct {
	IP        string `json:"ip,omitempty"`
	Service   string `json:"service,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node,omitempty"`
	Flow      string `json:"flow,omitempty"`
}

// Finding is one ghost a rule found.
type Finding struct {
	Rule     string         `json:"rule"`
	Severity Severity       `json:"severity"`
	Message  string         `json:"message"`
	Subject  Subject        `json:"subject"`
	Evidence map[string]any `json:"evidence,omitempty"`

	// Flow is the exact conntrack entry a conntrack finding is about, for
	// remedies that must delete that entry and nothing else.
	Flow *snapshot.Flow `json:"-"`
}

// AtLeast reports whether any finding has a severity of min or worse.
func AtLeast(fs []Finding, min Severity) bool {
	for _, f := range fs {
		if f.Severity >= min {
			return true
		}
	}
	return false
}

// Report is the outcome of one audit: what was found and how each source
// fared. It is what `scan -o json` prints.
type Report struct {
	Findings []Finding               `json:"findings"`
	Sources  []snapshot.SourceStatus `json:"sources"`
}
