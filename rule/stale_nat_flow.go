package rule

import (
	"fmt"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// StaleNATFlowID is the stable ID of the stale-nat-flow rule.
const StaleNATFlowID = "stale-nat-flow"

// StaleNATFlow finds conntrack flows that still translate a Service frontend
// to a backend that is no longer an endpoint of that Service and whose IP no
// pod holds (seeds 001 and 004). A backend whose pod is terminating but
// still exists is draining and never a finding.
type StaleNATFlow struct{ Config ConntrackConfig }

// Info describes the rule.
func (StaleNATFlow) Info() Info {
	return Info{
		ID:      StaleNATFlowID,
		Sources: []string{"kube", "conntrack"},
		Summary: "the kernel still translates this connection to a pod that no longer exists: packets go nowhere until the entry expires",
		Fix:     "delete exactly this flow (conntrack -D with its original tuple), never by port or address; bound client connection lifetimes",
		Runbook: "docs/runbooks/stale-nat-flow.md",
	}
}

// closingStates are TCP states in which a new SYN from the same source port
// re-opens the entry with a fresh DNAT lookup, so the ghost cannot capture
// new connections and expires within seconds.
var closingStates = map[string]bool{"TIME_WAIT": true, "CLOSE": true}

// Evaluate returns one finding per stale flow.
func (r StaleNATFlow) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Conntrack == nil {
		return nil
	}
	ix := newFlowIndex(s, r.Config)
	var out []finding.Finding
	for i := range s.Conntrack.Flows {
		f := &s.Conntrack.Flows[i]
		j := ix.judge(f)
		if j.verdict != stale {
			continue
		}
		sev := finding.Warning
		if f.Proto == snapshot.ProtoTCP && closingStates[f.State] {
			sev = finding.Info
		}
		svc := j.frontend.Service
		ev := flowEvidence(f, j, s.Taken)
		ev["current_backends"] = ix.currentBackends(svc.Ref(), 10)
		msg := fmt.Sprintf("%s flow to %s %s still goes to %s, which is no longer a backend and which no pod holds",
			f.Proto, j.frontend.Kind, svc.Ref(), f.Backend())
		if j.hostNode != "" {
			ev["backend_node"] = j.hostNode
			msg = fmt.Sprintf("%s flow to %s %s still goes to %s on node %s (hostNetwork), which is no longer a backend",
				f.Proto, j.frontend.Kind, svc.Ref(), f.Backend(), j.hostNode)
		}
		out = append(out, finding.Finding{
			Rule:     StaleNATFlowID,
			Severity: sev,
			Message:  msg,
			Subject: finding.Subject{
				IP:        f.Reply.Src.Unmap().String(),
				Service:   svc.Ref().String(),
				Namespace: svc.Namespace,
				Node:      s.NodeName,
				Flow:      f.String(),
			},
			Evidence: ev,
			Flow:     copyFlow(f),
		})
	}
	return out
}

// flowEvidence records the facts of a flow a finding relies on.
func flowEvidence(f *snapshot.Flow, j judgement, now time.Time) map[string]any {
	ev := map[string]any{
		"frontend":      f.Frontend().String(),
		"frontend_kind": j.frontend.Kind,
		"backend":       f.Backend().String(),
	}
	if f.State != "" {
		ev["state"] = f.State
	}
	ev["timeout_seconds"] = f.Timeout
	if f.ID != 0 {
		ev["conntrack_id"] = f.ID
	}
	if !f.Start.IsZero() {
		ev["flow_started"] = f.Start.UTC().Format(time.RFC3339)
		if age := now.Sub(f.Start); age > 0 {
			ev["flow_age_seconds"] = int64(age.Seconds())
		}
	}
	if f.Zone != 0 {
		ev["zone"] = f.Zone
	}
	return ev
}

func copyFlow(f *snapshot.Flow) *snapshot.Flow {
	c := *f
	return &c
}
