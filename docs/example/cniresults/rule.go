package cniresults

import (
	"fmt"
	"net/netip"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// OrphanID is the stable ID of the example rule.
const OrphanID = "cni-result-orphan"

// Orphan finds a cached result of a pod that no longer runs on the node
// whose address a running pod of the node now holds: the runtime still
// believes a gone sandbox holds that pod's address, and a DEL it replays
// from its cache (a sandbox garbage-collected late) asks the IPAM plugin
// to release it.
type Orphan struct{}

// Info describes the rule.
func (*Orphan) Info() rule.Info {
	return rule.Info{
		ID:      OrphanID,
		Sources: []string{"kube", Name}, // both complete, or the rule is skipped
		Scope:   rule.ScopeNode,         // the agent runs node rules
		Columns: []string{"ip", "pod"},
		Summary: "the container runtime caches a gone pod's CNI result for an address another pod now holds",
		Fix:     "remove the cached result once its sandbox is gone (see the runbook)",
		Runbook: "docs/runbooks/" + OrphanID + ".md",
	}
}

// Evaluate is pure: it reads s only, and says in the evidence why each
// finding holds.
func (*Orphan) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	rs := snapshot.LedgerOf[Results](s, Name)
	if rs == nil || s.Kube == nil {
		return nil
	}
	running := map[string]bool{}              // the node's pods, by UID and by namespace/name
	holders := map[netip.Addr]*snapshot.Pod{} // who holds each pod IP on the node
	for i := range s.Kube.Pods {
		p := &s.Kube.Pods[i]
		if p.Node != s.NodeName || !p.HoldsPodIP() {
			continue
		}
		running[p.UID], running[p.Namespace+"/"+p.Name] = true, true
		for _, a := range p.IPs {
			holders[a.Unmap()] = p
		}
	}
	var out []finding.Finding
	for _, r := range rs.Entries {
		if running[r.PodUID] || (r.PodUID == "" && running[r.PodNamespace+"/"+r.PodName]) {
			continue
		}
		for _, a := range r.IPs {
			p, ok := holders[a.Unmap()]
			if !ok {
				continue
			}
			out = append(out, finding.Finding{
				Rule: OrphanID, Severity: finding.Warning,
				Message: fmt.Sprintf("%s caches %s for pod %s/%s, which no longer runs here; pod %s holds it now", r.File, a, r.PodNamespace, r.PodName, p.Ref()),
				Subject: finding.Subject{IP: a.String(), Namespace: p.Namespace, Pod: p.Name, Node: s.NodeName},
				Evidence: map[string]any{"file": r.File, "container_id": r.ContainerID, "cached_pod": r.PodNamespace + "/" + r.PodName,
					"holder_uid": p.UID},
				Concerns: []finding.ObjectRef{{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}},
			})
		}
	}
	return out
}
