package rule

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ipamLedgers are the IPAM ledgers ipam-unbooked-ip and ipam-leaked-ip
// judge: host-local's store on each node, read by the agent, and Calico's
// datastore, read by the controller. A scan judges both when it has them.
var ipamLedgers = []Ledger{{Source: "hostlocal", Scope: ScopeNode}, {Source: "calico", Scope: ScopeCluster}}

// hostLocalNet is what the host-local rules know of one network on the
// node: its ledger, the ranges it allocates from, and where its next
// allocation in each range set will land.
type hostLocalNet struct {
	n *snapshot.HostLocalNetwork
	// sets are the range sets: the configuration's, or one per pod CIDR of
	// the Node when no configuration names the network.
	sets []snapshot.RangeSet
	// fromPodCIDRs is true when sets come from the Node's pod CIDRs.
	fromPodCIDRs bool
	reserved     map[netip.Addr]*snapshot.Reservation
	// next is, per range set, the address host-local's next ADD returns
	// (invalid when the set is full).
	next []netip.Addr
}

// hostLocalView is the node's host-local networks and its live pods.
type hostLocalView struct {
	nets []hostLocalNet
	// pods are the pods of this node that hold pod-network IPs, by IP.
	pods map[netip.Addr][]*snapshot.Pod
	// holders are every pod of the cluster that holds a pod-network IP.
	holders map[netip.Addr][]*snapshot.Pod
	node    *snapshot.Node
	cached  []snapshot.CachedResult
}

// newHostLocalView builds the view of s, or returns nil when s has no
// host-local ledger or its node is not among the cluster objects (then no
// pod can be tied to the node, and no verdict is possible).
func newHostLocalView(s *snapshot.Snapshot) *hostLocalView {
	if s.HostLocal == nil || s.Kube == nil || !ready(s, "hostlocal") {
		return nil
	}
	v := &hostLocalView{pods: map[netip.Addr][]*snapshot.Pod{}}
	for i := range s.Kube.Nodes {
		if s.Kube.Nodes[i].Name == s.NodeName {
			v.node = &s.Kube.Nodes[i]
		}
	}
	if v.node == nil && len(s.Kube.Nodes) == 0 && slices.ContainsFunc(s.Kube.Pods, func(p snapshot.Pod) bool { return p.Node == s.NodeName }) {
		// No Node was given (a dump of pods alone): the pods bound to the
		// node tie it to the store; a store no configuration names has no
		// ranges to judge.
		v.node = &snapshot.Node{Name: s.NodeName}
	}
	if v.node == nil {
		return nil
	}
	v.cached = s.HostLocal.Cached
	v.holders = podsByIP(s.Kube.Pods)
	for a, ps := range v.holders {
		for _, p := range ps {
			if p.Node == s.NodeName {
				v.pods[a] = append(v.pods[a], p)
			}
		}
	}
	for i := range s.HostLocal.Networks {
		n := &s.HostLocal.Networks[i]
		if n.Unjudged != "" {
			// A leftover store: its reservations say nothing of the
			// pods running now.
			continue
		}
		hn := hostLocalNet{n: n, sets: n.RangeSets, reserved: map[netip.Addr]*snapshot.Reservation{}}
		if hn.sets == nil {
			for _, c := range v.node.PodCIDRs {
				if r, ok := snapshot.DefaultRange(c); ok {
					hn.sets = append(hn.sets, snapshot.RangeSet{r})
				}
			}
			hn.fromPodCIDRs = hn.sets != nil
		}
		for j := range n.Reservations {
			hn.reserved[n.Reservations[j].IP] = &n.Reservations[j]
		}
		for j, rs := range hn.sets {
			hn.next = append(hn.next, nextAllocation(rs, n.LastReserved[j], hn.reserved))
		}
		v.nets = append(v.nets, hn)
	}
	return v
}

// nextAllocation is the address host-local's next ADD takes from range set
// rs: it starts right after last when last lies in the set, else at the
// first range's start; walks up, from one range's end to the next range's
// start and from the last range back to the first; skips each range's
// gateway and every reserved address; and takes the first other. The
// invalid address means the set is full. The walk visits at most one
// address more than there are reservations and gateways.
func nextAllocation(rs snapshot.RangeSet, last netip.Addr, reserved map[netip.Addr]*snapshot.Reservation) netip.Addr {
	if len(rs) == 0 {
		return netip.Addr{}
	}
	ri, cur := 0, rs[0].Start
	step := func() {
		if cur == rs[ri].End || !cur.Next().IsValid() {
			ri = (ri + 1) % len(rs)
			cur = rs[ri].Start
			return
		}
		cur = cur.Next()
	}
	if last.IsValid() {
		for i, r := range rs {
			if r.Contains(last) {
				ri, cur = i, last
				step()
				break
			}
		}
	}
	startRI, start := ri, cur
	for {
		if cur != rs[ri].Gateway && reserved[cur] == nil {
			return cur
		}
		step()
		if ri == startRI && cur == start {
			return netip.Addr{}
		}
	}
}

// setOf returns the index of the range set of hn that holds a, or -1.
func (hn *hostLocalNet) setOf(a netip.Addr) int {
	for i, rs := range hn.sets {
		if rs.Contains(a) {
			return i
		}
	}
	return -1
}

// IPAMUnbookedIPID is the stable ID of the ipam-unbooked-ip rule.
const IPAMUnbookedIPID = "ipam-unbooked-ip"

// IPAMUnbookedIP finds running pods whose IP the IPAM ledger does not
// record: on a node whose CNI allocates with host-local, a pod of this node
// whose IP lies in a host-local network's ranges and has no reservation
// file there. host-local hands out any address without a file: the IP
// will be given to another pod while this one runs (seed 003). The finding
// says which address the next ADD in that range set returns and whether a
// running pod holds it: critical when it is this pod's (the next pod
// started on the node gets its IP), a warning otherwise (it comes when the
// walk reaches it).
//
// Terminating pods are left out: host-local's DEL may already have removed
// their file. The ranges are the CNI configuration's; when no
// configuration names the network (flannel keeps its own), the Node's pod
// CIDRs.
type IPAMUnbookedIP struct{}

// KubeKinds says the rule reads Pods (snapshot.KindReader), and the node's
// Node when there are Nodes: its pod CIDRs are the ranges of a store no
// configuration names.
func (*IPAMUnbookedIP) KubeKinds() []string { return []string{"Pod"} }

// Info describes the rule.
func (*IPAMUnbookedIP) Info() Info {
	return Info{
		ID:      IPAMUnbookedIPID,
		Sources: []string{"kube"},
		Ledgers: ipamLedgers,
		Columns: []string{"ip", "pod", "node"},
		Detail: func(f finding.Finding) string {
			if f.Evidence["ledger"] == "calico" {
				return calicoUnbookedDetail(f)
			}
			if f.Evidence["next_allocation"] == f.Subject.IP {
				return fmt.Sprintf("no reservation in %v; the next ADD on the node returns it", f.Evidence["store"])
			}
			return fmt.Sprintf("no reservation in %v; the next ADD returns %v", f.Evidence["store"], f.Evidence["next_allocation"])
		},
		Summary: "a running pod's IP is missing from the IPAM ledger: the next allocations on its node will hand it to a second pod",
		Fix:     "host-local: cordon the node, then write the pod's reservation back under host-local's lock (the agent's --remedy=hostlocal-reserve does it); Calico: re-create the pod so that it is booked, before Calico hands its address out",
		Runbook: "docs/runbooks/ipam-unbooked-ip.md",
		Remedy: &RemedyInfo{
			ID:     HostLocalReserveID,
			Action: "write the missing host-local reservation of a running pod, for the sandbox the runtime's CNI result cache names, under host-local's lock and never over an existing file",
			Verb:   "write",
			Past:   "wrote",
			Target: finding.ReservationKind,
			Ledger: "hostlocal",
			Events: RemedyEvents{Done: "ReservationRestored", DryRun: "ReservationRestoreDryRun",
				Refused: "ReservationRestoreRefused", Failed: "ReservationRestoreFailed"},
			Counter: &Counter{Name: "hostlocal_reservations_written_total",
				Help: "host-local reservations the agent wrote back, by the rule that named them."},
		},
	}
}

// HostLocalReserveID is the ID of ipam-unbooked-ip's remedy.
const HostLocalReserveID = "hostlocal-reserve"

// RecheckQuery names what proves the finding still holds: the pods that
// hold its IP, and its node (rule.Rechecker).
func (*IPAMUnbookedIP) RecheckQuery(s *snapshot.Snapshot, f finding.Finding) snapshot.Query {
	t, ok := f.Target.(*finding.ReservationTarget)
	if !ok {
		return snapshot.Query{}
	}
	return snapshot.Query{PodIPs: []netip.Addr{t.IP}, Nodes: []string{s.NodeName}}
}

// Recheck confirms on a quorum read that the pod the reservation is for
// still exists (same UID), runs on this node, holds the IP, and is the
// only pod that does; the store itself is re-read by the actuator under
// host-local's lock.
func (*IPAMUnbookedIP) Recheck(fresh *snapshot.Snapshot, fs []finding.Finding) []error {
	errs := make([]error, len(fs))
	for i, f := range fs {
		t, ok := f.Target.(*finding.ReservationTarget)
		switch {
		case !ok:
			errs[i] = errors.New("the finding names no host-local reservation")
			continue
		case fresh.Kube == nil:
			errs[i] = errors.New("no fresh view of the cluster")
			continue
		}
		var holders []*snapshot.Pod
		for j := range fresh.Kube.Pods {
			p := &fresh.Kube.Pods[j]
			if holdsPodIP(p) && p.HasIP(t.IP) {
				holders = append(holders, p)
			}
		}
		switch {
		case len(holders) == 0:
			errs[i] = fmt.Errorf("no pod holds %s any more", t.IP)
		case len(holders) > 1:
			errs[i] = fmt.Errorf("%d pods hold %s: a duplicate is repaired by deleting the newer pod, not by booking the address", len(holders), t.IP)
		case holders[0].UID != t.PodUID:
			errs[i] = fmt.Errorf("%s is held by pod %s (uid %s), not by the pod the reservation was for", t.IP, holders[0].Ref(), holders[0].UID)
		case holders[0].Node != fresh.NodeName:
			errs[i] = fmt.Errorf("pod %s runs on node %s, not on %s", holders[0].Ref(), holders[0].Node, fresh.NodeName)
		case holders[0].Deleting:
			errs[i] = fmt.Errorf("pod %s is terminating", holders[0].Ref())
		}
	}
	return errs
}

// Evaluate returns one finding per unbooked pod IP.
func (r *IPAMUnbookedIP) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	return append(r.hostLocal(s), unbookedCalico(s)...)
}

// hostLocal is the host-local part: the pods of this node against its
// store.
// HolderAddrs names the next allocations the rule's findings name: who
// holds one elsewhere is said (snapshot.HolderReader).
func (r *IPAMUnbookedIP) HolderAddrs(s *snapshot.Snapshot) []netip.Addr {
	var out []netip.Addr
	for _, f := range r.hostLocal(s) {
		if n, ok := f.Evidence["next_allocation"].(string); ok {
			if a, err := netip.ParseAddr(n); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

func (r *IPAMUnbookedIP) hostLocal(s *snapshot.Snapshot) []finding.Finding {
	v := newHostLocalView(s)
	if v == nil {
		return nil
	}
	var out []finding.Finding
	for i := range v.nets {
		hn := &v.nets[i]
		for _, a := range sortedAddrs(v.pods) {
			set := hn.setOf(a)
			if set < 0 || hn.reserved[a] != nil {
				continue
			}
			for _, p := range v.pods[a] {
				if p.Deleting {
					continue
				}
				out = append(out, unbooked(s, v, hn, set, a, p))
			}
		}
	}
	return out
}

func unbooked(s *snapshot.Snapshot, v *hostLocalView, hn *hostLocalNet, set int, a netip.Addr, p *snapshot.Pod) finding.Finding {
	next := hn.next[set]
	ev := map[string]any{
		"ledger":    "host-local",
		"network":   hn.n.Name,
		"store":     hn.n.Dir,
		"range_set": set,
		"ranges":    describeRanges(hn.sets[set]),
		"pod_uid":   p.UID,
	}
	if hn.n.Config != "" {
		ev["config"] = hn.n.Config
	}
	if hn.fromPodCIDRs {
		ev["ranges_from"] = "the Node's pod CIDRs (no CNI configuration names the network)"
	}
	if hn.n.Missing {
		ev["store_missing"] = true
	}
	last, hasLast := hn.n.LastReserved[set]
	if hasLast {
		ev["last_reserved_ip"] = last.String()
	}
	sev := finding.Warning
	var when string
	switch {
	case !next.IsValid():
		ev["next_allocation"] = "none: the range set is full"
		when = "the range set is full, so no ADD can take it now; one will after the next release"
	case next == a:
		sev = finding.Critical
		ev["next_allocation"] = next.String()
		when = fmt.Sprintf("the next pod started on node %s gets %s", s.NodeName, a)
	default:
		ev["next_allocation"] = next.String()
		when = fmt.Sprintf("the next ADD returns %s", next)
		if hs := v.holders[next]; len(hs) > 0 && s.Kube.KnowsHolders(next) {
			ev["next_allocation_holder"] = hs[0].Ref().String()
			when += fmt.Sprintf(", which pod %s holds too", hs[0].Ref())
		}
		when += fmt.Sprintf("; %s follows when the walk reaches it", a)
	}
	var target finding.Target
	if c, why := v.sandboxOf(hn, a, p); c != nil {
		ev["container_id"] = c.ContainerID
		ev["container_id_from"] = c.File
		target = &finding.ReservationTarget{Store: hn.n.Dir, IP: a, ContainerID: c.ContainerID, IfName: c.IfName,
			Pod: p.Ref(), PodUID: p.UID}
	} else {
		ev["container_id"] = "unknown: " + why
	}
	from := "from the range start"
	if hasLast && hn.sets[set].Contains(last) {
		from = "after last_reserved_ip " + last.String()
	}
	return finding.Finding{
		Rule:     IPAMUnbookedIPID,
		Severity: sev,
		Message: fmt.Sprintf("pod %s holds %s, but host-local's network %s on node %s has no reservation for it (%s): %s (allocation starts %s)",
			p.Ref(), a, hn.n.Name, s.NodeName, hn.n.Dir, when, from),
		Subject: finding.Subject{
			IP:        a.String(),
			Namespace: p.Namespace,
			Pod:       p.Ref().String(),
			Node:      s.NodeName,
		},
		Evidence: ev,
		Concerns: []finding.ObjectRef{{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}, {Kind: "Node", Name: s.NodeName}},
		Target:   target,
	}
}

// sandboxOf returns the runtime's cached ADD result that gave a to pod p on
// network hn: the sandbox whose reservation is missing. The API does not
// name sandboxes; the cache does, with the pod's namespace and name (and
// UID, when the runtime passes it) in the arguments of the ADD. Several
// sandboxes, or none, and the reason is returned instead.
func (v *hostLocalView) sandboxOf(hn *hostLocalNet, a netip.Addr, p *snapshot.Pod) (*snapshot.CachedResult, string) {
	var found *snapshot.CachedResult
	for i := range v.cached {
		c := &v.cached[i]
		if c.Network != hn.n.Name || !slices.Contains(c.IPs, a) || c.PodNamespace != p.Namespace || c.PodName != p.Name ||
			(c.PodUID != "" && c.PodUID != p.UID) {
			continue
		}
		if found != nil && (found.ContainerID != c.ContainerID || found.IfName != c.IfName) {
			return nil, fmt.Sprintf("%s and %s both name pod %s with %s", found.File, c.File, p.Ref(), a)
		}
		found = c
	}
	if found == nil {
		return nil, fmt.Sprintf("no cached ADD result in %s names pod %s with %s", "/var/lib/cni/results", p.Ref(), a)
	}
	return found, ""
}

func describeRanges(rs snapshot.RangeSet) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s-%s (subnet %s, gateway %s)", r.Start, r.End, r.Subnet, r.Gateway))
	}
	return out
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// IPAMLeakedIPID is the stable ID of the ipam-leaked-ip rule.
const IPAMLeakedIPID = "ipam-leaked-ip"

// LeakMinAge is how old a reservation must be before it counts as leaked:
// between host-local's ADD and the pod's IP reaching the API server, a
// fresh file has no pod yet.
const LeakMinAge = 2 * time.Minute

// IPAMLeakedIP finds addresses the IPAM ledger keeps for no pod: a
// host-local reservation on this node whose IP no pod of the node holds
// (its DEL never ran, or a wiped store was restored from a backup). A
// leaked address is never handed out again until it is freed: the range
// shrinks, and a full range fails every new pod on the node. Reservations
// younger than LeakMinAge are left alone.
type IPAMLeakedIP struct{}

// KubeKinds says the rule reads Pods (snapshot.KindReader), and the node's
// Node when there are Nodes.
func (*IPAMLeakedIP) KubeKinds() []string { return []string{"Pod"} }

// Info describes the rule.
func (*IPAMLeakedIP) Info() Info {
	return Info{
		ID:      IPAMLeakedIPID,
		Sources: []string{"kube"},
		Ledgers: ipamLedgers,
		Columns: []string{"ip", "node"},
		Detail: func(f finding.Finding) string {
			if f.Evidence["ledger"] == "calico" {
				if f.Subject.IP == "" {
					return fmt.Sprintf("handle %v holds no address", f.Evidence["handle"])
				}
				return fmt.Sprintf("booked for %v, no pod holds it", f.Evidence["booked_for"])
			}
			return fmt.Sprintf("reserved for container %v, no pod holds it", f.Evidence["container_id"])
		},
		Summary: "the IPAM ledger keeps an address for no pod: it is never handed out again, and a range full of leaks fails new pods",
		Fix:     "check that no container holds it (crictl ps -a), then release it: host-local, remove the reservation file under its lock; Calico, calicoctl ipam release",
		Runbook: "docs/runbooks/ipam-leaked-ip.md",
	}
}

// Evaluate returns one finding per leaked reservation.
func (r *IPAMLeakedIP) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	return append(r.hostLocal(s), leakedCalico(s)...)
}

// HolderAddrs names the addresses of the reservations the rule reports:
// who holds one elsewhere is said (snapshot.HolderReader).
func (r *IPAMLeakedIP) HolderAddrs(s *snapshot.Snapshot) []netip.Addr {
	var out []netip.Addr
	for _, f := range r.hostLocal(s) {
		if a, err := netip.ParseAddr(f.Subject.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// hostLocal is the host-local part: the node's store against its pods.
func (r *IPAMLeakedIP) hostLocal(s *snapshot.Snapshot) []finding.Finding {
	v := newHostLocalView(s)
	if v == nil {
		return nil
	}
	var out []finding.Finding
	for i := range v.nets {
		hn := &v.nets[i]
		for j := range hn.n.Reservations {
			res := &hn.n.Reservations[j]
			if len(v.pods[res.IP]) > 0 {
				continue
			}
			age := s.Taken.Sub(res.Modified)
			if !res.Modified.IsZero() && age < LeakMinAge {
				continue
			}
			ev := map[string]any{
				"ledger":       "host-local",
				"network":      hn.n.Name,
				"store":        hn.n.Dir,
				"file":         hn.n.Dir + "/" + res.IP.String(),
				"container_id": res.ContainerID,
				"reserved_at":  res.Modified.UTC().Format(time.RFC3339),
			}
			why := "no pod of the node holds it"
			if hs := v.holders[res.IP]; len(hs) > 0 && s.Kube.KnowsHolders(res.IP) {
				ev["held_elsewhere_by"] = hs[0].Ref().String()
				why = fmt.Sprintf("no pod of the node holds it (pod %s on node %s does: the ledgers disagree)", hs[0].Ref(), hs[0].Node)
			}
			out = append(out, finding.Finding{
				Rule:     IPAMLeakedIPID,
				Severity: finding.Info,
				Message: fmt.Sprintf("host-local's network %s on node %s keeps %s for container %s since %s, and %s",
					hn.n.Name, s.NodeName, res.IP, orNone(res.ContainerID), res.Modified.UTC().Format(time.RFC3339), why),
				Subject:  finding.Subject{IP: res.IP.String(), Node: s.NodeName},
				Evidence: ev,
				Concerns: []finding.ObjectRef{{Kind: "Node", Name: s.NodeName}},
			})
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
