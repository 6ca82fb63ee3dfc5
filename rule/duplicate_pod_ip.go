package rule

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// DuplicatePodIPID is the stable ID of the duplicate-pod-ip rule.
const DuplicatePodIPID = "duplicate-pod-ip"

// DuplicatePodIP finds pod IPs that two or more pods report at once: the
// IPAM ledger forgot that a running pod holds its IP (a host-local
// directory wiped, a Calico allocation freed under a running pod) and gave
// it to another. Only pods that hold an IP of the pod network count: not
// hostNetwork pods (which report the node's address) and not pods that
// finished (Succeeded or Failed: their sandbox, and its IP, are gone).
// Every IP of every family (status.podIPs) is compared; an IPv4-mapped
// IPv6 address is the IPv4 address it maps, and the finding names the
// pods that wrote it mapped (snapshot.Pod.WrittenAs).
//
// A pod that is terminating still holds its IP until its sandbox is torn
// down, which the API does not show: a duplicate only with terminating
// pods beside one live pod is a warning (it ends when they are gone, or
// has already ended if their sandboxes are), one with two or more live
// pods is critical.
type DuplicatePodIP struct{}

// NewDuplicatePodIP returns the rule.
func NewDuplicatePodIP() *DuplicatePodIP { return &DuplicatePodIP{} }

// KubeKinds says the rule reads Pods only (snapshot.KindReader).
func (*DuplicatePodIP) KubeKinds() []string { return []string{"Pod"} }

// Info describes the rule.
func (*DuplicatePodIP) Info() Info {
	return Info{
		ID:      DuplicatePodIPID,
		Sources: []string{"kube"},
		Scope:   ScopeCluster,
		Columns: []string{"ip", "pod", "node"},
		Detail: func(f finding.Finding) string {
			d := fmt.Sprintf("the newest holder; also held by %v", f.Evidence["others"])
			if w, ok := f.Evidence["written_as"]; ok {
				d += "; " + fmt.Sprint(w)
			}
			return d
		},
		Summary: "two pods hold one IP: the IPAM ledger forgot the first and gave its IP to the second, and traffic for either may reach the other",
		Fix:     "delete the newer pod so it gets a fresh IP, then repair the ledger that forgot the older one (see the runbook)",
		Runbook: "docs/runbooks/duplicate-pod-ip.md",
		Gauge: &Gauge{
			Name:   "duplicate_pod_ips",
			Help:   "Pod IPs held by two or more pods, by severity.",
			Labels: []string{"severity"},
			Values: func(f finding.Finding) []string { return []string{f.Severity.String()} },
		},
	}
}

// Evaluate returns one finding per duplicated IP.
func (r *DuplicatePodIP) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	switch {
	case s.Kube == nil:
		return nil
	case s.Kube.Index != nil:
		return duplicatesOf(s.Kube.Index.Shared())
	}
	return duplicatesOf(sharedIPs(s.Kube.Pods))
}

// sharedIPs maps each pod-network IP that two or more pods report to those
// pods. The first holder of every IP is kept by index under the address's
// 16 bytes: a map the garbage collector need not scan, and no slice per
// IP of a cluster where nearly every IP has one holder.
func sharedIPs(pods []snapshot.Pod) map[netip.Addr][]*snapshot.Pod {
	first := make(map[[16]byte]int32, len(pods))
	dups := map[netip.Addr][]*snapshot.Pod{}
	for i := range pods {
		p := &pods[i]
		if !holdsPodIP(p) {
			continue
		}
		for j, a := range p.IPs {
			a = a.Unmap()
			if j > 0 && slices.ContainsFunc(p.IPs[:j], func(b netip.Addr) bool { return b.Unmap() == a }) {
				continue
			}
			k := a.As16()
			h, ok := first[k]
			if !ok {
				first[k] = int32(i)
				continue
			}
			if dups[a] == nil {
				dups[a] = []*snapshot.Pod{&pods[h]}
			}
			dups[a] = append(dups[a], p)
		}
	}
	return dups
}

// podsByIP maps each pod-network IP to the pods that report it, each pod
// once per address.
func podsByIP(pods []snapshot.Pod) map[netip.Addr][]*snapshot.Pod {
	return podsAt(pods, nil)
}

// podsAt is podsByIP for the addresses in only (every address when nil):
// a rule that asks about a few addresses does not index every pod.
func podsAt(pods []snapshot.Pod, only map[netip.Addr]bool) map[netip.Addr][]*snapshot.Pod {
	n := len(pods)
	if only != nil {
		n = len(only)
	}
	by := make(map[netip.Addr][]*snapshot.Pod, n)
	// The first holder of each address takes its slot of one array (a
	// slice of capacity 1), rather than an allocation of its own: a
	// second holder, rare, moves the address's pods out.
	slots := make([]*snapshot.Pod, 0, n)
	for i := range pods {
		p := &pods[i]
		if !holdsPodIP(p) {
			continue
		}
		for j, a := range p.IPs {
			a = a.Unmap()
			if only != nil && !only[a] {
				continue
			}
			if j > 0 && slices.ContainsFunc(p.IPs[:j], func(b netip.Addr) bool { return b.Unmap() == a }) {
				continue
			}
			if held := by[a]; held != nil || len(slots) == cap(slots) {
				by[a] = append(held, p)
				continue
			}
			slots = append(slots, p)
			by[a] = slots[len(slots)-1 : len(slots) : len(slots)]
		}
	}
	return by
}

// holdsPodIP reports whether p's IPs are its own (snapshot.Pod.HoldsPodIP).
func holdsPodIP(p *snapshot.Pod) bool { return p.HoldsPodIP() }

// duplicatesOf returns the findings of duplicate-pod-ip for holders, the
// pods of each IP, ordered by IP.
func duplicatesOf(holders map[netip.Addr][]*snapshot.Pod) []finding.Finding {
	var out []finding.Finding
	for ip, ps := range holders {
		if len(ps) > 1 {
			out = append(out, duplicate(ip, ps))
		}
	}
	slices.SortFunc(out, func(a, b finding.Finding) int {
		return netip.MustParseAddr(a.Subject.IP).Compare(netip.MustParseAddr(b.Subject.IP))
	})
	return out
}

// duplicate is the finding for ip, held by ps (two or more pods). The
// subject is the pod that got the IP last: the one the ledger handed out
// while the others held it.
func duplicate(ip netip.Addr, ps []*snapshot.Pod) finding.Finding {
	ps = slices.Clone(ps)
	// Oldest first; ties (one-second timestamps) by namespace/name.
	slices.SortFunc(ps, func(a, b *snapshot.Pod) int {
		if c := a.Since().Compare(b.Since()); c != 0 {
			return c
		}
		return cmp.Compare(a.Ref().String(), b.Ref().String())
	})
	newest := ps[len(ps)-1]
	live := 0
	var described, others, written []string
	var holders []Holder
	var concerns []finding.ObjectRef
	nodes := map[string]bool{}
	for _, p := range ps {
		if !p.Deleting {
			live++
		}
		described = append(described, describeHolder(p))
		h := Holder{Pod: p.Ref().String(), UID: p.UID, Node: p.Node, Terminating: p.Deleting, Newest: p == newest}
		if t := p.Since(); !t.IsZero() {
			h.Started = t.UTC().Format(time.RFC3339)
		}
		// An IPv4-mapped podIP (::ffff:10.0.0.5) is the IPv4 address it
		// maps, as Kubernetes reads it: said, so that pods whose podIPs
		// read differently are seen to hold one address.
		if w := p.WrittenAs(ip); w != ip.String() {
			h.WrittenAs = w
			written = append(written, fmt.Sprintf("pod %s reports it as %s", p.Ref(), w))
		}
		holders = append(holders, h)
		if p != newest {
			o := p.Ref().String()
			if p.Deleting {
				o += " (terminating)"
			}
			others = append(others, o)
		}
		nodes[p.Node] = true
		concerns = append(concerns, finding.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	sev := finding.Critical
	why := "traffic for either may reach the other"
	if live < 2 {
		sev = finding.Warning
		why = "all but one are terminating: it ends when they are gone (or has ended, if their sandboxes are torn down)"
	}
	where := "on one node"
	if len(nodes) > 1 {
		where = fmt.Sprintf("on %d nodes", len(nodes))
	}
	ev := map[string]any{
		"holders":     holders,
		"others":      strings.Join(others, ", "),
		"live":        live,
		"nodes":       len(nodes),
		"newest_pod":  newest.Ref().String(),
		"newest_uid":  newest.UID,
		"newest_node": newest.Node,
	}
	if t := newest.Since(); !t.IsZero() {
		ev["newest_since"] = t.UTC().Format(time.RFC3339)
	}
	addr := ip.String()
	if len(written) > 0 {
		ev["written_as"] = strings.Join(written, ", ")
		addr += " (" + strings.Join(written, ", ") + ")"
	}
	return finding.Finding{
		Rule:     DuplicatePodIPID,
		Severity: sev,
		Message: fmt.Sprintf("IP %s is held by %d pods %s: %s; %s",
			addr, len(ps), where, strings.Join(described, ", "), why),
		Subject: finding.Subject{
			IP:        ip.String(),
			Namespace: newest.Namespace,
			Pod:       newest.Ref().String(),
			Node:      newest.Node,
		},
		Evidence: ev,
		Concerns: concerns,
	}
}

// Holder is one pod holding a duplicated IP, as the finding's evidence
// lists them, oldest first.
type Holder struct {
	Pod         string `json:"pod"`
	UID         string `json:"uid,omitempty"`
	Node        string `json:"node,omitempty"`
	Started     string `json:"started,omitempty"`
	Terminating bool   `json:"terminating,omitempty"`
	// WrittenAs is the address as the pod's status wrote it, when that is
	// another form of it: "::ffff:10.0.0.5" for 10.0.0.5.
	WrittenAs string `json:"written_as,omitempty"`
	// Newest is true for the pod that got the IP last: the finding's
	// subject, the one to delete.
	Newest bool `json:"newest,omitempty"`
}

// describeHolder names a pod holding a duplicated IP: "ns/name on node
// (started T)", "terminating" when it is.
func describeHolder(p *snapshot.Pod) string {
	s := p.Ref().String()
	if p.Node != "" {
		s += " on " + p.Node
	}
	if t := p.Since(); !t.IsZero() {
		s += " (started " + t.UTC().Format(time.RFC3339)
		if p.Deleting {
			s += ", terminating"
		}
		s += ")"
	} else if p.Deleting {
		s += " (terminating)"
	}
	return s
}
