package whereabouts

import (
	"fmt"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// LeakedID is the stable ID of the example rule.
const LeakedID = "whereabouts-leaked-ip"

// Leaked finds addresses Whereabouts books for pods that no longer
// exist: lost to the pool until its reconciler frees them.
type Leaked struct{}

// Info describes the rule.
func (*Leaked) Info() rule.Info {
	return rule.Info{
		ID:      LeakedID,
		Sources: []string{"kube", Name},
		Scope:   rule.ScopeCluster, // the controller runs it: it needs every pod
		Columns: []string{"ip", "pod"},
		Summary: "Whereabouts books an address for a pod that no longer exists",
		Fix:     "let the ip-reconciler run, or remove the allocation (see the runbook)",
		Runbook: "docs/runbooks/" + LeakedID + ".md",
	}
}

// Evaluate reads every pod of the cluster (the controller's kube source)
// and the pools.
func (*Leaked) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	ps := snapshot.LedgerOf[Pools](s, Name)
	if ps == nil || s.Kube == nil {
		return nil
	}
	pods := make(map[string]bool, len(s.Kube.Pods))
	for i := range s.Kube.Pods {
		p := &s.Kube.Pods[i]
		pods[p.Namespace+"/"+p.Name] = true
	}
	var out []finding.Finding
	for _, pool := range ps.Pools {
		for _, a := range pool.Allocations {
			if pods[a.PodRef] {
				continue
			}
			out = append(out, finding.Finding{
				Rule: LeakedID, Severity: finding.Warning,
				Message:  fmt.Sprintf("IPPool %s books %s for pod %s, which no longer exists", pool.Name, a.IP, a.PodRef),
				Subject:  finding.Subject{IP: a.IP.String(), Pod: a.PodRef},
				Evidence: map[string]any{"pool": pool.Name, "container_id": a.ContainerID},
			})
		}
	}
	return out
}
