package sink

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/addrpath"
	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// FindingsPath is where FindingsHandler answers: FindingsPath + an address.
const FindingsPath = "/v1/findings/"

// FindingsAt is what a running ghostwatch (an agent, a controller replica)
// says of one address: the findings standing that name it and, for the
// controller, the gossip members at it.
type FindingsAt struct {
	// From names who answered (the node, the replica).
	From string `json:"from"`
	// Judging is false for a controller replica that stands by: it
	// judges nothing, and its empty lists say nothing.
	Judging  bool        `json:"judging"`
	Findings []FindingAt `json:"findings"`
	Members  []MemberAt  `json:"members,omitempty"`
}

// FindingAt is one finding as an answer lists it.
type FindingAt struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Runbook  string `json:"runbook,omitempty"`
}

// MemberAt is a gossip member at the address, as its cluster's last view
// read says.
type MemberAt struct {
	System  string    `json:"system"`
	Cluster string    `json:"cluster,omitempty"`
	Name    string    `json:"name"`
	Port    uint16    `json:"port,omitempty"`
	Status  string    `json:"status"`
	Since   time.Time `json:"since,omitzero"`
}

// NewFindingsAt lists the findings of fs that name ip (their subject's
// address), each with its rule's runbook at this binary's version.
func NewFindingsAt(from string, judging bool, rules []rule.Rule, fs []finding.Finding, ip netip.Addr) FindingsAt {
	out := FindingsAt{From: from, Judging: judging, Findings: []FindingAt{}}
	for _, f := range fs {
		if a, err := netip.ParseAddr(f.Subject.IP); err != nil || a.Unmap() != ip {
			continue
		}
		fa := FindingAt{Rule: f.Rule, Severity: f.Severity.String(), Message: f.Message}
		if r, ok := rule.Find(rules, f.Rule); ok && r.Info().Runbook != "" {
			fa.Runbook = buildinfo.DocURL(r.Info().Runbook)
		}
		out.Findings = append(out.Findings, fa)
	}
	return out
}

// MembersAt lists the members of g's views at ip, as their views say.
func MembersAt(g *snapshot.Gossip, ip netip.Addr) []MemberAt {
	if g == nil {
		return nil
	}
	var out []MemberAt
	for _, v := range g.Views {
		for _, m := range v.Members {
			if m.Addr.Unmap() == ip {
				out = append(out, MemberAt{System: v.System, Cluster: v.Cluster, Name: m.Name, Port: m.Port, Status: m.Status, Since: m.Since})
			}
		}
	}
	return out
}

// FindingsHandler answers GET FindingsPath+ADDRESS with what at says of
// the address, as JSON.
func FindingsHandler(at func(ip netip.Addr) FindingsAt) http.Handler {
	return addrpath.Handler(FindingsPath, func(_ context.Context, ip netip.Addr) (any, error) { return at(ip), nil })
}
