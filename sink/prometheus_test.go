package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func staleFinding(svc string) finding.Finding {
	ns, name, _ := strings.Cut(svc, "/")
	return finding.Finding{Rule: rule.StaleNATFlowID, Severity: finding.Warning, Subject: finding.Subject{Service: svc, Namespace: ns},
		Concerns: []finding.ObjectRef{{Kind: "Service", Namespace: ns, Name: name}}}
}

// The metrics come from the rules' Info: every rule's findings gauge, the
// extra gauge a rule declares, the counter of its remedy. No label value
// is an address.
func TestMetricsFromRuleInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, rule.All(rule.Config{}))
	m.Publish([]finding.Finding{staleFinding("web/api"), staleFinding("web/api"), staleFinding("db/pg")})
	m.Sources([]snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK, Duration: time.Second}, {Name: "conntrack", Status: snapshot.StatusError}})
	m.Action(remedy.Action{Rule: rule.StaleNATFlowID, Result: remedy.Done, Acted: 1})
	m.Action(remedy.Action{Rule: rule.StaleNATFlowID, Result: remedy.Refused})

	for _, tc := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.Findings.WithLabelValues(rule.StaleNATFlowID, "warning"), 3},
		{m.Findings.WithLabelValues(rule.MisdeliveredFlowID, "critical"), 0},
		{m.RuleGauge(rule.StaleNATFlowID).WithLabelValues("web", "api"), 2},
		{m.RuleGauge(rule.StaleNATFlowID).WithLabelValues("db", "pg"), 1},
		{m.SourceUp.WithLabelValues("kube"), 1},
		{m.SourceUp.WithLabelValues("conntrack"), 0},
		{m.RemedyActions.WithLabelValues(rule.StaleNATFlowID, "done"), 1},
		{m.RemedyCounter(rule.StaleNATFlowID).WithLabelValues(rule.StaleNATFlowID), 1},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%v = %v, want %v", tc.c, got, tc.want)
		}
	}
	// The next complete pass replaces the findings; nothing lingers.
	m.Publish(nil)
	if got := testutil.CollectAndCount(m.RuleGauge(rule.StaleNATFlowID)); got != 0 {
		t.Errorf("%d stale-entries series after a pass without findings", got)
	}
	want := `
# HELP ghostwatch_conntrack_flows_deleted_total Conntrack entries the agent deleted, by the rule that named them.
# TYPE ghostwatch_conntrack_flows_deleted_total counter
ghostwatch_conntrack_flows_deleted_total{rule="stale-nat-flow"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ghostwatch_conntrack_flows_deleted_total"); err != nil {
		t.Error(err)
	}
}

func TestEventsOnEveryObjectConcerned(t *testing.T) {
	rec := &fakeRecorder{}
	ev := &Events{Recorder: rec, Node: "node-a"}
	info := rule.NewStaleNATFlow(rule.ConntrackConfig{}).Info()
	f := staleFinding("web/api")
	f.Concerns = append(f.Concerns, finding.ObjectRef{Kind: "Pod", Namespace: "app", Name: "client", UID: "u1"})
	ev.Action(info, remedy.Action{Result: remedy.Done, Reason: "done: tcp ...", Finding: f})
	ev.Action(info, remedy.Action{Result: remedy.Pending, Finding: f})
	ev.Action(info, remedy.Action{Result: remedy.Refused, Reason: "over", Finding: f, Limit: &remedy.BudgetError{}})
	ev.Action(info, remedy.Action{Result: remedy.Refused, Reason: "cap", Finding: f, Limit: &remedy.CapError{}})
	ev.Action(info, remedy.Action{Result: remedy.Failed, Reason: errors.New("EPERM").Error(), Finding: f})
	want := []string{
		"Service web/api Normal StaleFlowDeleted node node-a: done: tcp ...",
		"Pod app/client Normal StaleFlowDeleted node node-a: done: tcp ...",
		"Service web/api Warning RemedyBudgetExceeded node node-a: over",
		"Pod app/client Warning RemedyBudgetExceeded node node-a: over",
		"Service web/api Warning RemedyCapExceeded node node-a: cap",
		"Pod app/client Warning RemedyCapExceeded node node-a: cap",
		"Service web/api Warning StaleFlowDeleteFailed node node-a: EPERM",
		"Pod app/client Warning StaleFlowDeleteFailed node node-a: EPERM",
	}
	if strings.Join(rec.events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(rec.events, "\n"), strings.Join(want, "\n"))
	}
}
