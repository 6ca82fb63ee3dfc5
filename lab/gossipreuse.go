package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// ErrNoLoopback says the gossip-reuse lab cannot bind the loopback
// addresses it runs its members on: it checks them all before it starts
// anything.
var ErrNoLoopback = memberlisttest.ErrNoLoopback

// GossipReuseOptions tunes the gossip-reuse scenario.
type GossipReuseOptions struct {
	// Out receives the timeline; nil discards it.
	Out io.Writer
	// ConsulBin is the directory of the consul binary
	// ghostwatch-lab build consul (scripts/consul-binary.sh) builds; ""
	// means $GHOSTWATCH_CONSUL_BIN.
	// Without one, the Consul act is not played, and the timeline says
	// how to build it.
	ConsulBin string
}

// GossipReuseResult is what the gossip-reuse scenario measured. Times are
// seconds since the lab started, as on the timeline.
type GossipReuseResult struct {
	Scenario string       `json:"scenario"`
	Acts     []*GossipAct `json:"acts"`
	// Seconds is how long the whole lab took.
	Seconds float64 `json:"seconds"`
}

// GossipAct is one act of the lab: a member whose pod goes, and the
// member of the pod that gets its address.
type GossipAct struct {
	// Num is the act's number on the timeline, ID its name:
	// 1a ip-name-taken, 1b ip-name-new, 2 serf-force-leave,
	// 3 pod-identity-leave, 4a foreign-no-label, 4b foreign-label.
	Num    string `json:"act"`
	ID     string `json:"id"`
	Title  string `json:"title"`
	System string `json:"system"`
	// Settings are the timings the lab changed, each with the default
	// users get, and the ones it kept that the act turns on.
	Settings []GossipSetting `json:"settings"`
	// Old is the member whose pod went, New the member started at its
	// address (Addr), of another pod.
	Old  string `json:"old_member"`
	New  string `json:"new_member"`
	Addr string `json:"address"`
	// OldStates are the states the first surviving member listed Old in,
	// in the order seen, "forgotten" once it no longer listed it.
	OldStates []string `json:"old_member_states"`
	// Measured are durations in seconds: suspect, dead (memberlist) or
	// failed (Serf) and forgotten count from the old pod's crash; left
	// from its SIGTERM, leave is how long gossip.LeaveOnDone took;
	// new_listed from the new member's join until every surviving member
	// listed it alive; force_leave from the call until no surviving
	// member listed Old.
	Measured map[string]float64 `json:"measured_seconds"`
	// Counts are log lines the act counted, named by what they say.
	Counts map[string]int `json:"counts,omitempty"`
	// Reconnect is what a surviving member's join to Old's last address
	// returned, when the act plays one: "joined 1 member", or the error.
	Reconnect string `json:"reconnect,omitempty"`
	// Scans are ghostwatch's passes, in order.
	Scans []GossipScan `json:"scans"`
	// Started and Ended are when the act began and ended.
	Started float64 `json:"started_at_seconds"`
	Ended   float64 `json:"ended_at_seconds"`
}

// GossipSetting is one timing of the lab beside the default.
type GossipSetting struct {
	Name    string `json:"name"`
	Lab     string `json:"lab"`
	Default string `json:"default"`
}

// GossipScan is one pass of ghostwatch's gossip rules over every live
// member's list and the pods.
type GossipScan struct {
	// Step says when: before, dead, ghost, taken, listed, forgotten,
	// force-left, merged or refused.
	Step string  `json:"step"`
	At   float64 `json:"at_seconds"`
	// Lists are the member lists ghostwatch read, one per live member.
	Lists    []GossipList      `json:"lists"`
	Findings []finding.Finding `json:"findings"`
}

// GossipList is one member's list.
type GossipList struct {
	SeenBy  string         `json:"seen_by"`
	Members []GossipListed `json:"members"`
}

// GossipListed is one member as a list gives it.
type GossipListed struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Port  uint16 `json:"port"`
	State string `json:"state"`
}

// Member returns the named member of the list, or nil.
func (l *GossipList) Member(name string) *GossipListed {
	for i := range l.Members {
		if l.Members[i].Name == name {
			return &l.Members[i]
		}
	}
	return nil
}

// Scan returns the act's scan of step, or nil.
func (a *GossipAct) Scan(step string) *GossipScan {
	for i := range a.Scans {
		if a.Scans[i].Step == step {
			return &a.Scans[i]
		}
	}
	return nil
}

// The lab's loopback addresses: each act its own, none of the tests'.
// The dying pod's address is the last of each act's.
var (
	actAddrs = map[string][3]string{
		"ip-name-taken":      {"127.0.0.111", "127.0.0.112", "127.0.0.113"},
		"ip-name-new":        {"127.0.0.114", "127.0.0.115", "127.0.0.116"},
		"serf-force-leave":   {"127.0.0.121", "127.0.0.122", "127.0.0.123"},
		"consul-force-leave": {"127.0.0.124", "127.0.0.125", "127.0.0.126"},
		"pod-identity-leave": {"127.0.0.131", "127.0.0.132", "127.0.0.133"},
		"foreign-no-label":   {"127.0.0.141", "127.0.0.142", "127.0.0.143"},
		"foreign-label":      {"127.0.0.144", "127.0.0.145", "127.0.0.146"},
	}
	actOrder = []string{"ip-name-taken", "ip-name-new", "serf-force-leave", "consul-force-leave", "pod-identity-leave", "foreign-no-label", "foreign-label"}
)

// The pods of the lab's cluster: a cache of three pods in namespace shop,
// and a pod of the same application in namespace billing.
const (
	gossipNS      = "shop"
	gossipLabel   = "shop/cache"
	foreignNS     = "billing"
	foreignLabel  = "billing/cache"
	gossipPollGap = 50 * time.Millisecond
)

// labPatience is how long a lab waits for an answer or for what an act
// waits for (a member listed, a collector's free) beyond the time the
// settings give it: every such wait ends in seconds on an idle machine,
// and a busy one may stretch it tenfold, so only a hang reaches this. How
// long each wait took is on the timeline and in the result, where it is
// compared with the settings that give it, not held to a bound.
const labPatience = 2 * time.Minute

// GossipReuse plays seed 000 with real memberlist members and real Serf
// agents on addresses of 127.0.0.0/8: a member's pod goes, Kubernetes
// gives its address to another pod, and ghostwatch's gossip rules judge
// every live member's list against the pods, as the API server would
// list them. Six acts: memberlist members named after their IPs, the new
// pod's member taking the dead one's name or having its own; Serf keeping
// a crashed member failed beside the new one until force-leave -prune;
// the ghostwatch/gossip package's names and leave on SIGTERM; a pod of
// another namespace given the address, without and with a cluster label.
// Timings are shortened so that the lab takes well under a minute; each
// act says which, and what the defaults give. It needs no root, and stops
// every member it started however it ends.
func GossipReuse(ctx context.Context, o GossipReuseOptions) (res *GossipReuseResult, err error) {
	for _, id := range actOrder {
		for _, a := range actAddrs[id] {
			if err := memberlisttest.CheckLoopback(a); err != nil {
				return nil, fmt.Errorf("lab gossip-reuse: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	tl := newTimeline(o.Out, start)
	tl.failed = func(err error) { cancel(fmt.Errorf("writing the timeline: %w", err)) }
	g := &gossipLab{ctx: ctx, tl: tl, res: &GossipReuseResult{Scenario: "gossip-reuse"}, consulBin: o.ConsulBin}
	if g.consulBin == "" {
		g.consulBin, _ = consultest.Find()
	}
	defer func() {
		stopped, serr := g.stopAll()
		if ctx.Err() != nil {
			err = fmt.Errorf("lab gossip-reuse interrupted: %w", context.Cause(ctx))
		}
		if serr == nil {
			tl.logf("lab", "stopped every member and agent it started (%d), and their listeners", stopped)
		}
		if err = errors.Join(err, serr); err != nil {
			res = nil
		}
	}()
	tl.section("ghostwatch-lab gossip-reuse — seed 000: a gossip member outlives its pod, and Kubernetes gives its address to the next pod (%s, %s; real members on 127.0.0.x, timings shortened: each act says which)",
		moduleVersion("github.com/hashicorp/memberlist"), moduleVersion("github.com/hashicorp/serf"))
	tl.logf("lab", "no Kubernetes here: the pods are stated as the API server would list them (namespace, name, UID, IP, start time), and ghostwatch reads every live member's list as it reads a cluster's: memberlist's from the ghostwatch/gossip package's View over HTTP (%s), Serf's through its agent's RPC", gossip.Path)
	tl.logf("lab", "every member has its own port here; in a cluster every pod uses the same one (7946), so a pod given a dead pod's address is reached where the dead one was: the new member binds the dead one's address and port")
	for _, play := range []func() error{g.ipNameTaken, g.ipNameNew, g.serfForceLeave, g.consulForceLeave, g.podIdentityLeave, func() error { return g.foreign(false) }, func() error { return g.foreign(true) }} {
		if err := play(); errors.Is(err, errNotPlayed) {
			continue
		} else if err != nil {
			return nil, err
		}
		if err := g.endAct(); err != nil {
			return nil, err
		}
	}
	g.summary()
	g.res.Seconds = tl.since(time.Now())
	if tl.err != nil {
		return nil, tl.err
	}
	return g.res, nil
}

// ipNameTaken: act 1, the seed's application; the new pod's member takes
// the dead one's name with its address.
func (g *gossipLab) ipNameTaken() error {
	g.beginAct("1a", "ip-name-taken", "memberlist", "memberlist members named after their IPs, as the seed's: the new pod's member takes the dead one's name with its address")
	g.tl.logf("app", "the seed's application: memberlist.DefaultLANConfig(), Name \"node-<pod IP>\", no label, no leave on SIGTERM; the ghostwatch/gossip package's View only serves its list")
	g.memberlistTimings(seedConfig("x"), memberlist.DefaultLANConfig(), "memberlist.DefaultLANConfig() with")
	a, err := g.startCluster(func(p snapshot.Pod) (string, error) { return ipName(p.IPs[0].String()), nil }, seedConfig, false)
	if err != nil {
		return err
	}
	if _, err := g.scan("before"); err != nil {
		return err
	}
	incBefore, err := g.incarnation(g.nodes[0], a.name)
	if err != nil {
		return err
	}
	if _, err := g.crash(a); err != nil {
		return err
	}
	p := g.newPod(gossipNS, "cache-4", g.act.Addr, "worker-3")
	started := time.Now()
	b, err := g.reissue(a, p, func(p snapshot.Pod, port int) (*gossipNode, error) {
		return g.startMember(seedConfig(ipName(p.IPs[0].String())), p, port, false)
	}, ": Kubernetes gave it cache-3's address", true)
	if err != nil {
		return err
	}
	took, err := g.waitLists(a.name+" alive again in every surviving list", g.nodes[:2], []string{a.name}, func(v *snapshot.GossipView) bool {
		return status(v, a.name) == snapshot.MemberAlive
	})
	if err != nil {
		return err
	}
	g.act.Measured["new_listed"] = took.Seconds()
	g.act.Measured["taken_over"] = time.Since(started).Seconds()
	incAfter, err := g.incarnation(g.nodes[0], a.name)
	if err != nil {
		return err
	}
	refuted, err := g.waitLog(b, "the new member's refutation", "Refuting a")
	if err != nil {
		return err
	}
	g.act.Counts["refutations_by_new_member"] = len(refuted)
	g.tl.logf(p.Name, "%s's log: %s", b.name, logText(refuted[0]))
	g.tl.logf("cluster", "%s is alive again at %s, incarnation %d -> %d, %s after cache-4 started: the new pod refuted the dead pod's death, and the cluster takes it for cache-3 come back (state keyed by the name, shards or sessions, goes to a pod that has none of it)",
		a.name, a.gossipAddr(), incBefore, incAfter, took.Round(time.Millisecond))
	if _, err := g.scan("taken"); err != nil {
		return err
	}
	g.tl.logf("fix", "name members after the pod UID (act 3): a new pod is a new member, and a dead one is a ghost ghostwatch can see; gossip-ip-identity is the only warning here")
	return nil
}

// ipNameNew: act 2, the seed's application; the new pod's member has a
// name of its own.
func (g *gossipLab) ipNameNew() error {
	g.beginAct("1b", "ip-name-new", "memberlist", "memberlist members named after their IPs; the new pod's member has a name of its own")
	g.tl.logf("app", "the seed's application, as in act 1a; the new pod's member is named after its host name (memberlist's default Name: the pod name)")
	g.memberlistTimings(seedConfig("x"), memberlist.DefaultLANConfig(), "memberlist.DefaultLANConfig() with")
	a, err := g.startCluster(func(p snapshot.Pod) (string, error) { return ipName(p.IPs[0].String()), nil }, seedConfig, false)
	if err != nil {
		return err
	}
	crashed, err := g.crash(a)
	if err != nil {
		return err
	}
	if _, err := g.scan("dead"); err != nil {
		return err
	}
	g.tl.logf("ghostwatch", "a dead member at an address no pod holds is no ghost yet: nothing to judge it against")
	b, err := g.reissue(a, g.newPod(gossipNS, "cache-4", g.act.Addr, "worker-3"), func(p snapshot.Pod, port int) (*gossipNode, error) {
		return g.startMember(seedConfig(p.Name), p, port, false)
	}, ": Kubernetes gave it cache-3's address", true)
	if err != nil {
		return err
	}
	took, err := g.waitLists(b.name+" alive in every surviving list", g.nodes[:2], []string{a.name, b.name}, func(v *snapshot.GossipView) bool {
		return status(v, b.name) == snapshot.MemberAlive
	})
	if err != nil {
		return err
	}
	g.act.Measured["new_listed"] = took.Seconds()
	g.tl.logf("cluster", "%s accepted at once (memberlist keys members by name, and never compares two members' addresses); %s stays listed dead at the same address", b.name, a.name)
	if _, err := g.scan("ghost"); err != nil {
		return err
	}
	if err := g.waitForgotten(a, crashed); err != nil {
		return err
	}
	g.tl.logf("cluster", "%s forgotten %.1fs after it died (GossipToTheDeadTime %s here, then a probe round; %s with DefaultLANConfig)",
		a.name, g.act.Measured["forgotten"], fmtDuration(a.ml.Config.GossipToTheDeadTime), fmtDuration(memberlist.DefaultLANConfig().GossipToTheDeadTime))
	if _, err := g.scan("forgotten"); err != nil {
		return err
	}
	g.tl.logf("fix", "names from the pod UID and a leave on SIGTERM (act 3) keep the dead member from sharing the address with a live one; until it is forgotten, every member's gossip to the dead reaches the new pod")
	return nil
}

// serfForceLeave: act 3, Serf keeps a crashed member failed beside the new
// one for ReconnectTimeout; force-leave -prune clears it.
func (g *gossipLab) serfForceLeave() error {
	g.beginAct("2", "serf-force-leave", "serf", "Serf agents: a crashed member stays failed beside the new pod's member until force-leave -prune")
	lab, def := serftest.Fast(), serf.DefaultConfig()
	s := memberlistSettings(lab.MemberlistConfig, def.MemberlistConfig)
	s.add("ReapInterval", lab.ReapInterval, def.ReapInterval)
	s.add("ReconnectInterval", lab.ReconnectInterval, def.ReconnectInterval)
	g.act.Settings = append(s, GossipSetting{Name: "ReconnectTimeout", Lab: fmtDuration(lab.ReconnectTimeout), Default: fmtDuration(def.ReconnectTimeout)},
		GossipSetting{Name: "TombstoneTimeout", Lab: fmtDuration(lab.TombstoneTimeout), Default: fmtDuration(def.TombstoneTimeout)})
	g.tl.logf("settings", "serf.DefaultConfig() with %s; kept: ReconnectTimeout %s (how long a failed member is listed, and reconnected to), TombstoneTimeout %s (a left one); every figure below is the lab's",
		s.text(), fmtDuration(lab.ReconnectTimeout), fmtDuration(lab.TombstoneTimeout))
	g.tl.logf("app", "serf agents named after their host name (Serf's default node name: the pod name, another for every pod of a Deployment), each serving its RPC on its pod's address")
	for i, addr := range actAddrs[g.act.ID] {
		p := g.newPod(gossipNS, fmt.Sprintf("cache-%d", i+1), addr, fmt.Sprintf("worker-%d", i+1))
		n, err := g.startAgent(p.Name, p, netip.AddrPortFrom(p.IPs[0], 0))
		if err != nil {
			return err
		}
		g.pods = append(g.pods, p)
		if i > 0 {
			if err := g.join(n, g.nodes[0]); err != nil {
				return err
			}
		}
	}
	a, err := g.settle()
	if err != nil {
		return err
	}
	if _, err := g.scan("before"); err != nil {
		return err
	}
	if _, err := g.crash(a); err != nil {
		return err
	}
	b, err := g.reissue(a, g.newPod(gossipNS, "cache-4", g.act.Addr, "worker-3"), func(p snapshot.Pod, port int) (*gossipNode, error) {
		return g.startAgent(p.Name, p, netip.AddrPortFrom(p.IPs[0], uint16(port)))
	}, ": Kubernetes gave it cache-3's address", true)
	if err != nil {
		return err
	}
	joined := time.Now()
	took, err := g.waitLists(b.name+" alive in every surviving list", g.nodes[:2], []string{a.name, b.name}, func(v *snapshot.GossipView) bool {
		return status(v, b.name) == snapshot.MemberAlive
	})
	if err != nil {
		return err
	}
	g.act.Measured["new_listed"] = took.Seconds()
	// The survivors keep reconnecting to the failed member, at the
	// address the new pod now holds.
	survivor := g.nodes[0]
	reconnect := "serf: attempting reconnect to " + a.name + " " + a.gossipAddr().String()
	ghost, err := g.scan("ghost")
	if err != nil {
		return err
	}
	withheld := ""
	for _, f := range ghost.Findings {
		if why, ok := f.Evidence["force_leave_withheld"].(string); ok && f.Evidence["member"] == a.name {
			withheld = why
		}
	}
	lines, err := g.waitLog(survivor, "reconnects to "+a.name, reconnect)
	if err != nil {
		return err
	}
	g.act.Counts["reconnects_to_failed_member"] = len(lines)
	g.tl.logf(podWho(survivor.pod), "%s reconnects to %s at %s, now %s's: %s (%s in %.1fs; ReconnectInterval %s here, %s by default); left alone it keeps %s failed, and reconnects to it, for ReconnectTimeout: %s",
		survivor.name, a.name, a.gossipAddr(), b.name, logText(lines[0]), text.Count(len(lines), "attempt", "attempts"), time.Since(joined).Seconds(),
		fmtDuration(lab.ReconnectInterval), fmtDuration(def.ReconnectInterval), a.name, fmtDuration(lab.ReconnectTimeout))

	if withheld != "" {
		g.tl.logf("ghostwatch", "names the command (serf force-leave -prune %s) but would not force it out by itself: %s", a.name, withheld)
	}
	g.tl.logf("operator", "%s's pod is gone (the lab killed it): serf force-leave -prune %s through %s's RPC (ghostwatch's Serf.ForceLeave)", a.name, a.name, survivor.pod.Name)
	if err := g.forceOut(a, (&sourcegossip.Serf{Addr: survivor.serf.RPC, Timeout: labPatience}).ForceLeave); err != nil {
		return err
	}
	g.tl.logf("fix", "force-leave -prune removes the ghost at once; without -prune the member is listed left for TombstoneTimeout (%s), still sharing the address", fmtDuration(def.TombstoneTimeout))
	return nil
}

// errNotPlayed is what an act returns that the lab cannot play here.
var errNotPlayed = errors.New("act not played")

// consulForceLeave: act 2b, seed 000's own system: Consul agents with ACLs
// on, a client named after its IP crashes, and its address goes to a new
// pod whose agent has its own name; the failed member stays listed beside
// it until force-leave -prune, which ghostwatch's Consul client sends with
// the cluster's token.
func (g *gossipLab) consulForceLeave() error {
	if g.consulBin == "" {
		g.tl.logf("lab", "act 2b (consul-force-leave) not played: no consul binary; `ghostwatch-lab build consul` (or --build) builds Consul %s into the build cache in 4 to 10 minutes (%s in a checkout), or pass --consul-bin DIR or set %s", "v1.14.11", consultest.Script, consultest.BinEnv)
		return errNotPlayed
	}
	g.beginAct("2b", "consul-force-leave", "consul", "Consul agents with ACLs on: a crashed client named after its IP stays failed beside the new pod's agent until force-leave -prune")
	g.tl.logf("settings", "Consul's own defaults (no timing shortened); ACLs on, default deny: ghostwatch reads /v1/agent/members and forces members out with the cluster's token")
	addrs := actAddrs[g.act.ID]
	var server netip.Addr
	for i, addr := range addrs {
		p := g.newPod(gossipNS, fmt.Sprintf("consul-%d", i), addr, fmt.Sprintf("worker-%d", i+1))
		name := p.Name
		if i == 2 {
			name = ipName(addr) // the seed's: named after its IP
		}
		n, err := g.startConsul(name, p, i == 0, server)
		if err != nil {
			return err
		}
		if i == 0 {
			server = n.consul.Addr
		}
		g.pods = append(g.pods, p)
	}
	a, err := g.settle()
	if err != nil {
		return err
	}
	if _, err := g.scan("before"); err != nil {
		return err
	}
	if _, err := g.crash(a); err != nil {
		return err
	}
	b, err := g.reissue(a, g.newPod(gossipNS, "consul-3", g.act.Addr, "worker-3"), func(p snapshot.Pod, _ int) (*gossipNode, error) {
		return g.startConsul(p.Name, p, false, server)
	}, ": Kubernetes gave it "+a.pod.Name+"'s address", false)
	if err != nil {
		return err
	}
	if _, err := g.waitLists(b.name+" alive in every surviving list", g.nodes[:2], []string{a.name, b.name}, func(v *snapshot.GossipView) bool {
		return status(v, b.name) == snapshot.MemberAlive
	}); err != nil {
		return err
	}
	if _, err := g.scan("ghost"); err != nil {
		return err
	}
	survivor := g.nodes[0]
	g.tl.logf("operator", "%s's pod is gone (the lab killed it): consul force-leave -prune %s through %s's HTTP API, with the cluster's token (ghostwatch's Consul.ForceLeave)", a.name, a.name, survivor.pod.Name)
	return g.forceOut(a, survivor.reader.(*sourcegossip.Consul).ForceLeave)
}

// forceOut forces a out of the cluster with leave (an agent's force-leave
// with prune), waits until no surviving member lists it, measures how
// long that took, and scans again ("force-left").
func (g *gossipLab) forceOut(a *gossipNode, leave func(context.Context, string) error) error {
	forced := time.Now()
	ctx, cancel := context.WithTimeout(g.ctx, labPatience)
	err := leave(ctx, a.name)
	cancel()
	if err != nil {
		return err
	}
	if _, err := g.waitLists(a.name+" pruned from every surviving list", g.nodes[:2], []string{a.name}, func(v *snapshot.GossipView) bool {
		return status(v, a.name) == ""
	}); err != nil {
		return err
	}
	g.act.Measured["force_leave"] = time.Since(forced).Seconds()
	g.tl.logf("cluster", "%s pruned from every surviving list %s after the force-leave", a.name, time.Since(forced).Round(time.Millisecond))
	_, err = g.scan("force-left")
	return err
}

// podIdentityLeave: act 4, the ghostwatch/gossip package's names and leave.
func (g *gossipLab) podIdentityLeave() error {
	g.beginAct("3", "pod-identity-leave", "memberlist", "the ghostwatch/gossip package: members named after the pod UID, leaving on SIGTERM")
	g.tl.logf("app", "gossip.DefaultPodConfig(name, %q), name $POD_NAME-$POD_UID (gossip.Identity.MemberName); cache-3's main blocks in gossip.LeaveOnDone(ctx, ml, gossip.DefaultLeaveTimeout) with ctx ended by SIGTERM", gossipLabel)
	g.memberlistTimings(podConfig(gossipLabel)("x"), gossip.DefaultPodConfig("x", gossipLabel), "gossip.DefaultPodConfig() with")
	a, err := g.startCluster(uidName, podConfig(gossipLabel), true)
	if err != nil {
		return err
	}
	if _, err := g.scan("before"); err != nil {
		return err
	}
	sigterm := time.Now()
	g.tl.logf("kubelet", "pod %s/%s is deleted (a rollout, a scale-down): the kubelet sends its process SIGTERM", a.pod.Namespace, a.pod.Name)
	a.sigterm()
	if err := <-a.leaving; err != nil {
		return err
	}
	a.sigterm = nil
	leave := time.Since(sigterm)
	g.act.Measured["leave"] = leave.Seconds()
	if err := a.stop(); err != nil {
		return err
	}
	g.tl.logf(a.pod.Name, "gossip.LeaveOnDone returned after %s: the leave broadcast went out, then memberlist shut down; the process exits", leave.Round(time.Millisecond))
	g.deletePod(a.pod, "its process exited")
	if _, err := g.waitLists(a.name+" left in every surviving list", g.nodes[:2], []string{a.name}, func(v *snapshot.GossipView) bool {
		return status(v, a.name) == snapshot.MemberLeft
	}); err != nil {
		return err
	}
	g.act.Measured["left"] = time.Since(sigterm).Seconds()
	// What the act shows is that a member listed left is never probed:
	// suspicions logged before every survivor listed it left are not
	// counted (on a busy machine a probe may miss its timeout at any
	// time, and one may be under way when the leave arrives).
	suspicions := func() int {
		n := 0
		for _, s := range g.nodes[:2] {
			n += len(s.logLines("Suspect "+a.name)) + len(s.logLines("Marking "+a.name))
		}
		return n
	}
	suspectedBefore := suspicions()
	b, err := g.reissue(a, g.newPod(gossipNS, "cache-4", g.act.Addr, "worker-3"), func(p snapshot.Pod, port int) (*gossipNode, error) {
		name, err := uidName(p)
		if err != nil {
			return nil, err
		}
		return g.startMember(podConfig(gossipLabel)(name), p, port, false)
	}, ": Kubernetes gave it cache-3's address", true)
	if err != nil {
		return err
	}
	took, err := g.waitLists(b.name+" alive in every surviving list", g.nodes[:2], []string{a.name, b.name}, func(v *snapshot.GossipView) bool {
		return status(v, b.name) == snapshot.MemberAlive
	})
	if err != nil {
		return err
	}
	g.act.Measured["new_listed"] = took.Seconds()
	if sc, err := g.scan("listed"); err != nil {
		return err
	} else if len(sc.Findings) > 0 {
		g.tl.logf("ghostwatch", "info, not a ghost: memberlist neither probes nor gossips to a left member (state.go probeNode and gossip), and forgets it after GossipToTheDeadTime (%s here, %s in the preset)",
			fmtDuration(a.ml.Config.GossipToTheDeadTime), fmtDuration(gossip.DefaultPodConfig("x", "").GossipToTheDeadTime))
	}
	if err := g.waitForgotten(a, sigterm); err != nil {
		return err
	}
	g.tl.logf("cluster", "%s forgotten %.1fs after SIGTERM (GossipToTheDeadTime %s here, %s in the preset)", a.name, g.act.Measured["forgotten"], fmtDuration(a.ml.Config.GossipToTheDeadTime), fmtDuration(gossip.DefaultPodConfig("x", "").GossipToTheDeadTime))
	if _, err := g.scan("forgotten"); err != nil {
		return err
	}
	suspected := suspicions() - suspectedBefore
	pings := len(b.logLines("Got ping for unexpected node", a.name))
	g.act.Counts["suspicions_of_left_member"] = suspected
	g.act.Counts["pings_for_old_member_at_new_pod"] = pings
	g.tl.logf("cluster", "once they listed it left, the surviving members logged %d suspicions of %s; %s got %d pings meant for it", suspected, a.name, b.name, pings)
	g.tl.logf("fix", "this is the fix: a left member is never probed, and the new pod's member is another identity from the start; a crash still leaves a dead member for GossipToTheDeadTime (acts 1b and 4)")
	return nil
}

// foreign: act 4, a pod of another namespace given a crashed member's
// address, the clusters without and with labels.
func (g *gossipLab) foreign(labelled bool) error {
	num, id, label, flabel := "4a", "foreign-no-label", "", ""
	title := "a pod of another namespace gets a crashed member's address; no cluster has a label"
	if labelled {
		num, id, label, flabel = "4b", "foreign-label", gossipLabel, foreignLabel
		title = "the same, each cluster with the ghostwatch/gossip package's label"
	}
	g.beginAct(num, id, "memberlist", title)
	g.tl.logf("app", "gossip.DefaultPodConfig(name, %q), names from the pod UID; the pod given the address runs the same application in namespace %s, its own cluster (label %q), on the same port", label, foreignNS, flabel)
	g.memberlistTimings(podConfig(label)("x"), gossip.DefaultPodConfig("x", label), "gossip.DefaultPodConfig() with")
	a, err := g.startCluster(uidName, podConfig(label), false)
	if err != nil {
		return err
	}
	crashed, err := g.crash(a)
	if err != nil {
		return err
	}
	f, err := g.reissue(a, g.newPod(foreignNS, "cache-1", g.act.Addr, "worker-3"), func(p snapshot.Pod, port int) (*gossipNode, error) {
		name, err := uidName(p)
		if err != nil {
			return nil, err
		}
		return g.startMember(podConfig(flabel)(name), p, port, false)
	}, fmt.Sprintf(": Kubernetes gave it %s/%s's address", gossipNS, a.pod.Name), false)
	if err != nil {
		return err
	}
	// What reaches the foreign pod: a surviving member reconnecting to
	// the failed member's last address (alertmanager#2250).
	s := g.nodes[0]
	g.tl.logf(podWho(s.pod), "%s reconnects to %s's last address %s, as Alertmanager reconnects to a failed peer (every 10s for 6h by default; once here)", s.name, a.name, a.gossipAddr())
	joined, jerr := s.ml.ML.Join([]string{a.gossipAddr().String()})
	if jerr != nil {
		g.act.Reconnect = jerr.Error()
		g.tl.logf(podWho(s.pod), "the reconnect failed: %s", strings.Join(strings.Fields(jerr.Error()), " "))
	} else {
		g.act.Reconnect = fmt.Sprintf("joined %d member", joined)
		g.tl.logf(podWho(s.pod), "the reconnect joined %s", f.name)
	}
	if !labelled {
		if jerr != nil {
			return fmt.Errorf("%s's reconnect to %s: %w", s.name, a.gossipAddr(), jerr)
		}
		if _, err := g.waitLists("the two clusters merged in every list", g.live(), []string{f.name}, func(v *snapshot.GossipView) bool {
			for _, n := range g.live() {
				if status(v, n.name) != snapshot.MemberAlive {
					return false
				}
			}
			return true
		}); err != nil {
			return err
		}
		g.tl.logf("cluster", "one cluster now: %s of namespace %s is a member of %s/cache's cluster, and they of its", f.name, foreignNS, gossipNS)
		if _, err := g.scan("merged"); err != nil {
			return err
		}
	} else {
		if jerr == nil {
			g.tl.logf("cluster", "the label did not keep %s out", f.name)
		} else {
			lines, err := g.waitLog(f, "the foreign member's refusal", "discarding stream with unacceptable label")
			if err != nil {
				return err
			}
			g.tl.logf(podWho(f.pod), "%s's log: %s", f.name, logText(lines[0]))
		}
		if _, err := g.scan("refused"); err != nil {
			return err
		}
	}
	if err := g.waitForgotten(a, crashed); err != nil {
		return err
	}
	g.tl.logf("cluster", "%s forgotten %.1fs after it died", a.name, g.act.Measured["forgotten"])
	refused := len(f.logLines("unacceptable label"))
	g.act.Counts["refused_for_label_by_foreign_member"] = refused
	if labelled {
		g.tl.logf(podWho(f.pod), "%s dropped %d streams and packets of %s/cache's cluster for their label (the reconnect, and gossip to the dead member)", f.name, refused, gossipNS)
	}
	if _, err := g.scan("forgotten"); err != nil {
		return err
	}
	if labelled {
		g.tl.logf("fix", "this is the fix: with a label per cluster, traffic for the dead member dies at the foreign pod, and nothing is left once the dead member is forgotten")
	} else {
		g.tl.logf("fix", "give each cluster its own memberlist Label (act 4b), or gossip encryption keys: the clusters stay merged until the foreign pod goes")
	}
	return nil
}

// summary prints each act in one line.
func (g *gossipLab) summary() {
	tl := g.tl
	tl.section("summary")
	for _, a := range g.res.Acts {
		last := a.Scans[len(a.Scans)-1]
		worst := "nothing"
		var rules []string
		for _, sc := range a.Scans {
			for _, f := range sc.Findings {
				if !slices.Contains(rules, f.Severity.String()+" "+f.Rule) {
					rules = append(rules, f.Severity.String()+" "+f.Rule)
				}
			}
		}
		if len(rules) > 0 {
			worst = strings.Join(rules, ", ")
		}
		var ms []string
		for _, k := range []string{"suspect", "dead", "failed", "leave", "left", "new_listed", "taken_over", "force_leave", "forgotten"} {
			if v, ok := a.Measured[k]; ok {
				ms = append(ms, fmt.Sprintf("%s %.2fs", strings.ReplaceAll(k, "_", " "), v))
			}
		}
		tl.logf("act "+a.Num, "%s: %s found; at the end (%s) %s; %s; %.1fs", a.ID, worst, last.Step, describeFindings(last.Findings), strings.Join(ms, ", "), a.Ended-a.Started)
	}
}
