package rule

import (
	"fmt"
	"net/netip"
	"strings"
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
		Guards:  []string{"proxy"},
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

// Evaluate returns one finding per backend, Service, holder and proof:
// the misdelivered flows, counted, with the first as the sample the message
// and evidence describe.
func (r *MisdeliveredFlow) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Conntrack == nil {
		return nil
	}
	ix := r.ct.index(s)
	gs := newFlowGroups(s.Conntrack, 0)
	for ref, f := range s.Conntrack.Refs() {
		j := ix.judge(f)
		if j.verdict != misdelivered {
			continue
		}
		gs.add(ix, ref, f, j, groupKey{svc: j.frontend.Service, holder: j.holder, why: misdeliveredProof(j)}, misdeliveredName)
	}
	var out []finding.Finding
	groups, _ := gs.groups()
	for _, g := range groups {
		out = append(out, r.finding(s, g))
	}
	return out
}

// misdeliveredName is what the misdelivered flows of one finding share
// besides their backend: the Service, the pod that holds the backend's
// address, and the proof.
func misdeliveredName(_ *snapshot.Flow, j judgement) string {
	return j.frontend.Ref().String() + " held by " + j.holder.UID + " " + misdeliveredProof(j)
}

// misdeliveredProof names what proves a flow misdelivered, in a word.
func misdeliveredProof(j judgement) string {
	switch {
	case j.openedBefore:
		return "started"
	case j.seenBefore:
		return "seen"
	}
	return "foreign"
}

// finding writes the finding of one group of misdelivered flows.
func (r *MisdeliveredFlow) finding(s *snapshot.Snapshot, g *flowGroup) finding.Finding {
	f, j := &g.first, g.j
	svc := j.frontend.Service
	h := j.holder
	ev := flowEvidence(f, j, s.Taken)
	ev["holder_pod"] = h.Ref().String()
	ev["holder_uid"] = h.UID
	ev["holder_since"] = h.Since().UTC().Format(time.RFC3339)
	ev["holder_is_backend"] = j.endpoint != nil
	var why string
	the := "the flow"
	if g.n() > 1 {
		the = "the first of them"
	}
	switch {
	case j.openedBefore:
		why = fmt.Sprintf("%s started at %s, before pod %s (started %s) held the IP",
			the, f.Start.UTC().Format(time.RFC3339), h.Ref(), h.Since().UTC().Format(time.RFC3339))
		ev["proof"] = "flow started before the holder existed"
	case j.seenBefore:
		why = fmt.Sprintf("the agent saw %s at %s, before pod %s (started %s) held the IP",
			the, f.Seen.UTC().Format(time.RFC3339), h.Ref(), h.Since().UTC().Format(time.RFC3339))
		ev["proof"] = "agent saw the flow before the holder existed"
		ev["flow_seen"] = f.Seen.UTC().Format(time.RFC3339)
	default:
		why = fmt.Sprintf("pod %s holds the IP, and %s selects pods of namespace %s only: it could never have sent the flow there", h.Ref(), svc.Ref(), svc.Namespace)
		ev["proof"] = "holder could never have been a backend of the service"
	}
	what, is := fmt.Sprintf("%s flow", f.Proto), "is"
	if n := g.n(); n > 1 {
		what, is = fmt.Sprintf("%d %s flows", n, strings.Join(g.protocols(), "/")), "are"
	}
	g.describe(ev)
	return finding.Finding{
		Rule:     MisdeliveredFlowID,
		Severity: finding.Critical,
		Message: fmt.Sprintf("%s to %s %s %s delivered to %s, now held by another pod: %s",
			what, j.frontend.Kind, svc.Ref(), is, f.Backend(), why),
		Subject: finding.Subject{
			IP:        f.Reply.Src.Unmap().String(),
			Service:   svc.Ref().String(),
			Namespace: svc.Namespace,
			Pod:       h.Ref().String(),
			Node:      s.NodeName,
			Flow:      g.subjectFlow(),
		},
		Evidence: ev,
		Concerns: append(g.concerns(svc, s.NodeName), finding.ObjectRef{Kind: "Pod", Namespace: h.Namespace, Name: h.Name, UID: h.UID}),
		Target:   g.target(),
		Remove:   g.remove(),
	}
}
