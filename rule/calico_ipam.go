package rule

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// calicoView is what the Calico parts of the IPAM rules know of the
// cluster: Calico's ledger indexed by address, and the pods and nodes it
// is judged against.
//
// The verdicts follow calico-kube-controllers' leak collector
// (kube-controllers/pkg/controllers/node/ipam.go, allocationIsValid), since
// it is what frees addresses: an allocation naming a pod is valid while
// that pod (by namespace and name) exists on the allocation's node and
// either has no IP yet or has the allocation's; a node's tunnel address
// while its node exists; an allocation with no pod attributes always.
type calicoView struct {
	c *snapshot.Calico
	// holders are the pods that hold each pod-network IP.
	holders map[netip.Addr][]*snapshot.Pod
	// pods are the pods by namespace/name, finished ones included: the
	// collector asks for the pod an allocation names, whatever its phase.
	pods  map[snapshot.ObjectRef]*snapshot.Pod
	nodes map[string]bool
	// allocs are the allocations of the blocks not marked deleted, by
	// address; more holds the others of an address two blocks allocate.
	allocs map[netip.Addr]calicoAlloc
	more   map[netip.Addr][]calicoAlloc
	// blocks are the blocks not marked deleted, by CIDR; bits are the
	// prefix lengths of those CIDRs.
	blocks map[netip.Prefix]*snapshot.IPAMBlock
	bits   []int
	grace  time.Duration
}

type calicoAlloc struct {
	b *snapshot.IPAMBlock
	a *snapshot.Allocation
}

// calicoViewOf returns the view of s, or nil when s has no Calico ledger
// ready: built once per pass, shared by the Calico rules of that pass
// (snapshot.Derive), so a pass over a large cluster indexes its pods and
// allocations once.
func calicoViewOf(s *snapshot.Snapshot) *calicoView {
	if s.Kube == nil || s.Calico == nil || !ready(s, "calico") {
		return nil
	}
	return snapshot.Derive(s, calicoViewKey{s.Kube, s.Calico}, func() *calicoView { return newCalicoView(s) })
}

// calicoViewKey names the view of one snapshot's cluster objects and
// Calico ledger.
type calicoViewKey struct {
	kube   *snapshot.Kube
	calico *snapshot.Calico
}

func newCalicoView(s *snapshot.Snapshot) *calicoView {
	v := &calicoView{
		c:       s.Calico,
		holders: podsByIP(s.Kube.Pods),
		pods:    make(map[snapshot.ObjectRef]*snapshot.Pod, len(s.Kube.Pods)),
		nodes:   make(map[string]bool, len(s.Kube.Nodes)),
		blocks:  make(map[netip.Prefix]*snapshot.IPAMBlock, len(s.Calico.Blocks)),
		grace:   s.Calico.LeakGracePeriod(),
	}
	for i := range s.Kube.Pods {
		p := &s.Kube.Pods[i]
		v.pods[p.Ref()] = p
	}
	for _, n := range s.Kube.Nodes {
		v.nodes[n.Name] = true
	}
	n := 0
	for i := range s.Calico.Blocks {
		n += len(s.Calico.Blocks[i].Allocations)
	}
	v.allocs = make(map[netip.Addr]calicoAlloc, n)
	for i := range s.Calico.Blocks {
		b := &s.Calico.Blocks[i]
		if b.Deleted {
			continue
		}
		if b.CIDR.IsValid() {
			v.blocks[b.CIDR.Masked()] = b
			if !slices.Contains(v.bits, b.CIDR.Bits()) {
				v.bits = append(v.bits, b.CIDR.Bits())
			}
		}
		for j := range b.Allocations {
			a := &b.Allocations[j]
			if !a.IP.IsValid() {
				continue
			}
			if _, dup := v.allocs[a.IP]; dup {
				if v.more == nil {
					v.more = map[netip.Addr][]calicoAlloc{}
				}
				v.more[a.IP] = append(v.more[a.IP], calicoAlloc{b, a})
				continue
			}
			v.allocs[a.IP] = calicoAlloc{b, a}
		}
	}
	return v
}

// allocsOf returns the allocations of ip.
func (v *calicoView) allocsOf(ip netip.Addr) []calicoAlloc {
	a, ok := v.allocs[ip]
	if !ok {
		return nil
	}
	return append([]calicoAlloc{a}, v.more[ip]...)
}

// blockOf returns the block that holds ip, or nil.
func (v *calicoView) blockOf(ip netip.Addr) *snapshot.IPAMBlock {
	for _, bits := range v.bits {
		if p, err := ip.Prefix(bits); err == nil {
			if b := v.blocks[p]; b != nil {
				return b
			}
		}
	}
	return nil
}

// poolOf returns the pool that holds ip, preferring an enabled one, or nil.
func (v *calicoView) poolOf(ip netip.Addr) *snapshot.IPPool {
	var found *snapshot.IPPool
	for i := range v.c.Pools {
		p := &v.c.Pools[i]
		if p.CIDR.IsValid() && p.CIDR.Contains(ip) {
			if !p.Disabled {
				return p
			}
			found = p
		}
	}
	return found
}

// isPodAllocation reports whether a names a pod, as the collector reads
// it: namespace and pod attributes, and not a node's tunnel address.
func isPodAllocation(a *snapshot.Allocation) bool {
	return a.Type == "" && a.Namespace != "" && a.Pod != "" && a.HandleID != snapshot.WindowsReservedHandle
}

// ownedBy reports whether a is p's as the collector reads it: by namespace
// and name.
func ownedBy(a *snapshot.Allocation, p *snapshot.Pod) bool {
	return isPodAllocation(a) && a.Namespace == p.Namespace && a.Pod == p.Name
}

// bookingSkew is how much earlier than a pod's creation an allocation may
// be stamped and still be that pod's: the CNI plugin stamps it with its
// node's clock, the API server the pod with its own.
const bookingSkew = time.Minute

// predates reports whether a was booked before p existed: then it is an
// earlier pod's of the same name (a StatefulSet's), whatever its name says.
func predates(a *snapshot.Allocation, p *snapshot.Pod) bool {
	return !a.Timestamp.IsZero() && !p.Created.IsZero() && a.Timestamp.Before(p.Created.Add(-bookingSkew))
}

// freedBy says when the leak collector frees an allocation it judges a
// leak: at once when its node is gone, after the grace period when it
// exists, never when the grace is 0.
func (v *calicoView) freedBy(node string) string {
	switch {
	case node == "" || !v.nodes[node]:
		return "the leak collector frees it at its next scan: its node is gone"
	case v.grace == 0:
		return "the leak collector frees no allocation of a live node (leakGracePeriod 0)"
	default:
		return fmt.Sprintf("the leak collector frees it once it has held it for a leak for leakGracePeriod (%s)", v.grace)
	}
}

// allocNode is the node an allocation is booked under, as the collector
// reads it: secondary.node, else the block's affinity.
func allocNode(b *snapshot.IPAMBlock, a *snapshot.Allocation) string {
	if a.Node != "" {
		return a.Node
	}
	return b.Affinity
}

// unbookedCalico returns the Calico part of ipam-unbooked-ip: for each
// live pod's IP, whether Calico's ledger keeps it for that pod. Node
// mismatches of the pod's own allocation are ipam-misbooked's; an address
// two live pods hold is duplicate-pod-ip's.
func unbookedCalico(s *snapshot.Snapshot) []finding.Finding {
	v := calicoViewOf(s)
	if v == nil {
		return nil
	}
	var out []finding.Finding
	for ip, ps := range v.holders {
		if len(ps) != 1 {
			continue
		}
		if f, ok := v.unbooked(ps[0], ip); ok {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b finding.Finding) int {
		return netip.MustParseAddr(a.Subject.IP).Compare(netip.MustParseAddr(b.Subject.IP))
	})
	return out
}

// unbooked judges one pod's IP against the ledger.
func (v *calicoView) unbooked(p *snapshot.Pod, ip netip.Addr) (finding.Finding, bool) {
	if a, ok := v.allocs[ip]; ok && v.more[ip] == nil && ownedBy(a.a, p) {
		// The common case, decided without allocating.
		return finding.Finding{}, false
	}
	ev := map[string]any{"ledger": "calico"}
	allocs := v.allocsOf(ip)
	var sev finding.Severity
	var why string
	if len(allocs) == 0 {
		b := v.blockOf(ip)
		pool := v.poolOf(ip)
		if pool != nil {
			ev["pool"] = pool.Name
		}
		switch {
		case b != nil:
			ev["block"] = b.Name
			if b.Affinity != "" {
				ev["block_node"] = b.Affinity
			}
			ord := snapshot.BlockOrdinal(b.CIDR, ip)
			ev["ordinal"] = ord
			switch {
			case slices.ContainsFunc(b.Cooldown, func(c snapshot.Cooldown) bool { return c.Ordinal == ord }):
				sev = finding.Warning
				why = fmt.Sprintf("block %s holds it in cooldown, released: Calico hands it to another pod once the cooldown ends", b.Name)
			case slices.Contains(b.Free, ord):
				pos := slices.Index(b.Free, ord)
				ev["free_position"] = pos + 1
				ev["next_free"] = snapshot.BlockAddr(b.CIDR, b.Free[0]).String()
				if pool != nil && pool.Disabled {
					sev = finding.Warning
					why = fmt.Sprintf("block %s lists it as free (pool %s is disabled: no new address is taken from it until it is enabled again)", b.Name, pool.Name)
					break
				}
				sev = finding.Critical
				where := "the block"
				if b.Affinity != "" {
					where = "node " + b.Affinity + "'s block"
				}
				if pos == 0 {
					why = fmt.Sprintf("block %s lists it as free, first: the next address taken from %s is this one", b.Name, where)
				} else {
					why = fmt.Sprintf("block %s lists it as free, %s in line: the %s address taken from %s is this one", b.Name, ordinal(pos+1), ordinal(pos+1), where)
				}
			default:
				// Neither allocated, free nor cooling: the block's
				// lists disagree, which its Malformed says.
				sev = finding.Warning
				why = fmt.Sprintf("block %s neither allocates nor lists it as free (the block is malformed)", b.Name)
			}
		case pool != nil && !pool.Disabled:
			sev = finding.Warning
			why = fmt.Sprintf("it lies in pool %s, in no block yet: the node that claims its block hands it out", pool.Name)
		case pool != nil:
			sev = finding.Info
			why = fmt.Sprintf("it lies in pool %s, which is disabled, in no block: Calico hands it out only if the pool is enabled again", pool.Name)
		default:
			// Not Calico's: another IPAM gave it (a secondary network,
			// a node outside Calico). calicoctl ipam check counts it.
			sev = finding.Info
			why = "it lies in no IP pool: Calico did not give it and will not give it out; another IPAM did"
		}
		ev["calicoctl"] = calicoctlCount(pool)
		return v.unbookedFinding(p, ip, sev, "Calico has no allocation for it: "+why, ev), true
	}
	for _, ca := range allocs {
		if ownedBy(ca.a, p) {
			// The pod's own, as the collector reads it (by name):
			// judged by ipam-misbooked if the node differs.
			return finding.Finding{}, false
		}
	}
	// Booked, but for another owner: whether the collector keeps it.
	ca := allocs[0]
	b, a := ca.b, ca.a
	ev["block"], ev["ordinal"], ev["handle"] = b.Name, a.Ordinal, a.HandleID
	node := allocNode(b, a)
	switch {
	case a.Type != "":
		ev["booked_type"] = a.Type
		sev = finding.Critical
		why = fmt.Sprintf("Calico booked it as node %s's %s: the node's tunnel device and the pod share it", node, a.Type)
	case !isPodAllocation(a):
		// No pod attributes: the collector keeps it for an owner it
		// cannot check. Nothing hands it out again.
		return finding.Finding{}, false
	default:
		other := snapshot.ObjectRef{Namespace: a.Namespace, Name: a.Pod}
		ev["booked_for"] = other.String()
		q := v.pods[other]
		sev = finding.Critical
		switch {
		case q == nil:
			why = fmt.Sprintf("Calico booked it for pod %s, which no longer exists: %s, and Calico hands it to another pod", other, v.freedBy(node))
		case predates(a, q):
			why = fmt.Sprintf("Calico booked it for an earlier pod named %s (booked %s, before the pod was created): it stays booked only until that name's pod reports an IP", other, a.Timestamp.UTC().Format(time.RFC3339))
		case len(q.IPs) == 0 && !q.Terminal():
			why = fmt.Sprintf("Calico booked it for pod %s, which has no IP yet: that pod's sandbox is being given this address", other)
		case q.HasIP(ip) && holdsPodIP(q):
			// Two holders: duplicate-pod-ip says it.
			return finding.Finding{}, false
		default:
			why = fmt.Sprintf("Calico booked it for pod %s, which holds other addresses or has finished: %s, and Calico hands it to another pod", other, v.freedBy(node))
		}
	}
	return v.unbookedFinding(p, ip, sev, "Calico keeps it for another owner: "+why, ev), true
}

// calicoctlCount says under which count calicoctl ipam check reports an
// address in use with no allocation.
func calicoctlCount(pool *snapshot.IPPool) string {
	if pool != nil && !pool.Disabled {
		return "in use in an active pool with no allocation"
	}
	return "in use outside any active pool"
}

func (v *calicoView) unbookedFinding(p *snapshot.Pod, ip netip.Addr, sev finding.Severity, why string, ev map[string]any) finding.Finding {
	ev["pod_uid"] = p.UID
	ev["pod_node"] = p.Node
	// ghostwatch never writes Calico's datastore: re-created, the pod
	// gets an address Calico books for it.
	ev["re_create"] = fmt.Sprintf("kubectl delete pod -n %s %s", p.Namespace, p.Name)
	if !p.Since().IsZero() {
		ev["pod_since"] = p.Since().UTC().Format(time.RFC3339)
	}
	return finding.Finding{
		Rule:     IPAMUnbookedIPID,
		Severity: sev,
		Message:  fmt.Sprintf("pod %s on node %s holds %s, but %s", p.Ref(), p.Node, ip, why),
		Subject:  finding.Subject{IP: ip.String(), Namespace: p.Namespace, Pod: p.Ref().String(), Node: p.Node},
		Evidence: ev,
		Concerns: []finding.ObjectRef{{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}},
	}
}

// leakedCalico returns the Calico part of ipam-leaked-ip: allocations of
// pods that no live pod holds, and handles no block allocates from.
//
// Where calicoctl ipam check counts a leak that is none, this does not:
// an allocation for a pod that exists and has no IP yet (its sandbox is
// starting), an allocation without pod attributes (the collector keeps
// it for an owner it cannot check; so does this), a node's tunnel
// addresses (calicoctl does not know IPv6 VXLAN ones, and counts those of a
// deleted node, which the collector frees with the node).
func leakedCalico(s *snapshot.Snapshot) []finding.Finding {
	v := calicoViewOf(s)
	if v == nil {
		return nil
	}
	var out []finding.Finding
	used := map[string]bool{}
	for bi := range v.c.Blocks {
		b := &v.c.Blocks[bi]
		if b.Deleted {
			continue
		}
		for ai := range b.Allocations {
			a := &b.Allocations[ai]
			used[a.HandleID] = true
			if !a.IP.IsValid() || !isPodAllocation(a) || len(v.holders[a.IP]) > 0 {
				// Held by a live pod: in use, or ipam-unbooked-ip's
				// when the booking names another pod.
				continue
			}
			if !a.Timestamp.IsZero() && s.Taken.Sub(a.Timestamp) < LeakMinAge {
				continue
			}
			ref := snapshot.ObjectRef{Namespace: a.Namespace, Name: a.Pod}
			q := v.pods[ref]
			var state string
			switch {
			case q == nil:
				state = "which no longer exists"
			case predates(a, q):
				state = "booked before the pod of that name was created: an earlier pod's"
			case q.Terminal():
				state = "which has finished (its sandbox's DEL did not release it)"
			case len(q.IPs) == 0:
				// Its sandbox is starting: the pod reports the IP
				// once the CNI ADD returns.
				continue
			default:
				state = "which holds other addresses"
			}
			node := allocNode(b, a)
			when := v.freedBy(node)
			ev := map[string]any{
				"ledger": "calico", "block": b.Name, "ordinal": a.Ordinal, "handle": a.HandleID,
				"booked_for": ref.String(), "booked_node": node, "collector": when,
				"release": fmt.Sprintf("calicoctl ipam release --ip=%s", a.IP),
			}
			if !a.Timestamp.IsZero() {
				ev["booked_at"] = a.Timestamp.UTC().Format(time.RFC3339)
			}
			out = append(out, finding.Finding{
				Rule:     IPAMLeakedIPID,
				Severity: finding.Info,
				Message:  fmt.Sprintf("Calico keeps %s (block %s, handle %s) for pod %s, %s; no live pod holds it: %s", a.IP, b.Name, a.HandleID, ref, state, when),
				Subject:  finding.Subject{IP: a.IP.String(), Namespace: a.Namespace, Node: node},
				Evidence: ev,
			})
		}
	}
	for hi := range v.c.Handles {
		h := &v.c.Handles[hi]
		if h.Deleted || used[h.ID] {
			continue
		}
		var blocks []string
		for _, hb := range h.Blocks {
			if hb.Count > 0 {
				blocks = append(blocks, hb.CIDR.String())
			}
		}
		sort.Strings(blocks)
		msg := fmt.Sprintf("Calico's handle %s holds no address in any block", h.ID)
		if len(blocks) > 0 {
			msg += fmt.Sprintf(" though it counts addresses in %v", blocks)
		}
		out = append(out, finding.Finding{
			Rule:     IPAMLeakedIPID,
			Severity: finding.Info,
			Message:  msg + ": a leaked handle (calicoctl ipam check counts it); calicoctl ipam release --from-report removes it",
			Subject:  finding.Subject{},
			Evidence: map[string]any{"ledger": "calico", "handle": h.ID, "handle_object": h.Name, "counted_in": blocks},
		})
	}
	return out
}

// ordinal spells n as "2nd", "3rd", "11th".
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// calicoUnbookedDetail is a table's short reason for a Calico finding of
// ipam-unbooked-ip.
func calicoUnbookedDetail(f finding.Finding) string {
	switch {
	case f.Evidence["booked_type"] != nil:
		return fmt.Sprintf("booked as a node's %v", f.Evidence["booked_type"])
	case f.Evidence["booked_for"] != nil:
		return fmt.Sprintf("booked for %v", f.Evidence["booked_for"])
	case f.Evidence["free_position"] == 1:
		return fmt.Sprintf("no allocation; next free in %v", f.Evidence["block"])
	case f.Evidence["free_position"] != nil:
		return fmt.Sprintf("no allocation; free in %v, %s in line", f.Evidence["block"], ordinal(f.Evidence["free_position"].(int)))
	case f.Evidence["block"] != nil:
		return fmt.Sprintf("no allocation in %v", f.Evidence["block"])
	case f.Evidence["pool"] != nil:
		return fmt.Sprintf("no allocation; in pool %v, no block", f.Evidence["pool"])
	default:
		return "no allocation; in no IP pool"
	}
}
