package rule

import (
	"errors"
	"fmt"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"net/netip"
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

// Evaluate returns one finding per stale flow.
func (r *StaleNATFlow) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Conntrack == nil {
		return nil
	}
	ix := r.ct.index(s)
	// Counted first, so that thousands of findings are allocated once.
	n := 0
	for f := range s.Conntrack.All() {
		if ix.judge(f).verdict == stale {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]finding.Finding, 0, n)
	for f := range s.Conntrack.All() {
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
		fe := j.frontend.describe(f)
		if svc != nil {
			ev["current_backends"] = ix.currentBackends(svc.Ref(), 10)
		}
		msg := fmt.Sprintf("%s flow to %s still goes to %s, which is no longer a backend and which no pod holds",
			f.Proto, fe, f.Backend())
		switch {
		case j.untranslated:
			ev["never_translated"] = true
			msg = fmt.Sprintf("%s flow to %s was never translated: it was created while no rule translated the Service, and every datagram of it still goes to %s itself, where nothing answers, for as long as the client keeps sending",
				f.Proto, fe, f.Frontend())
		case j.frontend.Gone():
			ev["service_gone"] = true
			ev["service_cidr"] = j.frontend.CIDR.String()
			where := "service range " + j.frontend.CIDR.String()
			if j.frontend.CIDRName != "" {
				ev["service_cidr_object"] = j.frontend.CIDRName
				where = "ServiceCIDR " + j.frontend.CIDRName + " (" + j.frontend.CIDR.String() + ")"
			}
			msg = fmt.Sprintf("%s flow to %s still goes to %s: no Service holds %s, an address of %s, and no pod holds %s",
				f.Proto, f.Frontend(), f.Backend(), f.Orig.Dst.Unmap(), where, f.Reply.Src.Unmap())
		case j.listedDead:
			ev["endpoint_slice"] = j.endpoint.Slice
			ev["endpoint_pod"] = j.endpoint.Pod.String()
			msg = fmt.Sprintf("%s flow to %s still goes to %s, listed in EndpointSlice %s but not serving, for pod %s, which no longer exists: nothing answers there",
				f.Proto, fe, f.Backend(), j.endpoint.Slice, j.endpoint.Pod)
		case j.hostNode != "":
			ev["backend_node"] = j.hostNode
			msg = fmt.Sprintf("%s flow to %s still goes to %s on node %s (hostNetwork), which is no longer a backend",
				f.Proto, fe, f.Backend(), j.hostNode)
		}
		subject := finding.Subject{
			IP:   f.Reply.Src.Unmap().String(),
			Node: s.NodeName,
			Flow: f.String(),
		}
		if svc != nil {
			subject.Service, subject.Namespace = svc.Ref().String(), svc.Namespace
		}
		out = append(out, finding.Finding{
			Rule:     StaleNATFlowID,
			Severity: sev,
			Message:  msg,
			Subject:  subject,
			Evidence: ev,
			Concerns: ix.concerns(f, svc, s.NodeName),
			Target:   &finding.FlowTarget{Flow: *f},
			Remove:   f.DeleteCommand(),
		})
	}
	return out
}

// staleDetail is what became of the backend, in a table row.
func staleDetail(f finding.Finding) string {
	d := fmt.Sprintf("backend %v gone", f.Evidence["backend"])
	if never, _ := f.Evidence["never_translated"].(bool); never {
		d = "never translated: sent before the Service had rules"
	}
	if serviceGone(f) {
		d = fmt.Sprintf("Service of %v deleted, backend %v gone", f.Evidence["frontend"], f.Evidence["backend"])
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
func (r *StaleNATFlow) RecheckQuery(s *snapshot.Snapshot, f finding.Finding) snapshot.KubeQuery {
	var q snapshot.KubeQuery
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
	ev["timeout_seconds"] = f.Timeout
	// When the kernel would drop the entry by itself, counted from the
	// capture (each packet renews it).
	ev["expires_in"] = (time.Duration(f.Timeout) * time.Second).String()
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
