package rule

import (
	"errors"
	"fmt"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"net/netip"
	"strings"
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
type StaleNATFlow struct{ ct *conntrackRules }

// NewStaleNATFlow returns the rule on its own; All shares one judgement
// between the conntrack rules.
func NewStaleNATFlow(cfg ConntrackConfig) *StaleNATFlow { return &StaleNATFlow{newConntrackRules(cfg)} }

// Info describes the rule.
func (*StaleNATFlow) Info() Info {
	return Info{
		ID:      StaleNATFlowID,
		Sources: []string{"kube", "conntrack"},
		Guards:  []string{"proxy"},
		Scope:   ScopeNode,
		Summary: "the kernel still sends this connection where nothing answers (a pod that no longer exists, or, for UDP never translated, the Service address itself): packets go nowhere until the entry expires",
		Fix:     "delete exactly this flow (conntrack -D with its original tuple), never by port or address; bound client connection lifetimes",
		Runbook: "docs/runbooks/stale-nat-flow.md",
		Columns: []string{"service", "flow", "ip"},
		Detail:  staleDetail,
		Gauge: &Gauge{
			Name:   "conntrack_stale_entries",
			Help:   "Conntrack entries on this node that still translate a Service to a backend that is gone, by Service.",
			Labels: []string{"namespace", "service"},
			Values: func(f finding.Finding) []string {
				svc, _ := serviceOf(f)
				return []string{svc.Namespace, svc.Name}
			},
		},
		Remedy: &RemedyInfo{
			ID:     StaleNATFlowID,
			Action: "delete exactly the conntrack entry each finding names (its original tuple, zone and ID), never a flow by address or port",
			Verb:   "delete",
			Past:   "deleted",
			Target: finding.FlowKind,
			Events: RemedyEvents{Done: "StaleFlowDeleted", DryRun: "StaleFlowDeleteDryRun",
				Refused: "StaleFlowDeleteRefused", Failed: "StaleFlowDeleteFailed"},
			Counter: &Counter{Name: "conntrack_flows_deleted_total",
				Help: "Conntrack entries the agent deleted, by the rule that named them."},
		},
	}
}

// FlowFilter keeps the flows this rule could report (snapshot.FlowReader).
func (r *StaleNATFlow) FlowFilter(s *snapshot.Snapshot) snapshot.FlowFilter {
	return r.ct.flowFilter(s)
}

// HolderAddrs names the addresses whose holders the rule needs and the
// snapshot does not know (snapshot.HolderReader).
func (r *StaleNATFlow) HolderAddrs(s *snapshot.Snapshot) []netip.Addr { return r.ct.holderAddrs(s) }

// BackendLocal marks the judgement as depending only on the frontends and
// on what the cluster says about the flow's backend (snapshot.BackendLocal).
func (*StaleNATFlow) BackendLocal() {}

// closingStates are TCP states in which a new SYN from the same source port
// re-opens the entry with a fresh DNAT lookup, so the ghost cannot capture
// new connections and expires within seconds.
var closingStates = map[string]bool{"TIME_WAIT": true, "CLOSE": true}

// Evaluate returns one finding per ghost backend and Service (or deleted
// Service's address), reason and severity: its flows, counted, with the
// first as the sample the message and evidence describe.
func (r *StaleNATFlow) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Conntrack == nil {
		return nil
	}
	ix := r.ct.index(s)
	gs := newFlowGroups(s.Conntrack, r.ct.cfg.oneByOne())
	for ref, f := range s.Conntrack.Refs() {
		j := ix.judge(f)
		if j.verdict != stale {
			continue
		}
		gs.add(ix, ref, f, j, staleKey(f, j), staleName)
	}
	groups, crowds := gs.groups()
	if len(groups) == 0 && len(crowds) == 0 {
		return nil
	}
	out := make([]finding.Finding, 0, len(groups)+len(crowds))
	for _, g := range groups {
		out = append(out, r.finding(s, ix, g))
	}
	for _, cr := range crowds {
		out = append(out, r.crowdFinding(s, ix, cr))
	}
	return out
}

// staleKey is what the flows of one stale finding share besides their
// backend, as staleName names it, without building the name.
func staleKey(f *snapshot.Flow, j judgement) groupKey {
	k := groupKey{svc: j.frontend.Service, closing: staleSeverity(f) == finding.Info}
	switch {
	case j.untranslated:
		k.why, k.frontend = "untranslated", f.Frontend()
	case j.frontend.Gone():
		k.why, k.frontend = "deleted", f.Frontend()
	case j.listedDead:
		k.why = "listed"
	case j.hostNode != "":
		k.why, k.host = "host", j.hostNode
	default:
		k.why = "gone"
	}
	return k
}

// staleName is what the flows of one stale finding share besides their
// backend: the Service (or the deleted one's address), the reason, and
// the severity (a TCP flow closing anyway is info).
func staleName(f *snapshot.Flow, j judgement) string {
	var b strings.Builder
	if j.frontend.Gone() || j.untranslated {
		b.WriteString(f.Frontend().String())
	} else {
		b.WriteString(j.frontend.Ref().String())
	}
	switch {
	case j.untranslated:
		b.WriteString(" untranslated")
	case j.frontend.Gone():
		b.WriteString(" deleted")
	case j.listedDead:
		b.WriteString(" listed")
	case j.hostNode != "":
		b.WriteString(" host " + j.hostNode)
	default:
		b.WriteString(" gone")
	}
	if staleSeverity(f) == finding.Info {
		b.WriteString(" closing")
	}
	return b.String()
}

func staleSeverity(f *snapshot.Flow) finding.Severity {
	if f.Proto == snapshot.ProtoTCP && closingStates[f.State] {
		return finding.Info
	}
	return finding.Warning
}

// finding writes the finding of one group of stale flows.
func (r *StaleNATFlow) finding(s *snapshot.Snapshot, ix *flowIndex, g *flowGroup) finding.Finding {
	f, j := &g.first, g.j
	svc := j.frontend.Service
	ev := flowEvidence(f, j, s.Taken)
	fe := j.frontend.describe(f)
	if svc != nil {
		ev["current_backends"] = ix.currentBackends(svc.Ref(), 10)
	}
	what, goes := fmt.Sprintf("%s flow", f.Proto), "goes"
	if n := g.n(); n > 1 {
		what, goes = fmt.Sprintf("%d %s flows", n, strings.Join(g.protocols(), "/")), "go"
	}
	msg := fmt.Sprintf("%s to %s still %s to %s, which is no longer a backend and which no pod holds",
		what, fe, goes, f.Backend())
	switch {
	case j.untranslated:
		ev["never_translated"] = true
		was, it, of := "was", "it was", "of it"
		if g.n() > 1 {
			was, it, of = "were", "they were", "of them"
		}
		msg = fmt.Sprintf("%s to %s %s never translated: %s created while no rule translated the Service, and every datagram %s still goes to %s itself, where nothing answers, for as long as the client keeps sending",
			what, fe, was, it, of, f.Frontend())
	case j.frontend.Gone():
		where := j.frontend.goneEvidence(ev)
		msg = fmt.Sprintf("%s to %s still %s to %s: no Service holds %s, an address of %s, and no pod holds %s",
			what, f.Frontend(), goes, f.Backend(), f.Orig.Dst.Unmap(), where, f.Reply.Src.Unmap())
	case j.listedDead:
		ev["endpoint_slice"] = j.endpoint.Slice
		ev["endpoint_pod"] = j.endpoint.Pod.String()
		msg = fmt.Sprintf("%s to %s still %s to %s, listed in EndpointSlice %s but not serving, for pod %s, which no longer exists: nothing answers there",
			what, fe, goes, f.Backend(), j.endpoint.Slice, j.endpoint.Pod)
	case j.hostNode != "":
		ev["backend_node"] = j.hostNode
		msg = fmt.Sprintf("%s to %s still %s to %s on node %s (hostNetwork), which is no longer a backend",
			what, fe, goes, f.Backend(), j.hostNode)
	}
	g.describe(ev)
	subject := finding.Subject{
		IP:   f.Reply.Src.Unmap().String(),
		Node: s.NodeName,
		Flow: g.subjectFlow(),
	}
	if svc != nil {
		subject.Service, subject.Namespace = svc.Ref().String(), svc.Namespace
	}
	return finding.Finding{
		Rule:     StaleNATFlowID,
		Severity: staleSeverity(f),
		Message:  msg,
		Subject:  subject,
		Evidence: ev,
		Concerns: g.concerns(svc, s.NodeName),
		Target:   g.target(),
		Remove:   g.remove(),
	}
}

// crowdFinding writes the finding of the ghost backends of one name
// beyond those reported one by one.
func (r *StaleNATFlow) crowdFinding(s *snapshot.Snapshot, ix *flowIndex, cr *flowCrowd) finding.Finding {
	f, j := &cr.first, cr.j
	svc := j.frontend.Service
	ev := map[string]any{
		"frontend":      f.Frontend().String(),
		"frontend_kind": j.frontend.Kind,
	}
	if svc != nil {
		ev["current_backends"] = ix.currentBackends(svc.Ref(), 10)
	}
	cr.describe(ev)
	n := len(cr.sels)
	what := fmt.Sprintf("%d %s flows", cr.flows, strings.Join(cr.protocols(), "/"))
	first := ev["backends"].([]string)
	named := strings.Join(first[:min(len(first), 3)], ", ")
	if n > 3 {
		named += fmt.Sprintf(" and %d more", n-3)
	}
	fe := j.frontend.describe(f)
	var msg string
	switch {
	case j.frontend.Gone():
		where := j.frontend.goneEvidence(ev)
		msg = fmt.Sprintf("%s to %s still go to %d addresses that no pod holds (%s): no Service holds %s, an address of %s",
			what, f.Frontend(), n, named, f.Orig.Dst.Unmap(), where)
	case j.listedDead:
		msg = fmt.Sprintf("%s to %s still go to %d backends listed in its EndpointSlices but not serving, for pods which no longer exist (%s): nothing answers there",
			what, fe, n, named)
	case j.hostNode != "":
		msg = fmt.Sprintf("%s to %s still go to %d node addresses (hostNetwork) which are no longer backends (%s)", what, fe, n, named)
	default:
		msg = fmt.Sprintf("%s to %s still go to %d addresses which are no longer backends and which no pod holds (%s)", what, fe, n, named)
	}
	msg += fmt.Sprintf("; reported together, as more than %d ghost backends judged alike are: no remedy acts on so many at once", r.ct.cfg.oneByOne())
	subject := finding.Subject{Node: s.NodeName, Flow: fmt.Sprintf("%d flows to %d backends (%s)", cr.flows, n, strings.Join(cr.protocols(), ", "))}
	if svc != nil {
		subject.Service, subject.Namespace = svc.Ref().String(), svc.Namespace
	}
	return finding.Finding{
		Rule:     StaleNATFlowID,
		Severity: staleSeverity(f),
		Message:  msg,
		Subject:  subject,
		Evidence: ev,
		Concerns: cr.concerns(svc, s.NodeName),
		Target:   cr.target(),
	}
}

// staleDetail is what became of the backend, in a table row.
func staleDetail(f finding.Finding) string {
	gone := fmt.Sprintf("backend %v gone", f.Evidence["backend"])
	if n, ok := f.Evidence["ghost_backends"]; ok {
		gone = fmt.Sprintf("%v backends gone", n)
	}
	d := gone
	if never, _ := f.Evidence["never_translated"].(bool); never {
		d = "never translated: sent before the Service had rules"
	}
	if serviceGone(f) {
		d = fmt.Sprintf("Service of %v deleted, %s", f.Evidence["frontend"], gone)
	}
	if s, ok := f.Evidence["endpoint_slice"]; ok {
		d += fmt.Sprintf(", still listed not serving in %v", s)
	}
	if st, ok := f.Evidence["state"]; ok {
		d += fmt.Sprintf(", %v", st)
	}
	if n, ok := f.Evidence["backend_node"]; ok {
		d += fmt.Sprintf(", hostNetwork on %v", n)
	}
	if t, ok := f.Evidence["timeout_seconds"].(uint32); ok {
		d += ", expires in " + text.Duration(time.Duration(t)*time.Second)
	}
	return d
}

// RecheckQuery names what proves the flow stale: the Service it addressed
// with its EndpointSlices, the pods that hold the backend address, and the
// node whose addresses are NodePort frontends (and the backend's node when
// it is a node address).
func (r *StaleNATFlow) RecheckQuery(s *snapshot.Snapshot, f finding.Finding) snapshot.Query {
	var q snapshot.Query
	fl, ok := flowOf(f)
	if !ok {
		return q
	}
	if svc, sok := serviceOf(f); sok {
		q.Services = []snapshot.ObjectRef{svc}
	} else if serviceGone(f) {
		// That no Service holds the address now, and the service ranges.
		q.ServiceIPs = []netip.Addr{fl.Orig.Dst.Unmap()}
	} else {
		return q
	}
	if fl.DNAT() {
		q.PodIPs = []netip.Addr{fl.Reply.Src.Unmap()}
	}
	if s.NodeName != "" {
		q.Nodes = append(q.Nodes, s.NodeName)
	}
	if n, ok := f.Evidence["backend_node"].(string); ok && n != s.NodeName {
		q.Nodes = append(q.Nodes, n)
	}
	return q
}

// Recheck judges the flows again on fresh, which may hold only what
// RecheckQuery named.
func (r *StaleNATFlow) Recheck(fresh *snapshot.Snapshot, fs []finding.Finding) []error {
	errs := make([]error, len(fs))
	if fresh.Kube == nil {
		for i := range errs {
			errs[i] = errors.New("no fresh view of the cluster")
		}
		return errs
	}
	ix := newFlowIndex(fresh, r.ct.cfg)
	for i, f := range fs {
		fl, ok := flowOf(f)
		svc, sok := serviceOf(f)
		if !sok && serviceGone(f) {
			svc, sok = snapshot.ObjectRef{}, true
		}
		if !ok || !sok {
			errs[i] = errors.New("the finding names no conntrack flow of a Service")
			continue
		}
		errs[i] = ix.stillStale(fl, svc)
	}
	return errs
}

// serviceGone reports whether f is about a flow to a deleted Service.
func serviceGone(f finding.Finding) bool {
	gone, _ := f.Evidence["service_gone"].(bool)
	return gone
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
	if f.Timeout > 0 {
		// When the kernel would drop the entry by itself, counted from
		// the capture (each packet renews it). The agent's index does not
		// keep it (it is stale as soon as read): none is said then.
		ev["timeout_seconds"] = f.Timeout
		ev["expires_in"] = (time.Duration(f.Timeout) * time.Second).String()
	}
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

// goneEvidence records in ev that no Service holds the frontend, and the
// service range it lies in, and says that range for a message.
func (fr Frontend) goneEvidence(ev map[string]any) string {
	ev["service_gone"] = true
	ev["service_cidr"] = fr.CIDR.String()
	if fr.CIDRName == "" {
		return "service range " + fr.CIDR.String()
	}
	ev["service_cidr_object"] = fr.CIDRName
	return "ServiceCIDR " + fr.CIDRName + " (" + fr.CIDR.String() + ")"
}
