package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The gossip-reuse lab, as `ghostwatch-lab gossip-reuse` runs it, on real
// memberlist members and Serf agents: what each act's scans found, from
// the result, and the timeline saying the pods and the settings.
func TestGossipReuseScenario(t *testing.T) {
	var out strings.Builder
	start := time.Now()
	res, err := GossipReuse(context.Background(), GossipReuseOptions{Out: &out})
	t.Logf("lab gossip-reuse in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out.String())
	if errors.Is(err, ErrNoLoopback) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	acts := map[string]*GossipAct{}
	var ids []string
	for _, a := range res.Acts {
		acts[a.ID] = a
		ids = append(ids, a.Num+" "+a.ID)
	}
	// The Consul act plays where the consul binary is built (under CI,
	// scripts/test.sh builds it), and says how to build it elsewhere.
	_, err = consultest.Find()
	consul := err == nil
	want := []string{"1a ip-name-taken", "1b ip-name-new", "2 serf-force-leave", "3 pod-identity-leave", "4a foreign-no-label", "4b foreign-label"}
	if consul {
		want = slices.Insert(want, 3, "2b consul-force-leave")
	} else {
		if testenv.CI() {
			t.Errorf("%s is not set under CI: the Consul act did not play", consultest.BinEnv)
		}
		if !strings.Contains(out.String(), "act 2b (consul-force-leave) not played: no consul binary; `ghostwatch-lab build consul` (or --build) builds") {
			t.Errorf("the timeline does not say why the Consul act did not play")
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("acts %v, want %v", ids, want)
	}
	if res.Seconds <= 0 {
		t.Errorf("the lab took %.1fs", res.Seconds)
	}
	actsInOrder(t, res)

	// 1a: the new pod's member takes the dead one's name: one member at
	// the address, alive; only gossip-ip-identity warns.
	a := acts["ip-name-taken"]
	if a.Old != "node-127-0-0-113" || a.New != a.Old {
		t.Errorf("1a: old %q, new %q; want both node-127-0-0-113", a.Old, a.New)
	}
	if !slices.Equal(phases(a.OldStates), []string{"alive", "dead", "alive"}) {
		t.Errorf("1a: the old name went through %v, want alive, (suspect,) dead, alive again", a.OldStates)
	}
	taken := scanOf(t, a, "taken")
	for _, l := range taken.Lists {
		if n := atAddr(l, a.Addr); len(n) != 1 || n[0].Name != a.Old || n[0].State != snapshot.MemberAlive {
			t.Errorf("1a: %s lists %+v at %s, want %s alone, alive", l.SeenBy, n, a.Addr, a.Old)
		}
	}
	if rules := rulesOf(taken.Findings); !slices.Equal(rules, []string{"warning " + rule.GossipIPIdentityID}) {
		t.Errorf("1a: once taken, findings %v; want gossip-ip-identity alone", rules)
	}
	if a.Counts["refutations_by_new_member"] == 0 {
		t.Errorf("1a: the new member did not refute the dead one's death: %v", a.Counts)
	}

	// 1b: a name of its own: the dead member stays listed beside it, and
	// gossip-ghost-member names both, until memberlist forgets the dead
	// one.
	a = acts["ip-name-new"]
	if a.Old != "node-127-0-0-116" || a.New != "cache-4" {
		t.Errorf("1b: old %q, new %q", a.Old, a.New)
	}
	if ghostIn(scanOf(t, a, "dead").Findings) != nil {
		t.Errorf("1b: gossip-ghost-member before any pod held the dead member's address: %+v", scanOf(t, a, "dead").Findings)
	}
	wantGhost(t, "1b", scanOf(t, a, "ghost"), a, snapshot.MemberDead)
	if f := ghostIn(scanOf(t, a, "forgotten").Findings); f != nil {
		t.Errorf("1b: gossip-ghost-member once the dead member is forgotten: %s", f.Message)
	}
	if got := a.OldStates[len(a.OldStates)-1]; got != "forgotten" || !slices.Contains(a.OldStates, "dead") {
		t.Errorf("1b: the dead member went through %v, want dead, then forgotten", a.OldStates)
	}

	// 2: Serf keeps the crashed member failed beside the new one;
	// force-leave -prune clears it, and ghostwatch finds nothing.
	a = acts["serf-force-leave"]
	wantGhost(t, "2", scanOf(t, a, "ghost"), a, snapshot.MemberFailed)
	after := scanOf(t, a, "force-left")
	if len(after.Findings) != 0 {
		t.Errorf("2: after force-leave -prune: %v", rulesOf(after.Findings))
	}
	for _, l := range after.Lists {
		if l.Member(a.Old) != nil || l.Member(a.New) == nil {
			t.Errorf("2: after force-leave -prune %s lists %+v", l.SeenBy, l.Members)
		}
	}
	if a.Counts["reconnects_to_failed_member"] == 0 {
		t.Errorf("2: the survivor never reconnected to the failed member: %v", a.Counts)
	}

	// 2b: Consul, ACLs on: the crashed client named after its IP stays
	// failed beside the new pod's agent; force-leave -prune, with the
	// cluster's token, removes it, and nothing is found after.
	if consul {
		a = acts["consul-force-leave"]
		if a.Old != "node-127-0-0-126" || a.New != "consul-3" {
			t.Errorf("2b: old %q, new %q", a.Old, a.New)
		}
		wantGhost(t, "2b", scanOf(t, a, "ghost"), a, snapshot.MemberFailed)
		after := scanOf(t, a, "force-left")
		if len(after.Findings) != 0 {
			t.Errorf("2b: after force-leave -prune: %v", rulesOf(after.Findings))
		}
		for _, l := range after.Lists {
			if l.Member(a.Old) != nil || l.Member(a.New) == nil {
				t.Errorf("2b: after force-leave -prune %s lists %+v", l.SeenBy, l.Members)
			}
		}
	}

	// 3: names from the pod UID, a leave on SIGTERM: the old member is
	// left, never suspect or dead, nothing critical, nothing at the end.
	a = acts["pod-identity-leave"]
	if !strings.HasPrefix(a.Old, "cache-3-") || !strings.HasPrefix(a.New, "cache-4-") || len(a.Old) != len("cache-3-")+36 {
		t.Errorf("3: old %q, new %q; want $POD_NAME-$POD_UID", a.Old, a.New)
	}
	if !slices.Equal(phases(a.OldStates), []string{"alive", "left", "forgotten"}) {
		t.Errorf("3: the old member went through %v, want alive, left, forgotten", a.OldStates)
	}
	for _, sc := range a.Scans {
		for _, f := range sc.Findings {
			if f.Severity != finding.Info || f.Evidence["member"] != a.Old || f.Evidence["member_state"] != snapshot.MemberLeft {
				t.Errorf("3: %s: %s %s: %s", sc.Step, f.Severity, f.Rule, f.Message)
			}
		}
	}
	if fs := scanOf(t, a, "forgotten").Findings; len(fs) != 0 {
		t.Errorf("3: at the end: %v", rulesOf(fs))
	}
	if a.Counts["suspicions_of_left_member"] != 0 || a.Counts["pings_for_old_member_at_new_pod"] != 0 {
		t.Errorf("3: %v, want no suspicion of the member once listed left, and no ping for it", a.Counts)
	}

	// 4a: without labels the foreign pod's member joins, and stays: a
	// live member at a pod of another namespace.
	a = acts["foreign-no-label"]
	if !strings.HasPrefix(a.Reconnect, "joined") {
		t.Errorf("4a: the reconnect: %q", a.Reconnect)
	}
	for _, step := range []string{"merged", "forgotten"} {
		sc := scanOf(t, a, step)
		if f := foreignIn(sc.Findings, a.New); f == nil || f.Severity != finding.Critical {
			t.Errorf("4a: %s: no critical finding of %s at pod %s/cache-1: %v", step, a.New, foreignNS, rulesOf(sc.Findings))
		}
		if l := sc.Lists[0]; l.Member(a.New) == nil || !alive(l.Member(a.New).State) {
			t.Errorf("4a: %s: %s lists %+v, want %s alive", step, l.SeenBy, l.Members, a.New)
		}
	}

	// 4b: with the package's label the foreign member refuses the
	// cluster, and nothing is left once the dead member is forgotten.
	a = acts["foreign-label"]
	if a.Reconnect == "" || strings.HasPrefix(a.Reconnect, "joined") || a.Counts["refused_for_label_by_foreign_member"] == 0 {
		t.Errorf("4b: reconnect %q, counts %v; want it refused for its label", a.Reconnect, a.Counts)
	}
	for _, sc := range a.Scans {
		if foreignIn(sc.Findings, a.New) != nil {
			t.Errorf("4b: %s: the foreign member joined: %v", sc.Step, rulesOf(sc.Findings))
		}
		for _, l := range sc.Lists {
			if l.SeenBy != foreignNS+"/cache-1" && l.Member(a.New) != nil {
				t.Errorf("4b: %s: %s lists the foreign member", sc.Step, l.SeenBy)
			}
		}
	}
	if fs := scanOf(t, a, "forgotten").Findings; len(fs) != 0 {
		t.Errorf("4b: at the end: %v", rulesOf(fs))
	}

	for _, want := range []string{
		"pods, as the API server would list them: shop/cache-1 127.0.0.111 Running",
		"GossipToTheDeadTime 3s (30s by default)",
		"GossipToTheDeadTime 3s (15s by default)",
		"ReconnectInterval 200ms (30s by default)",
		"serf force-leave -prune cache-3",
		`discarding stream with unacceptable label "shop/cache"`,
		"stopped every member and agent it started",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
}

// actsInOrder checks that each act's events came in the order the gossip
// protocols give them, however long a busy machine made each take: an
// act's scans one after the other within it; a crashed member suspect
// before it is dead; a member forgotten after it was dead, and no sooner
// than GossipToTheDeadTime after its pod went (memberlist keeps a dead or
// left member that long at least). Timings are lower bounds and orders
// here, never upper bounds: load only makes them later.
func actsInOrder(t *testing.T, res *GossipReuseResult) {
	t.Helper()
	c := memberlist.DefaultLANConfig()
	memberlisttest.Shorten(c)
	toTheDead := c.GossipToTheDeadTime.Seconds()
	for _, a := range res.Acts {
		at := a.Started
		for _, sc := range a.Scans {
			if sc.At < at {
				t.Errorf("%s: scan %q at %.2fs, before the act's previous event at %.2fs", a.Num, sc.Step, sc.At, at)
			}
			at = sc.At
		}
		if a.Ended < at {
			t.Errorf("%s: ended at %.2fs, before its last scan at %.2fs", a.Num, a.Ended, at)
		}
		m := a.Measured
		gone, isGone := m["dead"]
		if !isGone {
			gone, isGone = m["failed"]
		}
		if suspect, ok := m["suspect"]; ok && isGone && suspect > gone {
			t.Errorf("%s: the old member suspect %.2fs after its pod went, after it was listed gone (%.2fs)", a.Num, suspect, gone)
		}
		forgotten, ok := m["forgotten"]
		if !ok {
			continue
		}
		if isGone && forgotten < gone {
			t.Errorf("%s: the old member forgotten %.2fs after its pod went, before it was listed gone (%.2fs)", a.Num, forgotten, gone)
		}
		if forgotten < toTheDead {
			t.Errorf("%s: the old member forgotten %.2fs after its pod went, sooner than GossipToTheDeadTime (%.0fs)", a.Num, forgotten, toTheDead)
		}
	}
}

// phases are the states a member went through, suspicions left out: a
// crashed member is suspect on its way to dead, and on a busy machine a
// live one may miss an ack and be suspect until it refutes.
func phases(states []string) []string {
	out := slices.DeleteFunc(slices.Clone(states), func(s string) bool { return s == snapshot.MemberSuspect })
	return slices.Compact(out)
}

func scanOf(t *testing.T, a *GossipAct, step string) *GossipScan {
	t.Helper()
	sc := a.Scan(step)
	if sc == nil {
		t.Fatalf("%s: no scan %q", a.ID, step)
	}
	return sc
}

// atAddr returns the members a list gives at addr.
func atAddr(l GossipList, addr string) []GossipListed {
	var out []GossipListed
	for _, m := range l.Members {
		if m.Addr == addr {
			out = append(out, m)
		}
	}
	return out
}

// rulesOf says "severity rule" for each distinct finding kind, sorted.
func rulesOf(fs []finding.Finding) []string {
	var out []string
	for _, f := range fs {
		s := f.Severity.String() + " " + f.Rule
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// ghostIn returns a gossip-ghost-member finding, or nil.
func ghostIn(fs []finding.Finding) *finding.Finding {
	for i := range fs {
		if fs[i].Rule == rule.GossipGhostMemberID {
			return &fs[i]
		}
	}
	return nil
}

// foreignIn returns the gossip-ghost-member finding of the live member
// name at a pod of the foreign namespace, or nil.
func foreignIn(fs []finding.Finding, name string) *finding.Finding {
	for i := range fs {
		f := &fs[i]
		if f.Rule == rule.GossipGhostMemberID && f.Evidence["member"] == name && f.Subject.Pod == foreignNS+"/cache-1" {
			return f
		}
	}
	return nil
}

// alive reports whether a live member's state is alive, or suspect: on a
// busy machine a live member may miss an ack, and refute the suspicion.
func alive(state string) bool {
	return state == snapshot.MemberAlive || state == snapshot.MemberSuspect
}

// wantGhost checks that every surviving member's list gave a critical
// gossip-ghost-member naming the old member, gone as state, and the new
// one, alive (or suspect for a moment), on the act's address.
func wantGhost(t *testing.T, act string, sc *GossipScan, a *GossipAct, state string) {
	t.Helper()
	var by []string
	for _, f := range sc.Findings {
		if f.Rule != rule.GossipGhostMemberID {
			continue
		}
		if f.Severity != finding.Critical || f.Subject.IP != a.Addr || f.Evidence["member"] != a.Old || f.Evidence["member_state"] != state ||
			f.Evidence["other_member"] != a.New || !alive(fmt.Sprint(f.Evidence["other_state"])) {
			t.Errorf("%s: %s %+v %v", act, f.Severity, f.Subject, f.Evidence)
		}
		by = append(by, f.Evidence["seen_by"].(string))
	}
	if len(by) != 2 {
		t.Errorf("%s: gossip-ghost-member in the lists of %v, want both surviving members'", act, by)
	}
}
