package gossip

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/hashicorp/memberlist"
)

// Seed 000: a pod dies without leaving, and a new pod gets its IP. These
// tests play it with real memberlist members and assert what memberlist
// v0.5.4 does, which is not quite what the seed says (it describes
// Consul): memberlist keys members by name and never compares two
// members' addresses, so what happens depends on the new pod's name.
// Source lines are memberlist v0.5.4's.

// startCluster starts three members cache-s1..3 at prefix+"1".."3"
// (prefix "127.0.0.4" gives 127.0.0.41..43), joined.
func startCluster(t *testing.T, prefix, label string, edit func(*memberlist.Config)) []*testNode {
	t.Helper()
	var s []*testNode
	for i := 1; i <= 3; i++ {
		s = append(s, startNode(t, fmt.Sprintf("cache-s%d", i), fmt.Sprintf("%s%d", prefix, i), 0, label, edit))
	}
	s[1].join(t, s[0])
	s[2].join(t, s[0])
	return s
}

// keepDead makes the seeds list a dead member for a minute, not the
// test preset's 3s: the tests that read the list while a member is dead,
// rather than time its forgetting, must not lose the window on a busy
// machine.
func keepDead(c *memberlist.Config) { c.GossipToTheDeadTime = time.Minute }

// ipName is a member name derived from the member's IP, as the seed's
// application made them.
func ipName(addr string) string { return "node-" + strings.ReplaceAll(addr, ".", "-") }

// joinAndWait joins n to the cluster and waits until every seed lists it
// alive.
func joinAndWait(t *testing.T, n *testNode, seeds []*testNode) {
	t.Helper()
	n.join(t, seeds[0])
	for _, s := range seeds {
		poll.UntilNoted(t, poll.Patience, n.name+" alive in "+s.name+"'s list", stateOf(t, s, n.name, StateAlive))
	}
}

// crash stops n without leaving: a pod killed, OOM, its node gone.
func crash(t *testing.T, n *testNode) {
	t.Helper()
	if err := n.ml.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// ghostFindings runs ghostwatch's gossip rules on the list n serves, as
// ghostwatch reads it (source/gossip's parser), with a pod of namespace
// shop for each running member, at its address.
func ghostFindings(t *testing.T, n *testNode, running ...*testNode) []finding.Finding {
	t.Helper()
	_, body := n.members(t)
	v, err := sourcegossip.Parse(n.name+Path, body)
	if err != nil {
		t.Fatalf("ghostwatch cannot read %s's list: %v\n%s", n.name, err, body)
	}
	kube := &snapshot.Kube{}
	for _, r := range running {
		kube.Pods = append(kube.Pods, snapshot.Pod{UID: "uid-" + r.name, Namespace: "shop", Name: r.name, Node: "node-a",
			Phase: snapshot.PodRunning, IPs: []netip.Addr{netip.MustParseAddr(r.addr)}, Created: r.started, StartTime: r.started})
	}
	s := &snapshot.Snapshot{Taken: time.Now(), Kube: kube, Gossip: &snapshot.Gossip{Views: []snapshot.GossipView{*v}}}
	var out []finding.Finding
	out = append(out, (&rule.GossipGhostMember{}).Evaluate(s)...)
	out = append(out, (&rule.GossipIPIdentity{}).Evaluate(s)...)
	return out
}

// TestSeed000NewName: the new pod's member has a name of its own. The
// cluster accepts it at once (state.go:1023, an unknown name is added
// whatever its address), and keeps the dead pod's member at the same
// address, alive then suspect then dead, until it forgets it (state.go:565
// resetNodes); the probes meant for the dead member reach the new pod,
// which does not answer for another name (net.go:568).
func TestSeed000NewName(t *testing.T) {
	seeds := startCluster(t, "127.0.0.4", testLabel, nil)
	const addr = "127.0.0.44"
	a := startNode(t, ipName(addr), addr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	before, _ := seeds[0].members(t)
	incA := before.member(a.name).Incarnation

	crashed := time.Now()
	crash(t, a)
	// The address is reissued at once: the new pod's member starts on it
	// before the cluster has noticed the crash.
	b := startNode(t, "cache-7f3c9e1a", addr, port, testLabel, nil)
	n, err := b.ml.Join([]string{seeds[0].address()})
	if err != nil || n != 1 {
		t.Fatalf("the new member's join: %d members, %v; memberlist accepts an unknown name from any address", n, err)
	}
	t.Logf("%s crashed; %s started on %s:%d and joined %v later", a.name, b.name, addr, port, time.Since(crashed).Round(time.Millisecond))
	// cache-s1 merges the new member's state once it has answered the
	// join with its own.
	poll.UntilNoted(t, poll.Patience, b.name+" in cache-s1's list", func() (bool, string) {
		l, _ := seeds[0].members(t)
		return l.member(b.name) != nil, l.String()
	})

	// Watch the view of cache-s1 until the dead member is forgotten.
	timing := TimingOf(seeds[0].cfg, 5)
	first := map[string]time.Duration{}
	var shared *MemberList
	poll.UntilNoted(t, poll.Patience, a.name+" forgotten by cache-s1", func() (bool, string) {
		l, _ := seeds[0].members(t)
		// Listed all along: never shunned. (On a busy machine a live
		// member may turn suspect for a moment, and refute it.)
		mb := l.member(b.name)
		if mb == nil || mb.State == StateDead || mb.State == StateLeft || mb.Addr != addr || int(mb.Port) != port {
			t.Fatalf("%s is not listed live at %s:%d in cache-s1's list %v: the new member was shunned", b.name, addr, port, l)
		}
		ma := l.member(a.name)
		if ma == nil {
			if len(first) > 0 {
				first["forgotten"] = time.Since(crashed)
				return true, l.String()
			}
			return false, l.String()
		}
		if _, ok := first[ma.State]; !ok {
			first[ma.State] = time.Since(crashed)
		}
		if ma.State == StateDead && shared == nil {
			shared = l
		}
		return false, l.String()
	})
	t.Logf("cache-s1 saw %s suspect %v, dead %v, forgotten %v after the crash (timing for 5 members: %+v)",
		a.name, first[StateSuspect], first[StateDead], first["forgotten"], timing)
	if _, ok := first[StateDead]; !ok {
		t.Fatalf("cache-s1 never listed %s dead: %v", a.name, first)
	}
	// A lower bound, which no load breaks: a member dies after its crash,
	// and is kept dead GossipToTheDeadTime at least.
	if first["forgotten"] < seeds[0].cfg.GossipToTheDeadTime {
		t.Errorf("cache-s1 forgot %s %v after the crash, sooner than GossipToTheDeadTime (%v)", a.name, first["forgotten"], seeds[0].cfg.GossipToTheDeadTime)
	}
	if _, ok := first[StateLeft]; ok {
		t.Errorf("cache-s1 listed %s left: it crashed", a.name)
	}
	// The read that found it forgotten made the View forget it too.
	seeds[0].view.mu.Lock()
	_, remembered := seeds[0].view.events[a.name]
	seeds[0].view.mu.Unlock()
	if remembered {
		t.Errorf("cache-s1's View still remembers when %s went, after memberlist forgot it", a.name)
	}
	// Both identities on one address: one dead, one alive.
	ma, mb := shared.member(a.name), shared.member(b.name)
	if ma.Addr != mb.Addr || ma.Port != mb.Port || ma.Incarnation < incA || ma.Since == "" {
		t.Errorf("the list while %s was dead: %v; want it and %s at %s:%d, with the time it died", a.name, shared, b.name, addr, port)
	}
	// The probes meant for the dead member reached the new one: a ping
	// names its target, and memberlist does not answer for another name
	// (net.go:567-570, "Got ping for unexpected node").
	if lines := b.log.Lines("Got ping for unexpected node", a.name); len(lines) == 0 {
		t.Errorf("%s logged no ping meant for %s", b.name, a.name)
	} else {
		t.Logf("%s: %d pings for %s, e.g. %s", b.name, len(lines), a.name, lines[0])
		// Its member list counts them, for ghostwatch's metric.
		if l, _ := b.members(t); l.Rejections[RejectUnexpectedNode] < uint64(len(lines)) {
			t.Errorf("%s's list counts %v, want at least %d %s", b.name, l.Rejections, len(lines), RejectUnexpectedNode)
		}
	}
	for _, s := range seeds {
		if lines := s.log.Lines("Conflicting address"); len(lines) > 0 {
			t.Errorf("%s logged an address conflict, but the names differ: %v", s.name, lines)
		}
	}
}

// TestSeed000NewNameFindings: what ghostwatch reads from the list while
// the dead member and the new one share the address: gossip-ghost-member
// names both, and gossip-ip-identity the dead member's name.
func TestSeed000NewNameFindings(t *testing.T) {
	seeds := startCluster(t, "127.0.0.5", testLabel, keepDead)
	const addr = "127.0.0.54"
	a := startNode(t, ipName(addr), addr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	crash(t, a)
	b := startNode(t, "cache-7f3c9e1a", addr, port, testLabel, nil)
	joinAndWait(t, b, seeds)
	poll.UntilNoted(t, poll.Patience, a.name+" dead in cache-s1's list", stateOf(t, seeds[0], a.name, StateDead))

	var ghost, ipID *finding.Finding
	fs := ghostFindings(t, seeds[0], append(seeds, b)...)
	for i := range fs {
		switch fs[i].Rule {
		case rule.GossipGhostMemberID:
			ghost = &fs[i]
		case rule.GossipIPIdentityID:
			ipID = &fs[i]
		}
	}
	if ghost == nil || ghost.Severity != finding.Critical || ghost.Subject.IP != addr ||
		ghost.Evidence["member"] != a.name || ghost.Evidence["member_state"] != snapshot.MemberDead ||
		ghost.Evidence["other_member"] != b.name || (ghost.Evidence["other_state"] != snapshot.MemberAlive && ghost.Evidence["other_state"] != snapshot.MemberSuspect) {
		t.Errorf("gossip-ghost-member: %+v; want a critical finding on %s naming %s (dead) and %s (alive, or suspect for a moment on a busy machine)", ghost, addr, a.name, b.name)
	}
	if ipID == nil || !strings.Contains(ipID.Message, a.name) {
		t.Errorf("gossip-ip-identity: %+v; want it to name %s", ipID, a.name)
	}
}

// TestSeed000SameName: the seed's application names the new pod's member
// after its IP too, so it takes the dead pod's name with its address. The
// cluster is not shunning it: it takes it for the dead member come back.
// Its own alive message, at the dead member's incarnation, is ignored
// (state.go:1076); the dead state it learns from the join comes to it as a
// suspicion (state.go:1332), which it refutes with a higher incarnation
// (state.go:1194, refute at state.go:915), and the cluster lists one
// member alive at the address: nothing says the pod behind the name
// changed.
func TestSeed000SameName(t *testing.T) {
	seeds := startCluster(t, "127.0.0.6", testLabel, keepDead)
	const addr = "127.0.0.64"
	a := startNode(t, ipName(addr), addr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	crash(t, a)
	poll.UntilNoted(t, poll.Patience, a.name+" dead in cache-s1's list", stateOf(t, seeds[0], a.name, StateDead))
	dead, _ := seeds[0].members(t)
	incA := dead.member(a.name).Incarnation

	started := time.Now()
	b := startNode(t, ipName(addr), addr, port, testLabel, nil)
	if _, err := b.ml.Join([]string{seeds[0].address()}); err != nil {
		t.Fatalf("the new member's join: %v", err)
	}
	took := poll.UntilNoted(t, poll.Patience, a.name+" alive again in cache-s1's list", stateOf(t, seeds[0], a.name, StateAlive))
	l, _ := seeds[0].members(t)
	m := l.member(a.name)
	if m.Incarnation <= incA || m.Addr != addr || int(m.Port) != port {
		t.Errorf("%s after the new pod joined: %+v; want alive at %s:%d, incarnation above the dead member's %d", a.name, m, addr, port, incA)
	}
	if since, err := time.Parse(time.RFC3339, m.Since); err != nil || since.Before(started.Truncate(time.Second)) {
		t.Errorf("%s alive since %q, want after the new pod started (%v)", a.name, m.Since, started)
	}
	n := 0
	for _, x := range l.Members {
		if x.Addr == addr {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d members at %s, want one: the new pod has the dead one's identity %v", n, addr, l)
	}
	refuted := b.log.Lines("Refuting a")
	if len(refuted) == 0 {
		t.Errorf("the new member did not refute its death")
	}
	if l, _ := b.members(t); l.Rejections[RejectRefutedDeath] == 0 {
		t.Errorf("the new member's list counts %v, want its refutation as %s", l.Rejections, RejectRefutedDeath)
	}
	t.Logf("the new pod took over %s (incarnation %d -> %d) %v after it started; it logged: %s", a.name, incA, m.Incarnation, took, refuted)
}

// TestSeed000NameMoved: a name that moves to another address (a
// StatefulSet pod's name, kept by its successor at a new IP) is what
// memberlist shuns: while the old member is listed, alive, suspect or
// dead, the cluster rejects the new one ("Conflicting address for",
// state.go:1039-1071; DeadNodeReclaimTime 0 never lets a dead name move,
// state.go:1047-1051), until it forgets the old member and hears the new
// one again at a push/pull.
func TestSeed000NameMoved(t *testing.T) {
	seeds := startCluster(t, "127.0.0.7", testLabel, nil)
	const oldAddr, newAddr = "127.0.0.74", "127.0.0.75"
	a := startNode(t, "cache-0", oldAddr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	crashed := time.Now()
	crash(t, a)
	b := startNode(t, "cache-0", newAddr, port, testLabel, nil)
	if _, err := b.ml.Join([]string{seeds[0].address()}); err != nil {
		t.Fatalf("the new member's join: %v", err)
	}
	var sawOld bool
	poll.UntilNoted(t, poll.Patience, "cache-0 at "+newAddr+" in cache-s1's list", func() (bool, string) {
		l, _ := seeds[0].members(t)
		m := l.member("cache-0")
		if m != nil && m.Addr == oldAddr {
			sawOld = true
		}
		return m != nil && m.Addr == newAddr && m.State == StateAlive, l.String()
	})
	if !sawOld {
		t.Errorf("cache-s1 never listed the old cache-0 after the new one joined")
	}
	conflicts := seeds[0].log.Lines("Conflicting address for cache-0")
	if len(conflicts) == 0 {
		t.Fatalf("cache-s1 logged no address conflict for cache-0")
	}
	if l, _ := seeds[0].members(t); l.Rejections[RejectConflictingAddress] < uint64(len(conflicts)) {
		t.Errorf("cache-s1's list counts %v, want at least %d %s", l.Rejections, len(conflicts), RejectConflictingAddress)
	}
	t.Logf("cache-0 at %s shunned for %v after the crash (%d conflicts logged by cache-s1, e.g. %s)",
		newAddr, time.Since(crashed).Round(time.Millisecond), len(conflicts), conflicts[0])
}

// TestSeed000Prevented: with the package's identity and leave, the dying
// pod's member leaves on SIGTERM, and the new pod's member, of another
// name, joins on the same address cleanly: the cluster lists the old one
// left, never suspects it, never probes it at the new pod, then forgets it.
func TestSeed000Prevented(t *testing.T) {
	seeds := startCluster(t, "127.0.0.8", testLabel, nil)
	const addr = "127.0.0.84"
	nameOf := func(uid string) string {
		n, err := Identity{Getenv: envMap{EnvPodName: "cache-6d4f9", EnvPodUID: uid}.get}.MemberName()
		if err != nil {
			t.Fatal(err)
		}
		return n.Name
	}
	a := startNode(t, nameOf("0b6f3c1e-2a4d-4e8f-9c7b-1d2e3f4a5b6c"), addr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()

	ctx, sigterm := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { left <- LeaveOnDone(ctx, a.ml, DefaultLeaveTimeout) }()
	sigterm()
	if err := <-left; err != nil {
		t.Fatalf("leaving: %v", err)
	}
	// Kubernetes frees the address once the pod's sandbox is gone, after
	// the process exits, and gives it to a pod that is starting: seconds.
	// By then the members have heard the leave, and a probe they sent
	// before it has ended: a probe lasts at most ProbeInterval
	// (state.go:339). The test lets twice that pass.
	for _, s := range seeds {
		poll.UntilNoted(t, poll.Patience, a.name+" left in "+s.name+"'s list", stateOf(t, s, a.name, StateLeft))
	}
	time.Sleep(2 * seeds[0].cfg.ProbeInterval)
	b := startNode(t, nameOf("9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"), addr, port, testLabel, nil)
	joinAndWait(t, b, seeds)

	l, _ := seeds[0].members(t)
	if m := l.member(a.name); m != nil && m.State != StateLeft {
		t.Errorf("%s is %s in cache-s1's list; want left, or forgotten", a.name, m.State)
	} else if m != nil {
		// Left, not dead: ghostwatch says so (info), where a dead member
		// sharing the address is critical.
		for _, f := range ghostFindings(t, seeds[0], append(seeds, b)...) {
			if f.Severity != finding.Info || f.Evidence["member"] != a.name {
				t.Errorf("while %s is listed left: %s %s: %s", a.name, f.Severity, f.Rule, f.Message)
			}
		}
	}
	poll.UntilNoted(t, poll.Patience, a.name+" forgotten by every member", func() (bool, string) {
		var all []string
		gone := true
		for _, s := range seeds {
			l, _ := s.members(t)
			if m := l.member(b.name); m == nil || m.State == StateDead || m.State == StateLeft {
				t.Fatalf("%s is not listed live in %s's list %v", b.name, s.name, l)
			}
			if m := l.member(a.name); m != nil && m.State != StateLeft {
				t.Fatalf("%s is %s in %s's list %v, after it left", a.name, m.State, s.name, l)
			}
			gone = gone && l.member(a.name) == nil
			all = append(all, s.name+l.String())
		}
		return gone, strings.Join(all, " ")
	})
	for _, s := range seeds {
		for _, bad := range []string{"Marking " + a.name, "Conflicting address"} {
			if lines := s.log.Lines(bad); len(lines) > 0 {
				t.Errorf("%s: %v", s.name, lines)
			}
		}
	}
	if lines := b.log.Lines("Got ping for unexpected node"); len(lines) > 0 {
		t.Errorf("%s got pings meant for %s: %v", b.name, a.name, lines)
	}
	if fs := ghostFindings(t, seeds[0], append(seeds, b)...); len(fs) > 0 {
		t.Errorf("ghostwatch still finds ghosts once %s is forgotten: %+v", a.name, fs)
	}
}

// envMap is an environment; its get, an Identity.Getenv.
type envMap map[string]string

func (e envMap) get(k string) string { return e[k] }

// TestForeignLabel: a pod of another cluster (another label, as another
// namespace's application would have: memberlist#241) gets the address of
// a member that crashed. It cannot join the cluster nor be joined, it
// drops the cluster's probes and gossip meant for the dead member, and no
// list of the cluster ever shows it.
func TestForeignLabel(t *testing.T) {
	seeds := startCluster(t, "127.0.0.9", testLabel, nil)
	const addr = "127.0.0.94"
	a := startNode(t, "cache-5b2d8e7f", addr, 0, testLabel, nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	crash(t, a)
	f := startNode(t, "billing-cache-3c1a", addr, port, "billing/cache", nil)

	if _, err := f.ml.Join([]string{seeds[0].address()}); err == nil {
		t.Error("the foreign member joined the cluster")
	}
	if _, err := seeds[1].ml.Join([]string{f.address()}); err == nil {
		t.Error("a member of the cluster joined the foreign member at the reused address")
	}
	poll.UntilNoted(t, poll.Patience, a.name+" forgotten by every member", func() (bool, string) {
		var all []string
		gone := true
		for _, s := range seeds {
			l, _ := s.members(t)
			if l.member(f.name) != nil {
				t.Fatalf("%s lists the foreign member: %v", s.name, l)
			}
			gone = gone && l.member(a.name) == nil
			all = append(all, s.name+l.String())
		}
		return gone, strings.Join(all, " ")
	})
	if l, _ := f.members(t); len(l.Members) != 1 || l.Label != "billing/cache" {
		t.Errorf("the foreign member's own list: %v, label %q; want itself alone", l, l.Label)
	}
	// Streams and packets under another label are dropped (net.go:273-276
	// and 393-396).
	if lines := seeds[0].log.Lines("discarding stream with unacceptable label", `"billing/cache"`); len(lines) == 0 {
		t.Errorf("cache-s1 logged no stream with the foreign label")
	}
	if lines := f.log.Lines("discarding stream with unacceptable label", `"`+testLabel+`"`); len(lines) == 0 {
		t.Errorf("the foreign member logged no stream with the cluster's label")
	}
	if lines := f.log.Lines("discarding packet with unacceptable label", `"`+testLabel+`"`); len(lines) == 0 {
		t.Errorf("the foreign member logged no probe or gossip with the cluster's label")
	} else {
		t.Logf("the foreign member dropped %d packets of the cluster, e.g. %s", len(lines), lines[0])
	}
	// Both count them in their member lists, for ghostwatch's metric.
	for _, n := range []*testNode{seeds[0], f} {
		dropped := len(n.log.Lines("with unacceptable label"))
		if l, _ := n.members(t); l.Rejections[RejectLabel] < uint64(dropped) || dropped == 0 {
			t.Errorf("%s logged %d drops for the label, its list counts %v", n.name, dropped, l.Rejections)
		}
	}
}

// TestForeignNoLabel is TestForeignLabel without labels, memberlist#241:
// the foreign member joins the cluster at the reused address, and the two
// clusters become one.
func TestForeignNoLabel(t *testing.T) {
	seeds := startCluster(t, "127.0.0.10", "", nil)
	const addr = "127.0.0.104"
	a := startNode(t, "cache-5b2d8e7f", addr, 0, "", nil)
	joinAndWait(t, a, seeds)
	port := a.port()
	crash(t, a)
	f := startNode(t, "billing-cache-3c1a", addr, port, "", nil)
	if _, err := f.ml.Join([]string{seeds[0].address()}); err != nil {
		t.Fatalf("the foreign member's join: %v", err)
	}
	for _, s := range seeds {
		poll.UntilNoted(t, poll.Patience, "the foreign member alive in "+s.name+"'s list", stateOf(t, s, f.name, StateAlive))
	}
	poll.UntilNoted(t, poll.Patience, "the cluster in the foreign member's list", func() (bool, string) {
		l, _ := f.members(t)
		return l.member("cache-s1") != nil && l.member("cache-s3") != nil, l.String()
	})
}
