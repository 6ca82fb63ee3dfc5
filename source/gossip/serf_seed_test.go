package gossip_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/client"
	"github.com/hashicorp/serf/serf"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/gossip"
)

// Names of seed 000, played on loopback: the dead pod's member named after
// its IP, the new pod's member named after its pod UID, as the
// ghostwatch/gossip package names them.
const (
	ghostName    = "node-127-0-0-2"
	newName      = "node-8c1f3e"
	survivorName = "serf-survivor"
)

var (
	podAddr      = netip.MustParseAddr("127.0.0.2")
	survivorAddr = netip.MustParseAddr("127.0.0.3")
)

// waitView reads the agent's members through its RPC until ok holds, and
// fails the test after poll.Patience with the last view.
func waitView(t *testing.T, agent *gossip.Serf, what string, ok func(*snapshot.GossipView) bool) *snapshot.GossipView {
	t.Helper()
	var v *snapshot.GossipView
	poll.UntilNoted(t, poll.Patience, what, func() (bool, string) {
		var err error
		v, err = agent.Members(context.Background())
		return err == nil && ok(v), fmt.Sprintf("members %s, error %v", show(v), err)
	})
	return v
}

// waitLog waits until the log holds at least n lines with s after the
// mark, and returns them.
func waitLog(t *testing.T, a *serftest.Agent, from, n int, s string) []string {
	t.Helper()
	var lines []string
	poll.UntilNoted(t, poll.Patience, fmt.Sprintf("%s to log %q %d times", a.Name, s, n), func() (bool, string) {
		lines = a.Log.Lines(from, s)
		return len(lines) >= n, fmt.Sprintf("logged %d times", len(lines))
	})
	return lines
}

func status(v *snapshot.GossipView, name string) (snapshot.GossipMember, bool) {
	if v == nil {
		return snapshot.GossipMember{}, false
	}
	i := slices.IndexFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Name == name })
	if i < 0 {
		return snapshot.GossipMember{}, false
	}
	return v.Members[i], true
}

func show(v *snapshot.GossipView) string {
	if v == nil {
		return "none"
	}
	var s []string
	for _, m := range v.Members {
		s = append(s, fmt.Sprintf("%s %s:%d %s", m.Name, m.Addr, m.Port, m.Status))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// scan judges the agent's view as ghostwatch scan does: the members read
// through LiveSource, the pods from kube, the two gossip rules.
func scan(t *testing.T, agent *gossip.Serf, kube *snapshot.Kube) []finding.Finding {
	t.Helper()
	s := &snapshot.Snapshot{Taken: time.Now(), Kube: kube, Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}}}
	source.CollectInto(context.Background(), time.Now, s, &gossip.LiveSource{Agents: []gossip.Agent{agent}})
	fs, skipped := rule.Run(s, []rule.Rule{&rule.GossipGhostMember{}, &rule.GossipIPIdentity{}})
	if len(skipped) > 0 {
		t.Fatalf("skipped %+v (sources %+v)", skipped, s.Sources)
	}
	return fs
}

// seed is seed 000 played on loopback up to the new pod's member joining.
type seed struct {
	survivor, a, b *serftest.Agent
	// rpc reads the survivor through its RPC.
	rpc *gossip.Serf
	// died is when A was killed, failed when the survivor was first seen
	// listing it failed, podStart when the newcomer started; joined
	// marks the survivor's log when it had.
	died, failed, podStart time.Time
	joined                 int
}

// playSeed starts the survivor (tuned by tune) and A, named after its IP,
// on 127.0.0.2; kills A without leaving and waits until the survivor
// lists it failed and its reconnects to A's address are refused; then
// starts the newcomer, named newcomer, on A's address and port, and joins
// it to the survivor.
func playSeed(t *testing.T, newcomer string, tune func(*serf.Config)) *seed {
	t.Helper()
	s := &seed{}
	s.survivor = serftest.Start(t, serftest.Config{Name: survivorName, Gossip: netip.AddrPortFrom(survivorAddr, 0), RPC: netip.AddrPortFrom(survivorAddr, 0), Tune: tune})
	s.a = serftest.Start(t, serftest.Config{Name: ghostName, Gossip: netip.AddrPortFrom(podAddr, 0)})
	s.a.Join(t, s.survivor.Gossip)
	s.rpc = &gossip.Serf{Addr: s.survivor.RPC, Timeout: poll.Patience}
	waitView(t, s.rpc, "A alive", func(v *snapshot.GossipView) bool {
		m, ok := status(v, ghostName)
		return ok && m.Status == snapshot.MemberAlive
	})

	// A dies without leaving: Serf and memberlist shut down, no leave
	// message sent.
	mark := s.survivor.Log.Len()
	s.died = time.Now()
	s.a.Kill()
	waitView(t, s.rpc, "A failed", func(v *snapshot.GossipView) bool {
		m, ok := status(v, ghostName)
		return ok && m.Status == snapshot.MemberFailed
	})
	s.failed = time.Now()
	t.Logf("A failed %s after it died", s.failed.Sub(s.died).Round(time.Millisecond))
	waitLog(t, s.survivor, mark, 1, "serf: EventMemberFailed: "+ghostName+" 127.0.0.2")
	// Nobody answers at A's address yet: the reconnects are refused.
	addr := s.a.Gossip.String()
	waitLog(t, s.survivor, mark, 1, "memberlist: failed to join "+addr+": dial tcp "+addr+": connect: connection refused")

	// A new pod gets A's IP; its member binds A's address and port and
	// joins.
	s.podStart = time.Now()
	s.b = serftest.Start(t, serftest.Config{Name: newcomer, Gossip: s.a.Gossip})
	s.joined = s.survivor.Log.Len()
	s.b.Join(t, s.survivor.Gossip)
	return s
}

// pods is the cluster's pods: the new pod holds 127.0.0.2 and started
// after A failed; the survivor's pod holds 127.0.0.3.
func (s *seed) pods() *snapshot.Kube {
	return &snapshot.Kube{Pods: []snapshot.Pod{
		{UID: "4b2d", Namespace: "shop", Name: "serf-0", Node: "worker-1", Phase: snapshot.PodRunning, IPs: []netip.Addr{survivorAddr}, StartTime: s.died.Add(-time.Hour)},
		{UID: "8c1f3e", Namespace: "shop", Name: "serf-1", Node: "worker-2", Phase: snapshot.PodRunning, IPs: []netip.Addr{podAddr}, StartTime: s.podStart},
	}}
}

// Seed 000 on real Serf agents: member A, named after its IP, dies on
// 127.0.0.2 without leaving; a new member with another name starts on the
// same address and joins. The survivor keeps A as failed beside the
// newcomer, and keeps reconnecting to A at the address the newcomer now
// holds; ghostwatch reads that through the survivor's RPC, names both
// identities, and a force-leave with prune through the same RPC clears it.
func TestSerfSeed000(t *testing.T) {
	ctx := context.Background()
	s := playSeed(t, newName, nil)
	survivor, a, b, rpc, joined := s.survivor, s.a, s.b, s.rpc, s.joined
	v := waitView(t, rpc, "the newcomer alive beside failed A", func(v *snapshot.GossipView) bool {
		m, ok := status(v, newName)
		return ok && m.Status == snapshot.MemberAlive
	})

	// The symptom: both identities listed on one address, A failed, the
	// newcomer alive (serf members shows both, as the seed's consul
	// members does). Serf does not refuse the newcomer: its name is
	// new, and Serf keys members by name.
	ghost, _ := status(v, ghostName)
	fresh, _ := status(v, newName)
	if ghost.Status != snapshot.MemberFailed || ghost.Addr != podAddr || fresh.Addr != podAddr || ghost.Port != fresh.Port || ghost.Port != a.Gossip.Port() {
		t.Fatalf("want %s failed and %s alive on %s: %s", ghostName, newName, a.Gossip, show(v))
	}
	if v.System != "serf" || v.Local != survivorName || v.From != survivor.RPC || len(v.Members) != 3 {
		t.Errorf("view %s of %s (local %q, system %q): want 3 members seen by %s", show(v), v.From, v.Local, v.System, survivorName)
	}
	// The newcomer's own view never lists A: only the members that saw
	// A die keep the ghost.
	if slices.ContainsFunc(b.Members(), func(m serf.Member) bool { return m.Name == ghostName }) {
		t.Errorf("the newcomer lists %s: %v", ghostName, b.Members())
	}
	// The survivor keeps reconnecting to A, and every reconnect now
	// reaches the newcomer at A's address: a push/pull with it succeeds,
	// and A stays failed (for ReconnectTimeout, 24 h by default).
	pushPulls := waitLog(t, survivor, joined, 3, "memberlist: Initiating push/pull sync with: "+ghostName+" "+a.Gossip.String())
	if refused := survivor.Log.Lines(joined, "memberlist: failed to join "+a.Gossip.String()); len(refused) > 0 {
		t.Errorf("reconnects to %s refused after the newcomer bound it: %q", a.Gossip, refused)
	}
	attempts := survivor.Log.Lines(joined, "serf: attempting reconnect to "+ghostName+" "+a.Gossip.String())
	if len(attempts) < len(pushPulls) {
		t.Errorf("%d push/pulls with %s but %d reconnect attempts", len(pushPulls), ghostName, len(attempts))
	}
	v, err := rpc.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := status(v, ghostName); m.Status != snapshot.MemberFailed {
		t.Fatalf("after %d reconnects reaching the newcomer, %s is %q, want failed", len(pushPulls), ghostName, m.Status)
	}
	t.Logf("%d reconnects to %s at %s reached %s; %s still failed %s after it died", len(pushPulls), ghostName, a.Gossip, newName, ghostName, time.Since(s.died).Round(time.Millisecond))

	// ghostwatch on it.
	kube := s.pods()
	fs := scan(t, rpc, kube)
	var ghosts, idents []finding.Finding
	for _, f := range fs {
		switch f.Rule {
		case rule.GossipGhostMemberID:
			ghosts = append(ghosts, f)
		case rule.GossipIPIdentityID:
			idents = append(idents, f)
		}
	}
	if len(ghosts) != 1 || len(idents) != 1 || len(fs) != 2 {
		t.Fatalf("findings %+v: want one of each rule", fs)
	}
	g := ghosts[0]
	ev := g.Evidence
	if g.Severity != finding.Critical || g.Subject.IP != "127.0.0.2" || g.Subject.Pod != "shop/serf-1" ||
		ev["member"] != ghostName || ev["member_state"] != snapshot.MemberFailed || ev["other_member"] != newName || ev["other_state"] != snapshot.MemberAlive ||
		ev["seen_by"] != survivorName || ev["system"] != "serf" || ev["pod_uid"] != "8c1f3e" || ev["force_leave"] != "serf force-leave -prune "+ghostName {
		t.Errorf("gossip-ghost-member: %s %+v %+v", g.Severity, g.Subject, ev)
	}
	if !strings.Contains(g.Message, ghostName+" (failed) and "+newName+" (alive) share 127.0.0.2") {
		t.Errorf("message %q does not name both identities", g.Message)
	}
	id := idents[0]
	if id.Severity != finding.Warning || !slices.Equal(id.Evidence["named_after_ips"].([]string), []string{ghostName}) || id.Evidence["named_after_own_ip"] != 1 {
		t.Errorf("gossip-ip-identity: %s %+v", id.Severity, id.Evidence)
	}

	// What serf force-leave without -prune does: A goes left, and stays
	// listed beside the newcomer (for TombstoneTimeout, 24 h by
	// default), still a finding; the reconnects stop.
	left := survivor.Log.Len()
	plain, err := client.ClientFromConfig(&client.Config{Addr: survivor.RPC})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.ForceLeave(ghostName); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	v = waitView(t, rpc, "A left", func(v *snapshot.GossipView) bool {
		m, ok := status(v, ghostName)
		return ok && m.Status == snapshot.MemberLeft
	})
	if fs := scan(t, rpc, kube); !slices.ContainsFunc(fs, func(f finding.Finding) bool {
		return f.Rule == rule.GossipGhostMemberID && f.Severity == finding.Info && f.Evidence["member_state"] == snapshot.MemberLeft
	}) {
		t.Errorf("A left beside the newcomer: findings %+v, want an info finding", fs)
	}

	// Two push/pulls with the newcomer later (the reconnector ran ten
	// times meanwhile), none went to A.
	waitLog(t, survivor, left, 2, "memberlist: Initiating push/pull sync with: "+newName)
	if again := survivor.Log.Lines(left, "attempting reconnect to "+ghostName); len(again) > 0 {
		t.Errorf("reconnects to %s after it left: %q", ghostName, again)
	}

	// ghostwatch's force-leave prunes it: gone from the list, and the
	// findings with it.
	pruned := survivor.Log.Len()
	if err := rpc.ForceLeave(ctx, ghostName); err != nil {
		t.Fatal(err)
	}
	if v, err = rpc.Members(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := status(v, ghostName); ok || len(v.Members) != 2 {
		t.Errorf("after force-leave with prune: %s", show(v))
	}
	waitLog(t, survivor, pruned, 1, "serf: EventMemberReap (forced): "+ghostName)
	if fs := scan(t, rpc, kube); len(fs) != 0 {
		t.Errorf("after force-leave with prune: findings %+v", fs)
	}
}

// What Serf does on its own: it keeps the failed member for
// ReconnectTimeout after it failed, then reaps it, and the ghost with it.
// The test shortens ReconnectTimeout from 24 h to 2 s.
func TestSerfReapsAfterReconnectTimeout(t *testing.T) {
	const reconnectTimeout = 2 * time.Second
	s := playSeed(t, newName, func(c *serf.Config) { c.ReconnectTimeout = reconnectTimeout })
	waitView(t, s.rpc, "the newcomer alive", func(v *snapshot.GossipView) bool {
		m, ok := status(v, newName)
		return ok && m.Status == snapshot.MemberAlive
	})
	if fs := scan(t, s.rpc, s.pods()); !slices.ContainsFunc(fs, func(f finding.Finding) bool {
		return f.Rule == rule.GossipGhostMemberID && f.Severity == finding.Critical
	}) {
		t.Fatalf("before the reap: findings %+v, want the ghost", fs)
	}
	waitView(t, s.rpc, "A reaped", func(v *snapshot.GossipView) bool {
		_, ok := status(v, ghostName)
		return !ok
	})
	// A failed after it died, and was seen gone after it was reaped: the
	// reap came at least ReconnectTimeout after A died. How much later
	// (a reap interval, 100 ms, on an idle machine) is logged, not held
	// to a bound that a busy machine breaks.
	took := time.Since(s.died)
	t.Logf("A reaped %s after it died, %s after it was seen failed (ReconnectTimeout %s)",
		took.Round(time.Millisecond), time.Since(s.failed).Round(time.Millisecond), reconnectTimeout)
	if took < reconnectTimeout {
		t.Errorf("A reaped %s after it died, sooner than ReconnectTimeout (%s)", took, reconnectTimeout)
	}
	waitLog(t, s.survivor, 0, 1, "serf: EventMemberReap: "+ghostName)
	if fs := scan(t, s.rpc, s.pods()); slices.ContainsFunc(fs, func(f finding.Finding) bool { return f.Rule == rule.GossipGhostMemberID }) {
		t.Errorf("after the reap: findings %+v", fs)
	}
}

// The seed's root cause on real Serf agents: the newcomer on A's address
// is named after its IP too, so it takes A's name. Serf does not refuse
// it: memberlist tells it that its name is dead, it refutes with a
// higher incarnation, and the survivor lists A alive again, at once. No
// ghost is listed, and the new pod silently is A, which
// gossip-ip-identity warns of.
func TestSerfSameNameTakesOver(t *testing.T) {
	s := playSeed(t, ghostName, nil)
	v := waitView(t, s.rpc, "A alive again", func(v *snapshot.GossipView) bool {
		m, ok := status(v, ghostName)
		return ok && m.Status == snapshot.MemberAlive
	})
	t.Logf("A alive again %s after the newcomer started", time.Since(s.podStart).Round(time.Millisecond))
	if m, _ := status(v, ghostName); len(v.Members) != 2 || m.Addr != podAddr || m.Port != s.a.Gossip.Port() {
		t.Errorf("members %s", show(v))
	}
	// The newcomer learns that its name is dead from the survivor's
	// state (a suspect message, from itself) or from its gossip (a dead
	// message, from the survivor), and refutes.
	refuted := waitLog(t, s.b, 0, 1, "memberlist: Refuting a ")
	t.Logf("the newcomer: %s", refuted[0])
	fs := scan(t, s.rpc, s.pods())
	if len(fs) != 1 || fs[0].Rule != rule.GossipIPIdentityID {
		t.Errorf("findings %+v, want gossip-ip-identity alone", fs)
	}
}
