package rule

import (
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Where Service NAT does not show in conntrack (the proxy source
// unsupported: Cilium's kube-proxy replacement, IPVS without conntrack),
// the flow rules are not judged, and say why; not collected at all (a scan
// of saved evidence), the guard changes nothing; and the other rules run.
func TestGuardedRulesAreNotJudgedWhereTheyCannotSee(t *testing.T) {
	rules := All(Config{})
	base := func() *snapshot.Snapshot {
		return &snapshot.Snapshot{Kube: &snapshot.Kube{}, Conntrack: &snapshot.Conntrack{}, Sources: []snapshot.SourceStatus{
			{Name: "kube", Status: snapshot.StatusOK}, {Name: "conntrack", Status: snapshot.StatusOK}}}
	}
	skippedOf := func(s *snapshot.Snapshot) map[string]bool {
		_, skipped := Run(s, rules)
		out := map[string]bool{}
		for _, sk := range skipped {
			out[sk.Rule] = sk.Blind && sk.NotApplicable
		}
		return out
	}
	s := base()
	s.Sources = append(s.Sources, snapshot.SourceStatus{Name: "proxy", Status: snapshot.StatusUnsupported, Detail: "Cilium's kube-proxy replacement translates Services in eBPF"})
	got := skippedOf(s)
	for _, id := range []string{StaleNATFlowID, MisdeliveredFlowID} {
		if !got[id] {
			t.Errorf("%s: not skipped as blind where the proxy source is unsupported (%v)", id, got)
		}
	}
	if _, ok := got[DuplicatePodIPID]; ok {
		t.Errorf("duplicate-pod-ip skipped too: %v", got)
	}
	for _, st := range []snapshot.Status{snapshot.StatusOK, ""} {
		s := base()
		if st != "" {
			s.Sources = append(s.Sources, snapshot.SourceStatus{Name: "proxy", Status: st})
		}
		if got := skippedOf(s); got[StaleNATFlowID] || got[MisdeliveredFlowID] {
			t.Errorf("proxy %q: the flow rules skipped: %v", st, got)
		}
	}
}
