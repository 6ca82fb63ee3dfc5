package rule

import (
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ledgerRule records which of its ledgers it was asked to judge.
type ledgerRule struct{ judged []string }

func (r *ledgerRule) Info() Info {
	return Info{ID: "ledger-rule", Sources: []string{"kube"}, Ledgers: ipamLedgers}
}

func (r *ledgerRule) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	for _, l := range ipamLedgers {
		if ready(s, l.Source) {
			r.judged = append(r.judged, l.Source)
		}
	}
	return nil
}

func TestRuleWithLedgersRunsWhenOneIsReady(t *testing.T) {
	ok := func(n string) snapshot.SourceStatus { return snapshot.SourceStatus{Name: n, Status: snapshot.StatusOK} }
	with := func(n string, st snapshot.Status) snapshot.SourceStatus {
		return snapshot.SourceStatus{Name: n, Status: st, Detail: "why " + n}
	}
	for _, tc := range []struct {
		name    string
		sources []snapshot.SourceStatus
		judged  string // the ledgers judged, or "" when skipped
		// notApplicable is the skip's verdict; reason a part of its text.
		notApplicable bool
		reason        string
	}{
		{"agent: host-local only", []snapshot.SourceStatus{ok("kube"), ok("hostlocal")}, "hostlocal", false, ""},
		{"controller: Calico only", []snapshot.SourceStatus{ok("kube"), ok("calico")}, "calico", false, ""},
		{"scan: both", []snapshot.SourceStatus{ok("kube"), ok("hostlocal"), ok("calico")}, "hostlocal,calico", false, ""},
		{"one failed, one ready", []snapshot.SourceStatus{ok("kube"), with("hostlocal", snapshot.StatusError), ok("calico")}, "calico", false, ""},
		{"no ledger here", []snapshot.SourceStatus{ok("kube"), with("hostlocal", snapshot.StatusUnsupported)}, "", true, "hostlocal: unsupported"},
		{"neither ledger exists", []snapshot.SourceStatus{ok("kube"), with("hostlocal", snapshot.StatusUnsupported), with("calico", snapshot.StatusUnsupported)}, "", true, "calico: unsupported"},
		// A ledger that cannot be read is not a ledger that does not
		// exist: the report must say the rule could not run.
		{"the one ledger failed", []snapshot.SourceStatus{ok("kube"), with("hostlocal", snapshot.StatusError)}, "", false, "why hostlocal"},
		{"kube failed", []snapshot.SourceStatus{with("kube", snapshot.StatusError), ok("hostlocal")}, "", false, "why kube"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &ledgerRule{}
			_, skipped := Run(&snapshot.Snapshot{Sources: tc.sources}, []Rule{r})
			if got := strings.Join(r.judged, ","); got != tc.judged {
				t.Errorf("judged %q, want %q", got, tc.judged)
			}
			if tc.judged != "" {
				if len(skipped) != 0 {
					t.Errorf("skipped %+v", skipped)
				}
				return
			}
			if len(skipped) != 1 || skipped[0].NotApplicable != tc.notApplicable || !strings.Contains(skipped[0].Reason, tc.reason) {
				t.Errorf("skipped %+v, want not applicable %v with %q", skipped, tc.notApplicable, tc.reason)
			}
		})
	}
}

func TestRuleWithLedgersRunsInEachLedgersScope(t *testing.T) {
	all := All(Config{})
	for _, id := range []string{IPAMUnbookedIPID, IPAMLeakedIPID} {
		for _, scope := range []Scope{ScopeNode, ScopeCluster} {
			if _, ok := Find(InScope(all, scope), id); !ok {
				t.Errorf("%s does not run in the %s scope", id, scope)
			}
		}
		r, _ := Find(all, id)
		if got := strings.Join(r.Info().Reads(), ","); got != "kube,hostlocal,calico" {
			t.Errorf("%s reads %s", id, got)
		}
	}
	if _, ok := Find(InScope(all, ScopeCluster), StaleNATFlowID); ok {
		t.Errorf("%s runs in the cluster scope", StaleNATFlowID)
	}
}
