package rule

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// IPAMMisbookedID is the stable ID of the ipam-misbooked rule.
const IPAMMisbookedID = "ipam-misbooked"

// IPAMMisbooked finds Calico allocations booked under another node than the
// one their pod runs on, while the pod still holds the address (seed 002:
// the CNI plugin took a stale node name). calico-kube-controllers' leak
// collector compares each allocation's node with its pod's spec.nodeName,
// takes a mismatch for a rescheduled pod, and frees the address after
// leakGracePeriod while the pod runs; the next pod anywhere may get it.
// It compares only when the booked node exists as a Node (seen on Calico
// v3.30.1's own binaries, lab/calico): then the finding is critical and
// says when the address will be freed; else a warning.
type IPAMMisbooked struct{}

// KubeKinds says the rule reads Pods and Nodes (snapshot.KindReader).
func (*IPAMMisbooked) KubeKinds() []string { return []string{"Pod", "Node"} }

// Info describes the rule.
func (*IPAMMisbooked) Info() Info {
	return Info{
		ID:      IPAMMisbookedID,
		Sources: []string{"kube", "calico"},
		Scope:   ScopeCluster,
		Columns: []string{"ip", "pod", "node"},
		Detail: func(f finding.Finding) string {
			if d, ok := f.Evidence["freed_from"]; ok {
				return fmt.Sprintf("booked under %v; freed from %v", f.Evidence["booked_node"], d)
			}
			return fmt.Sprintf("booked under %v", f.Evidence["booked_node"])
		},
		Summary: "a Calico allocation names another node than its pod's: the leak collector will free the address while the pod runs, and hand it to another pod",
		Fix:     "fix the node's Calico node name (stale-nodename-file), then re-create the pod before the collector frees its address; raise leakGracePeriod to buy time",
		Runbook: "docs/runbooks/ipam-misbooked.md",
	}
}

// Evaluate returns one finding per misbooked allocation.
func (r *IPAMMisbooked) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Calico == nil {
		return nil
	}
	var holders map[netip.Addr][]*snapshot.Pod
	var nodes map[string]bool
	if v := calicoViewOf(s); v != nil {
		// The pass's index, shared with the other Calico rules.
		holders, nodes = v.holders, v.nodes
	} else {
		holders, nodes = podsByIP(s.Kube.Pods), map[string]bool{}
		for _, n := range s.Kube.Nodes {
			nodes[n.Name] = true
		}
	}
	grace := s.Calico.LeakGracePeriod()
	var out []finding.Finding
	for bi := range s.Calico.Blocks {
		b := &s.Calico.Blocks[bi]
		for ai := range b.Allocations {
			a := &b.Allocations[ai]
			if a.Type != "" || a.Pod == "" || a.Node == "" || !a.IP.IsValid() {
				continue
			}
			var p *snapshot.Pod
			for _, h := range holders[a.IP] {
				if h.Namespace == a.Namespace && h.Name == a.Pod {
					p = h
				}
			}
			if p == nil || p.Node == "" || p.Node == a.Node {
				continue
			}
			out = append(out, misbooked(s, b, a, p, nodes[a.Node], grace))
		}
	}
	return out
}

func misbooked(s *snapshot.Snapshot, b *snapshot.IPAMBlock, a *snapshot.Allocation, p *snapshot.Pod, bookedExists bool, grace time.Duration) finding.Finding {
	ev := map[string]any{
		"ledger":      "calico",
		"block":       b.Name,
		"ordinal":     a.Ordinal,
		"handle":      a.HandleID,
		"booked_node": a.Node,
		"pod_node":    p.Node,
		"pod_uid":     p.UID,
		"re_create":   fmt.Sprintf("kubectl delete pod -n %s %s", p.Namespace, p.Name),
		"buy_time":    `kubectl patch kubecontrollersconfigurations.crd.projectcalico.org default --type=merge -p '{"spec":{"controllers":{"node":{"leakGracePeriod":"24h"}}}}'`,
	}
	if s.Calico.LeakGC != nil {
		ev["leak_grace_from"] = s.Calico.LeakGC.From
	}
	ev["leak_grace_period"] = grace.String()
	if !a.Timestamp.IsZero() {
		ev["booked_at"] = a.Timestamp.UTC().Format(time.RFC3339)
	}
	sev := finding.Warning
	var when string
	switch {
	case !bookedExists:
		when = fmt.Sprintf("no node %s exists, so the leak collector does not compare the nodes and keeps it; but the booking is wrong, and a Node of that name would make it a leak", a.Node)
	case grace == 0:
		when = "the leak collector frees no allocation of a live node (leakGracePeriod 0, or no node controller running); but the booking is wrong"
	default:
		sev = finding.Critical
		// A candidate at the collector's first scan after the booking
		// (scans run every grace/2), freed at the first scan more than
		// one grace later: between one and two graces after the booking,
		// if the collector ran throughout; a restart starts its
		// candidates over.
		if a.Timestamp.IsZero() {
			when = fmt.Sprintf("the leak collector frees it once it has held it for a leak for leakGracePeriod (%s); the booking time is unknown, so that may be at its next scan", grace)
		} else {
			from, by := a.Timestamp.Add(grace), a.Timestamp.Add(2*grace)
			ev["freed_from"] = from.UTC().Format(time.RFC3339)
			ev["freed_by"] = by.UTC().Format(time.RFC3339)
			if s.Taken.After(from) {
				when = fmt.Sprintf("booked at %s, it is past the leak collector's grace (%s): it may be freed at the collector's next scan (every %s), and is by %s if the collector ran throughout",
					a.Timestamp.UTC().Format(time.RFC3339), grace, grace/2, by.UTC().Format(time.RFC3339))
			} else {
				when = fmt.Sprintf("the leak collector frees it between %s and %s (booked at %s, leakGracePeriod %s, if the collector runs throughout)",
					from.UTC().Format(time.RFC3339), by.UTC().Format(time.RFC3339), a.Timestamp.UTC().Format(time.RFC3339), grace)
			}
		}
		when += fmt.Sprintf("; before then, fix node %s's Calico node name and re-create the pod", p.Node)
	}
	return finding.Finding{
		Rule:     IPAMMisbookedID,
		Severity: sev,
		Message: fmt.Sprintf("pod %s runs on node %s and holds %s, but Calico booked it under node %s (block %s, handle %s): %s",
			p.Ref(), p.Node, a.IP, a.Node, b.Name, a.HandleID, when),
		Subject: finding.Subject{
			IP:        a.IP.String(),
			Namespace: p.Namespace,
			Pod:       p.Ref().String(),
			Node:      p.Node,
		},
		Evidence: ev,
		Concerns: []finding.ObjectRef{{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}, {Kind: "Node", Name: p.Node}},
	}
}
