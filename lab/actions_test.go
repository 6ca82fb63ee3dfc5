package lab

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
)

// Each action the agent reports goes into the run's result, stamped with
// the timeline's clock, with its rule, the flow its finding names and its
// outcome, as -o json prints it; a run without the agent has none (null).
func TestAgentActionsInTheResult(t *testing.T) {
	tl, clock := newTestTimeline(&brokenWriter{ok: 1 << 30})
	l := &actionLog{tl: tl}
	if got := l.list(); got == nil || len(got) != 0 {
		t.Errorf("no action yet: %#v, want an empty list", got)
	}
	const flow = "tcp 203.0.113.10:40000 -> 192.168.50.1:30080"
	info := rule.Info{ID: rule.StaleNATFlowID}
	act := func(r remedy.Result, reason string) remedy.Action {
		return remedy.Action{Remedy: "stale-nat-flow", Rule: rule.StaleNATFlowID, Result: r, Reason: reason,
			Finding: finding.Finding{Rule: rule.StaleNATFlowID, Subject: finding.Subject{IP: "10.244.1.100", Flow: flow}}}
	}
	clock.Advance(4200*time.Millisecond + 300*time.Microsecond)
	l.add(info, act(remedy.Refused, "re-check: in a quorum read of the API server: 10.244.1.100 is a backend again"))
	clock.Advance(250 * time.Millisecond)
	l.add(info, act(remedy.Done, "deleted "+flow))
	clock.Advance(time.Second)
	l.add(info, act(remedy.Failed, "operation not permitted"))

	b, err := json.Marshal([]Run{{Agent: false}, {Agent: true, AgentActions: l.list()}})
	if err != nil {
		t.Fatal(err)
	}
	var runs []map[string]any
	if err := json.Unmarshal(b, &runs); err != nil {
		t.Fatal(err)
	}
	if v, ok := runs[0]["agent_actions"]; !ok || v != nil {
		t.Errorf("run without the agent: agent_actions = %v, want null", v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as lab -o json prints
	if err := enc.Encode(runs[1]["agent_actions"]); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(buf.String())
	want := `[{"at_seconds":4.2,"flow":"tcp 203.0.113.10:40000 -> 192.168.50.1:30080","reason":"re-check: in a quorum read of the API server: 10.244.1.100 is a backend again","remedy":"stale-nat-flow","result":"refused","rule":"stale-nat-flow"},` +
		`{"at_seconds":4.45,"flow":"tcp 203.0.113.10:40000 -> 192.168.50.1:30080","reason":"deleted tcp 203.0.113.10:40000 -> 192.168.50.1:30080","remedy":"stale-nat-flow","result":"done","rule":"stale-nat-flow"},` +
		`{"at_seconds":5.45,"flow":"tcp 203.0.113.10:40000 -> 192.168.50.1:30080","reason":"operation not permitted","remedy":"stale-nat-flow","result":"failed","rule":"stale-nat-flow"}]`
	if got != want {
		t.Errorf("agent_actions:\n%s\nwant:\n%s", strings.ReplaceAll(got, "},{", "},\n{"), strings.ReplaceAll(want, "},{", "},\n{"))
	}
}
