package sink

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
)

// An answer lists the findings whose subject is the address, each with its
// rule's runbook, and nothing about other addresses; the handler serves it.
func TestFindingsAtAnAddress(t *testing.T) {
	rules := rule.All(rule.Config{})
	fs := []finding.Finding{
		{Rule: rule.StaleNATFlowID, Severity: finding.Warning, Message: "a ghost", Subject: finding.Subject{IP: "10.244.7.47"}},
		{Rule: rule.DuplicatePodIPID, Severity: finding.Critical, Message: "another address", Subject: finding.Subject{IP: "10.244.7.48"}},
		{Rule: "no-such-rule", Severity: finding.Info, Message: "an IPv4-mapped form", Subject: finding.Subject{IP: "::ffff:10.244.7.47"}},
	}
	srv := httptest.NewServer(FindingsHandler(func(ip netip.Addr) FindingsAt { return NewFindingsAt("node-1", true, rules, fs, ip) }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + FindingsPath + "10.244.7.47")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var at FindingsAt
	if err := json.NewDecoder(resp.Body).Decode(&at); err != nil {
		t.Fatal(err)
	}
	if at.From != "node-1" || !at.Judging || len(at.Findings) != 2 || at.Findings[0].Rule != rule.StaleNATFlowID ||
		!strings.HasSuffix(at.Findings[0].Runbook, "/docs/runbooks/stale-nat-flow.md") || at.Findings[1].Runbook != "" {
		t.Errorf("answer %+v", at)
	}
	if resp, err := http.Get(srv.URL + FindingsPath + "10.244"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad address: %v %v", resp, err)
	}
}
