package rule

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// MisdeliveredFlowID is the stable ID of the misdelivered-flow rule.
const MisdeliveredFlowID = "misdelivered-flow"

// MisdeliveredFlow finds conntrack flows whose backend IP is now held by a
// different pod than the one the flow was opened to: traffic of one
// connection reaches another workload (or another instance). It is a
// security finding and always critical.
//
// It is reported only on proof that the holder is another pod than the one
// the flow was opened to: the flow started (conntrack timestamp) before the
// holder existed; the agent saw the flow (snapshot.Flow.Seen, its own
// record of the entry) before the holder existed; or the holder could
// never have been a backend (another namespace than a Service with a
// selector). A pod that merely left the
// Service (a blue/green switch, a pod relabelled out of rotation) is the
// same pod: its flows are no finding.
type MisdeliveredFlow struct{ ct *conntrackRules }

// NewMisdeliveredFlow returns the rule on its own; All shares one judgement
// between the conntrack rules.
func NewMisdeliveredFlow(cfg ConntrackConfig) *MisdeliveredFlow {
	return &MisdeliveredFlow{newConntrackRules(cfg)}
}

// FlowFilter keeps the flows this rule could report (snapshot.FlowReader).
func (r *MisdeliveredFlow) FlowFilter(s *snapshot.Snapshot) snapshot.FlowFilter {
	return r.ct.flowFilter(s)
}

// HolderAddrs names the addresses whose holders the rule needs and the
// snapshot does not know (snapshot.HolderReader).
func (r *MisdeliveredFlow) HolderAddrs(s *snapshot.Snapshot) []netip.Addr { return r.ct.holderAddrs(s) }

// BackendLocal marks the judgement as depending only on the frontends and
// on what the cluster says about the flow's backend (snapshot.BackendLocal).
func (*MisdeliveredFlow) BackendLocal() {}

// Info describes the rule.
func (*MisdeliveredFlow) Info() Info {
	return Info{
		ID:      MisdeliveredFlowID,
		Sources: []string{"kube", "conntrack"},
		Scope:   ScopeNode,
		Columns: []string{"service", "flow", "ip"},
		Detail: func(f finding.Finding) string {
			return fmt.Sprintf("now held by %s (%v)", f.Subject.Pod, f.Evidence["proof"])
		},
		Summary: "a connection opened to one pod now reaches another pod that reuses its IP: data of one workload is delivered to another",
		Fix:     "delete the flow so the client reconnects through the Service; enable net.netfilter.nf_conntrack_timestamp=1 so reuse is provable",
		Runbook: "docs/runbooks/misdelivered-flow.md",
	}
}

// Evaluate returns one finding per misdelivered flow.
func (r *MisdeliveredFlow) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Conntrack == nil {
		return nil
	}
	ix := r.ct.index(s)
	var out []finding.Finding
	for f := range s.Conntrack.All() {
		j := ix.judge(f)
		if j.verdict != misdelivered {
			continue
		}
		svc := j.frontend.Service
		h := j.holder
		ev := flowEvidence(f, j, s.Taken)
		ev["holder_pod"] = h.Ref().String()
		ev["holder_uid"] = h.UID
		ev["holder_since"] = h.Since().UTC().Format(time.RFC3339)
		ev["holder_is_backend"] = j.endpoint != nil
		var why string
		switch {
		case j.openedBefore:
			why = fmt.Sprintf("the flow started at %s, before pod %s (started %s) held the IP",
				f.Start.UTC().Format(time.RFC3339), h.Ref(), h.Since().UTC().Format(time.RFC3339))
			ev["proof"] = "flow started before the holder existed"
		case j.seenBefore:
			why = fmt.Sprintf("the agent saw the flow at %s, before pod %s (started %s) held the IP",
				f.Seen.UTC().Format(time.RFC3339), h.Ref(), h.Since().UTC().Format(time.RFC3339))
			ev["proof"] = "agent saw the flow before the holder existed"
			ev["flow_seen"] = f.Seen.UTC().Format(time.RFC3339)
		default:
			why = fmt.Sprintf("pod %s holds the IP, and %s selects pods of namespace %s only: it could never have sent the flow there", h.Ref(), svc.Ref(), svc.Namespace)
			ev["proof"] = "holder could never have been a backend of the service"
		}
		out = append(out, finding.Finding{
			Rule:     MisdeliveredFlowID,
			Severity: finding.Critical,
			Message: fmt.Sprintf("%s flow to %s %s is delivered to %s, now held by another pod: %s",
				f.Proto, j.frontend.Kind, svc.Ref(), f.Backend(), why),
			Subject: finding.Subject{
				IP:        f.Reply.Src.Unmap().String(),
				Service:   svc.Ref().String(),
				Namespace: svc.Namespace,
				Pod:       h.Ref().String(),
				Node:      s.NodeName,
				Flow:      f.String(),
			},
			Evidence: ev,
			Concerns: append(ix.concerns(f, svc, s.NodeName), finding.ObjectRef{Kind: "Pod", Namespace: h.Namespace, Name: h.Name, UID: h.UID}),
			Target:   &finding.FlowTarget{Flow: *f},
			Remove:   f.DeleteCommand(),
		})
	}
	return out
}
