package rule

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// GossipGhostMemberID is the stable ID of the gossip-ghost-member rule.
const GossipGhostMemberID = "gossip-ghost-member"

// GossipIPIdentityID is the stable ID of the gossip-ip-identity rule.
const GossipIPIdentityID = "gossip-ip-identity"

// GossipGhostMember finds gossip members that outlived their pod's claim
// on an address (seed 000):
//
//   - a failed, dead or left member shares its address with a live member:
//     the cluster keeps probing and reconnecting to the dead identity at
//     an address another member now holds;
//   - a failed or dead member's address is held by a live pod proven to be
//     another identity: the pod was created after the member went, or
//     after ghostwatch first read it listed, the clocks' measured offsets
//     allowed for;
//   - a suspect member shares its address and port with an alive one: the
//     old identity, not yet declared dead (memberlist's suspicion window);
//   - a live member's address is held by no pod and no node: its pod is
//     gone, and the cluster still counts it;
//   - a live member's address is held by a pod of another namespace than
//     the cluster's own: a foreign pod joined by inheriting an address
//     (memberlist#241).
//
// An address is never taken for an identity, and neither is a namespace:
// a pod at a gone member's address is another identity only when proven
// by the pod itself. A pod named as the member is (its name, or its UID
// in the member's name) is the member's own. A pod created after the
// member went, or after ghostwatch first read it listed, is not: its
// creation is on the API server's clock and the member's times on the
// view's or ghostwatch's own, so the proof holds only beyond the offsets
// measured between those clocks, and where one was not measured it is
// refused, and the finding says why (snapshot.Stamp.Before). A pod's
// startTime is on its node's clock, which nothing measures: no proof
// reads it.
type GossipGhostMember struct{}

// KubeKinds says the rule reads Pods (snapshot.KindReader). It reads the
// Nodes too when there are any: without them, a live member at an address
// no pod holds is not judged (it may run on a node, outside any pod).
func (*GossipGhostMember) KubeKinds() []string { return []string{"Pod"} }

// Info describes the rule.
func (*GossipGhostMember) Info() Info {
	return Info{
		ID:      GossipGhostMemberID,
		Sources: []string{"kube", "gossip"},
		Scope:   ScopeCluster,
		Columns: []string{"ip", "pod"},
		Detail: func(f finding.Finding) string {
			return fmt.Sprintf("%v: %v", f.Evidence["system"], f.Evidence["reason"])
		},
		Summary: "a gossip member outlived its pod's claim on its address: the cluster shuns or probes the pod that now holds it, or counts a member that is gone",
		Fix:     "force the ghost out (consul force-leave -prune, serf force-leave -prune), then give members names that are not their IPs and leave on SIGTERM (see the runbook)",
		Runbook: "docs/runbooks/gossip-ghost-member.md",
		Gauge: &Gauge{
			Name:   "gossip_ghost_members",
			Help:   "Ghost members of the gossip clusters read, by system, cluster (namespace/name, as the ghostwatch.io/gossip annotations group pods) and severity.",
			Labels: []string{"system", "cluster", "severity"},
			Values: func(f finding.Finding) []string {
				c, _ := f.Evidence["cluster"].(string)
				s, _ := f.Evidence["system"].(string)
				return []string{s, c, f.Severity.String()}
			},
		},
		Remedy: &RemedyInfo{
			ID:     GossipForceLeaveID,
			Action: "force a failed or left Consul or Serf member out of its cluster (force-leave with prune) when its pod is proven gone and a pod of another identity holds its address",
			Verb:   "force out",
			Past:   "forced out",
			Target: finding.MemberKind,
			Events: RemedyEvents{Done: "GossipMemberForcedOut", DryRun: "GossipForceLeaveDryRun",
				Refused: "GossipForceLeaveRefused", Failed: "GossipForceLeaveFailed"},
			Counter: &Counter{Name: "gossip_members_forced_out_total",
				Help: "Gossip members the controller forced out of their cluster, by the rule that named them."},
		},
	}
}

var _ Rechecker = (*GossipGhostMember)(nil)

// GossipForceLeaveID is the ID of the remedy of gossip-ghost-member.
const GossipForceLeaveID = "gossip-force-leave"

// stampResolution is that of the times Kubernetes and the member lists
// write: whole seconds, so a time read is up to a second early.
const stampResolution = time.Second

// Evaluate returns the ghost members of every view.
func (r *GossipGhostMember) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Kube == nil || s.Gossip == nil || len(s.Gossip.Views) == 0 {
		return nil
	}
	// Only the pods at the members' addresses: a cluster's members are
	// a few of its pods.
	addrs := map[netip.Addr]bool{}
	for _, v := range s.Gossip.Views {
		for _, m := range v.Members {
			addrs[m.Addr.Unmap()] = true
		}
	}
	holders := podsAt(s.Kube.Pods, addrs)
	nodeAddrs := map[netip.Addr]string{}
	for _, n := range s.Kube.Nodes {
		for _, a := range n.Addresses {
			nodeAddrs[a.Unmap()] = n.Name
		}
	}
	var out []finding.Finding
	// The members' Listed times are on the clock of whoever read the
	// views: views that carry the API server's clock as their reader
	// measured it (a bundle's, a leader's) are compared through it, not
	// through this reader's measure of its own clock.
	api := s.Kube.APIClock
	if s.Gossip.APIClock.Measured {
		api = s.Gossip.APIClock
	}
	for vi := range s.Gossip.Views {
		v := &s.Gossip.Views[vi]
		ns := clusterNamespace(v, holders)
		byAddr := map[netip.Addr][]*snapshot.GossipMember{}
		for i := range v.Members {
			m := &v.Members[i]
			byAddr[m.Addr] = append(byAddr[m.Addr], m)
		}
		addrs := make([]netip.Addr, 0, len(byAddr))
		for a := range byAddr {
			addrs = append(addrs, a)
		}
		slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
		for _, a := range addrs {
			ms := byAddr[a]
			pods := holders[a]
			var live, gone []*snapshot.GossipMember
			for _, m := range ms {
				if m.Gone() {
					gone = append(gone, m)
				} else {
					live = append(live, m)
				}
			}
			switch {
			case len(live) > 0 && len(gone) > 0:
				for _, g := range gone {
					// A left member is neither probed nor reconnected
					// to: it is only listed until forgotten (memberlist:
					// GossipToTheDeadTime; Serf: TombstoneTimeout, 24 h),
					// as after every graceful leave.
					sev := finding.Critical
					if g.Status == snapshot.MemberLeft {
						sev = finding.Info
					}
					f := ghost(v, a, sev, g, live[0], pods,
						fmt.Sprintf("%s (%s) and %s (%s) share %s: the cluster still keeps the %s identity at an address %s now holds",
							g.Name, g.Status, live[0].Name, live[0].Status, a, g.Status, live[0].Name))
					out = append(out, forceable(f, v, g, pods, api, ns))
				}
			case len(gone) > 0:
				for _, g := range gone {
					if g.Status == snapshot.MemberLeft {
						continue
					}
					targeted := false
					for _, p := range pods {
						id := identify(g, v, p, api)
						sev := finding.Critical
						switch {
						case id.other:
						case id.unmeasured && id.naive:
							// The times say another identity, but only
							// if two clocks nothing measured agree: said,
							// not claimed, and nothing is forced out.
							sev = finding.Warning
						default:
							continue
						}
						f := ghost(v, a, sev, g, nil, []*snapshot.Pod{p},
							fmt.Sprintf("%s is %s, and %s now holds %s (%s): the cluster probes and reconnects to %s at another identity's address",
								g.Name, g.Status, p.Ref(), a, id.why, g.Name))
						if sev != finding.Critical {
							f.Message = fmt.Sprintf("%s cluster (seen by %s): %s is %s, and %s now holds %s, which may be another identity (%s); not proven: %s",
								v.System, seenBy(v), g.Name, g.Status, p.Ref(), a, id.naiveWhy, id.why)
							f.Evidence["force_leave_withheld"] = "not proven another identity: " + id.why
							out = append(out, f)
							continue
						}
						// One target per member, on its first finding.
						if !targeted {
							f, targeted = forceable(f, v, g, pods, api, ns), true
						}
						out = append(out, f)
					}
				}
			}
			// Two live members on one address and port: only one
			// process can listen there, so a suspect one is the old
			// identity the cluster has not declared dead yet.
			for _, m := range live {
				if m.Status != snapshot.MemberSuspect {
					continue
				}
				for _, o := range live {
					if o != m && o.Port == m.Port && o.Status == snapshot.MemberAlive {
						out = append(out, ghost(v, a, finding.Warning, m, o, pods,
							fmt.Sprintf("%s (suspect) and %s (alive) share %s:%d, where only one can listen: %s is the old identity, about to be declared dead, and the cluster's probes for it reach %s",
								m.Name, o.Name, a, m.Port, m.Name, o.Name)))
						break
					}
				}
			}
			for _, m := range live {
				if len(pods) == 0 {
					if _, ok := nodeAddrs[a]; ok || m.Status == snapshot.MemberLeaving || len(s.Kube.Nodes) == 0 {
						continue
					}
					out = append(out, ghost(v, a, finding.Warning, m, nil, nil,
						fmt.Sprintf("%s is %s at %s, which no pod or node holds: its pod is gone and the cluster still counts it", m.Name, m.Status, a)))
					continue
				}
				for _, p := range pods {
					if ns != "" && p.Namespace != ns {
						out = append(out, ghost(v, a, finding.Critical, m, nil, []*snapshot.Pod{p},
							fmt.Sprintf("%s is %s at %s, which pod %s of namespace %s holds; the cluster's members are in %s: a foreign pod joined by inheriting an address (give the cluster a memberlist Label, or gossip encryption keys)",
								m.Name, m.Status, a, p.Ref(), p.Namespace, ns)))
					}
				}
			}
		}
	}
	return out
}

// clusterNamespace is the namespace most pods at the view's live members'
// addresses are in, when more than half are; "" otherwise.
func clusterNamespace(v *snapshot.GossipView, holders map[netip.Addr][]*snapshot.Pod) string {
	count := map[string]int{}
	n := 0
	for i := range v.Members {
		m := &v.Members[i]
		if m.Gone() {
			continue
		}
		for _, p := range holders[m.Addr] {
			count[p.Namespace]++
			n++
		}
	}
	for ns, c := range count {
		if 2*c > n {
			return ns
		}
	}
	return ""
}

// identity is what proves, or fails to prove, that a pod at a gone
// member's address is not the member's own.
type identity struct {
	// other is true when the pod is proven another identity; why says
	// how, or why it is not proven.
	other bool
	why   string
	// unmeasured is true when the proof needed a clock not measured;
	// naive then says whether the times, read as if the clocks agreed,
	// would have proven it (naiveWhy says how).
	unmeasured bool
	naive      bool
	naiveWhy   string
}

// identify says whether pod p is proven another identity than gone member
// g of view v, p's creation being on clock api. The proof rests on the pod
// itself: a pod named as g is (its name, or its UID within g's name) is
// g's own; otherwise p must have been created after g went (g.Since, on
// v's clock) or after ghostwatch first read g listed (g.Listed, on its
// own), the clocks' measured offsets allowed for.
func identify(g *snapshot.GossipMember, v *snapshot.GossipView, p *snapshot.Pod, api snapshot.Clock) identity {
	switch {
	case g.Name == p.Name:
		return identity{why: fmt.Sprintf("pod %s is named as %s is: its own", p.Ref(), g.Name)}
	case p.UID != "" && strings.Contains(g.Name, p.UID):
		return identity{why: fmt.Sprintf("%s's name holds the UID of pod %s: its own", g.Name, p.Ref())}
	case p.Created.IsZero():
		return identity{why: fmt.Sprintf("pod %s does not say when it was created", p.Ref())}
	}
	created := snapshot.Stamp{At: p.Created, Clock: api, Resolution: stampResolution}
	var went snapshot.Stamp
	var what string
	switch {
	case !g.Since.IsZero():
		clk := v.Clock
		if clk.Name == "" {
			clk.Name = "the view's"
		}
		went = snapshot.Stamp{At: g.Since, Clock: clk, Resolution: stampResolution}
		what = fmt.Sprintf("%s went %s at %s", g.Name, g.Status, g.Since.UTC().Format(time.RFC3339))
	case !g.Listed.IsZero():
		went = snapshot.Stamp{At: g.Listed, Clock: snapshot.ReaderClock}
		what = fmt.Sprintf("ghostwatch first read %s listed at %s", g.Name, g.Listed.UTC().Format(time.RFC3339))
	default:
		return identity{why: "the view does not say when " + g.Name + " went, and ghostwatch did not read it listed before the pod was created"}
	}
	at := p.Created.UTC().Format(time.RFC3339)
	if why := went.Comparable(created); why != "" {
		id := identity{why: fmt.Sprintf("pod %s was created at %s and %s, but %s: the two times cannot be compared", p.Ref(), at, what, why), unmeasured: true}
		if id.naive = g.Since.IsZero() && p.Created.After(g.Listed) || !g.Since.IsZero() && p.Created.After(g.Since); id.naive {
			id.naiveWhy = fmt.Sprintf("created %s, after %s", at, what)
		}
		return id
	}
	if went.Before(created) {
		return identity{other: true, why: fmt.Sprintf("created %s, after %s, beyond the clocks' measured offsets", at, what)}
	}
	clocks := api.String()
	if went.Clock != snapshot.ReaderClock {
		clocks += "; " + went.Clock.String()
	}
	return identity{why: fmt.Sprintf("pod %s was created at %s, not after %s by more than the clocks' measured offsets (%s)", p.Ref(), at, what, clocks)}
}

// forceable gives f the gone member g as a target to force out, when the
// force-leave is safe: g is a Consul or Serf member (memberlist has no
// force-leave), pods hold its address, and every one of them is proven
// another identity than g, so that g's own pod is gone. Otherwise the
// evidence says why ghostwatch will not force it out by itself.
func forceable(f finding.Finding, v *snapshot.GossipView, g *snapshot.GossipMember, pods []*snapshot.Pod, api snapshot.Clock, ns string) finding.Finding {
	if ns != "" {
		f.Evidence["cluster_namespace"] = ns
	}
	if v.System != "consul" && v.System != "serf" {
		return f
	}
	if v.Unread != "" {
		f.Evidence["force_leave_withheld"] = "the member list could not be read again: " + v.Unread
		return f
	}
	if why := ghostPodGone(g, v, pods, api); why != nil {
		f.Evidence["force_leave_withheld"] = why.Error()
		return f
	}
	f.Target = &finding.MemberTarget{System: v.System, Cluster: v.Cluster, From: v.From, Name: g.Name, Addr: g.Addr, Port: g.Port, Status: g.Status}
	return f
}

// ghostPodGone returns nil when pods, those holding gone member g's
// address, are all proven another identity than g (identify): g's own
// pod no longer holds the address. Otherwise it says why that is not
// proven.
func ghostPodGone(g *snapshot.GossipMember, v *snapshot.GossipView, pods []*snapshot.Pod, api snapshot.Clock) error {
	if len(pods) == 0 {
		return fmt.Errorf("no pod holds %s: nothing shows another identity there", g.Addr)
	}
	for _, p := range pods {
		if id := identify(g, v, p, api); !id.other {
			return fmt.Errorf("pod %s at %s may be %s's own: %s", p.Ref(), g.Addr, g.Name, id.why)
		}
	}
	return nil
}

// RecheckQuery names what to read afresh before forcing f's member out:
// the pods at its address, and its cluster's member list.
func (*GossipGhostMember) RecheckQuery(_ *snapshot.Snapshot, f finding.Finding) snapshot.Query {
	t, ok := f.Target.(*finding.MemberTarget)
	if !ok {
		return snapshot.Query{}
	}
	return snapshot.Query{PodIPs: []netip.Addr{t.Addr}, Gossip: []snapshot.GossipCluster{{System: t.System, Cluster: t.Cluster}}}
}

// Recheck holds each finding's member against fresh: its cluster's view
// read again (fresh.Gossip) and the pods at its address read from the API
// server (fresh.Kube). The member must still be listed gone at the same
// address and port, and every pod at the address must still be proven
// another identity, on the clocks as measured now.
func (*GossipGhostMember) Recheck(fresh *snapshot.Snapshot, fs []finding.Finding) []error {
	errs := make([]error, len(fs))
	for i, f := range fs {
		t, ok := f.Target.(*finding.MemberTarget)
		if !ok {
			errs[i] = fmt.Errorf("the finding names no gossip member")
			continue
		}
		errs[i] = recheckMember(fresh, t, f)
	}
	return errs
}

func recheckMember(fresh *snapshot.Snapshot, t *finding.MemberTarget, f finding.Finding) error {
	if fresh.Gossip == nil || fresh.Kube == nil {
		return fmt.Errorf("the cluster's member list and the pods were not read again")
	}
	var v *snapshot.GossipView
	for i := range fresh.Gossip.Views {
		if w := &fresh.Gossip.Views[i]; w.System == t.System && w.Cluster == t.Cluster {
			v = w
		}
	}
	if v == nil {
		return fmt.Errorf("the %s cluster %s was not read again", t.System, t.Cluster)
	}
	var m *snapshot.GossipMember
	for i := range v.Members {
		if v.Members[i].Name == t.Name {
			m = &v.Members[i]
		}
	}
	switch {
	case m == nil:
		return fmt.Errorf("%s no longer lists %s", seenBy(v), t.Name)
	case !m.Gone():
		return fmt.Errorf("%s lists %s %s again", seenBy(v), t.Name, m.Status)
	case m.Addr != t.Addr || m.Port != t.Port:
		return fmt.Errorf("%s lists %s at %s now, not %s", seenBy(v), t.Name, netip.AddrPortFrom(m.Addr, m.Port), netip.AddrPortFrom(t.Addr, t.Port))
	}
	return ghostPodGone(m, v, podsByIP(fresh.Kube.Pods)[t.Addr], fresh.Kube.APIClock)
}

func ghost(v *snapshot.GossipView, a netip.Addr, sev finding.Severity, m, other *snapshot.GossipMember, pods []*snapshot.Pod, reason string) finding.Finding {
	ev := map[string]any{
		"system": v.System, "view": v.From, "reason": reason,
		"member": m.Name, "member_state": m.Status, "member_port": int(m.Port),
	}
	if v.Local != "" {
		ev["seen_by"] = v.Local
	}
	if v.Cluster != "" {
		ev["cluster"] = v.Cluster
	}
	if v.Unread != "" {
		ev["view_unread"] = v.Unread
	}
	if !m.Listed.IsZero() {
		ev["member_listed"] = m.Listed.UTC().Format(time.RFC3339)
	}
	if !m.Since.IsZero() {
		ev["member_since"] = m.Since.UTC().Format(time.RFC3339)
	}
	if m.Incarnation != 0 {
		ev["member_incarnation"] = m.Incarnation
	}
	if other != nil {
		ev["other_member"], ev["other_state"] = other.Name, other.Status
	}
	sub := finding.Subject{IP: a.String()}
	var concerns []finding.ObjectRef
	for i, p := range pods {
		if i == 0 {
			sub.Pod, sub.Namespace, sub.Node = p.Ref().String(), p.Namespace, p.Node
			ev["pod_uid"] = p.UID
			if !p.Since().IsZero() {
				ev["pod_since"] = p.Since().UTC().Format(time.RFC3339)
			}
		}
		concerns = append(concerns, finding.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	// A live member would refute a force-leave: only a gone one is
	// forced out.
	switch {
	case !m.Gone():
	case v.System == "consul":
		ev["force_leave"] = "consul force-leave -prune " + text.ShellQuote(m.Name)
	case v.System == "serf":
		ev["force_leave"] = "serf force-leave -prune " + text.ShellQuote(m.Name)
	}
	return finding.Finding{
		Rule:     GossipGhostMemberID,
		Severity: sev,
		Message:  fmt.Sprintf("%s cluster (seen by %s): %s", v.System, seenBy(v), reason),
		Subject:  sub,
		Evidence: ev,
		Concerns: concerns,
	}
}

func seenBy(v *snapshot.GossipView) string {
	if v.Local != "" {
		return v.Local + ", " + v.From
	}
	return v.From
}

// GossipIPIdentity finds gossip members whose names are derived from IP
// addresses (seed 000's root cause): a new pod given a dead pod's address
// takes its name too, and the cluster takes it for the dead member come
// back, or refuses it.
type GossipIPIdentity struct{}

// Info describes the rule.
func (*GossipIPIdentity) Info() Info {
	return Info{
		ID:      GossipIPIdentityID,
		Sources: []string{"gossip"},
		Scope:   ScopeCluster,
		Columns: []string{},
		Detail: func(f finding.Finding) string {
			return fmt.Sprintf("%v: %v of %v members named after IPs", f.Evidence["system"], f.Evidence["count"], f.Evidence["members"])
		},
		Summary: "gossip members are named after IP addresses: when Kubernetes reissues an address, the new pod inherits the dead pod's identity",
		Fix:     "name members from the pod UID (downward API) or a random suffix, never the IP; leave on SIGTERM (the ghostwatch/gossip package does both)",
		Runbook: "docs/runbooks/gossip-ip-identity.md",
	}
}

// ipInName matches an IPv4 address written with dots, dashes or
// underscores, as names derived from addresses spell it (10.0.1.50,
// ip-10-0-1-50, node_10_0_1_50).
var ipInName = regexp.MustCompile(`(^|[^0-9])([0-9]{1,3})[._-]([0-9]{1,3})[._-]([0-9]{1,3})[._-]([0-9]{1,3})($|[^0-9])`)

// ipDerived returns the address a name is derived from, or an invalid one.
func ipDerived(name string) netip.Addr {
	for _, m := range ipInName.FindAllStringSubmatch(name, -1) {
		var b [4]byte
		ok := true
		for i := range 4 {
			n, err := strconv.Atoi(m[2+i])
			if err != nil || n > 255 {
				ok = false
				break
			}
			b[i] = byte(n)
		}
		if ok {
			return netip.AddrFrom4(b)
		}
	}
	return netip.Addr{}
}

// Evaluate returns one finding per view with members named after IPs.
func (r *GossipIPIdentity) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	if s.Gossip == nil {
		return nil
	}
	var out []finding.Finding
	for vi := range s.Gossip.Views {
		v := &s.Gossip.Views[vi]
		var names []string
		ownIP := 0
		for i := range v.Members {
			m := &v.Members[i]
			a := ipDerived(m.Name)
			if !a.IsValid() {
				continue
			}
			names = append(names, m.Name)
			if a == m.Addr {
				ownIP++
			}
		}
		if len(names) == 0 {
			continue
		}
		shown := strings.Join(names, ", ")
		if len(names) > 10 {
			shown = strings.Join(names[:10], ", ") + ", ..."
		}
		out = append(out, finding.Finding{
			Rule:     GossipIPIdentityID,
			Severity: finding.Warning,
			Message: fmt.Sprintf("%s cluster (seen by %s): %d of %d members are named after IP addresses (%s), %d after their own: a pod given a dead pod's address takes its identity",
				v.System, seenBy(v), len(names), len(v.Members), shown, ownIP),
			Evidence: map[string]any{"system": v.System, "view": v.From, "count": len(names), "members": len(v.Members), "named_after_ips": names, "named_after_own_ip": ownIP},
		})
	}
	return out
}
