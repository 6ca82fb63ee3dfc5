package controller

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	pkggossip "github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/gossiptest"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// gossipPodObj is a running pod of namespace shop at ip, started at start,
// annotated as a member of a gossip cluster of system whose agent's API
// listens on port (no port annotation when 0).
func gossipPodObj(name, uid, ip, system string, port uint16, start time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.Time{Time: start},
			Annotations: map[string]string{sourcegossip.AnnotationGossip: system}},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}},
	}
	if port != 0 {
		p.Annotations[sourcegossip.AnnotationGossipPort] = strconv.Itoa(int(port))
	}
	return p
}

// startGossipReplica runs a controller with every cluster rule, reading the
// gossip clusters every 100 ms, and the remedies ids turned on.
func startGossipReplica(t *testing.T, client kubernetes.Interface, ids []string, st remedy.Settings) *replica {
	t.Helper()
	return startReplicaWith(t, client, "replica-a", setup{remedies: ids, settings: st})
}

func (r *replica) members(cluster, status string) float64 {
	return testutil.ToFloat64(r.m.GossipMembers.WithLabelValues("serf", cluster, status))
}

func (r *replica) ghosts(sev string) float64 {
	return testutil.ToFloat64(r.m.Findings.WithLabelValues(rule.GossipGhostMemberID, sev))
}

func (r *replica) actions(res remedy.Result) float64 {
	return testutil.ToFloat64(r.m.RemedyActions.WithLabelValues(rule.GossipGhostMemberID, string(res)))
}

// serfCluster starts two real Serf agents and their pods, annotated: the
// survivor serf-0 on 127.0.0.3, its RPC read by the controller, and serf-1
// on 127.0.0.2, whose member is named after its IP as in seed 000; and a
// controller with gossip-force-leave on (grace 300 ms; dry run when asked),
// once it read both members alive.
func serfCluster(t *testing.T, dryRun bool) (survivor, old *serftest.Agent, client *fake.Clientset, r *replica) {
	t.Helper()
	survivor = serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.3:0"), RPC: netip.MustParseAddrPort("127.0.0.3:0")})
	old = serftest.Start(t, serftest.Config{Name: "node-127-0-0-2", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	old.Join(t, survivor.Gossip)
	rpcPort := netip.MustParseAddrPort(survivor.RPC).Port()
	start := time.Now().Add(-time.Hour)
	client = fake.NewClientset(node("node-a"),
		gossipPodObj("serf-0", "u0", "127.0.0.3", "serf", rpcPort, start),
		gossipPodObj("serf-1", "u1", "127.0.0.2", "serf", 0, start.Add(time.Minute)))
	st := remedy.Settings{Grace: 300 * time.Millisecond, Budget: 5, BudgetInterval: time.Minute, DryRun: dryRun}
	r = startGossipReplica(t, client, []string{rule.GossipForceLeaveID}, st)
	poll.Until(t, poll.Patience, "the controller to read both members alive", func() bool { return r.members("shop/serf", "alive") == 2 })
	return survivor, old, client, r
}

// Seed 000 with real Serf agents, the controller reading the survivor's
// member list through its RPC, as the pod's annotations say: pod A's
// member, named after its IP, dies without leaving; a pod with a new
// member name starts on A's address. The controller reports the ghost with
// both identities, proves A's pod gone (the new pod started after it first
// read A's member listed), forces A's member out with the remedy, and the
// finding clears.
func TestSerfGhostForcedOutByTheController(t *testing.T) {
	survivor, old, client, r := serfCluster(t, false)
	if n := r.ghosts("critical") + r.ghosts("warning"); n != 0 {
		t.Fatalf("%v ghosts in a healthy cluster", n)
	}
	reissued := time.Now()
	reissue(t, survivor, old, client, reissued)
	poll.Until(t, poll.Patience, "the ghost reported", func() bool { return r.ghosts("critical") == 1 })
	reported := time.Since(reissued)
	evs := r.ev.With("GossipGhostMember")
	if len(evs) == 0 || !strings.Contains(evs[0], "node-127-0-0-2 (failed) and node-8c1f3e (alive) share 127.0.0.2") || !strings.HasPrefix(evs[0], "Pod Warning shop/serf-2") {
		t.Errorf("Events of the finding: %q", evs)
	}
	poll.Until(t, poll.Patience, "the ghost forced out", func() bool { return r.actions(remedy.Done) == 1 })
	t.Logf("after the crash and the new pod: ghost reported in %v, forced out in %v (member lists read every 100 ms, grace 300 ms)",
		reported.Round(time.Millisecond), time.Since(reissued).Round(time.Millisecond))
	if evs := r.ev.With("GossipMemberForcedOut"); len(evs) != 1 || !strings.Contains(evs[0], "forced out member node-127-0-0-2 (failed, 127.0.0.2:") || !strings.Contains(evs[0], "of serf cluster shop/serf") {
		t.Errorf("Events of the action: %q", evs)
	}
	if slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-127-0-0-2" }) {
		t.Errorf("the survivor still lists the ghost: %v", survivor.Members())
	}
	poll.Until(t, poll.Patience, "the finding to clear", func() bool { return r.ghosts("critical") == 0 })
	if v := testutil.ToFloat64(r.m.RemedyCounter(rule.GossipGhostMemberID).WithLabelValues(rule.GossipGhostMemberID)); v != 1 {
		t.Errorf("gossip_members_forced_out_total = %v", v)
	}
	if n := r.members("shop/serf", "failed"); n != 0 {
		t.Errorf("%v failed members after the force-leave", n)
	}
}

// reissue plays the seed on the Serf cluster: old's member dies without
// leaving, its pod is deleted, and pod serf-2 gets its address, created 6
// s after listedBy, when the controller had read old's member listed (the
// fake API server's clock is the controller's); a member of another name
// starts there and joins the survivor.
func reissue(t *testing.T, survivor, old *serftest.Agent, client *fake.Clientset, listedBy time.Time) {
	t.Helper()
	// Pod A's member dies without leaving; its pod is gone, and a new pod
	// gets its address, created 6 s after the controller first read A's
	// member listed.
	old.Kill()
	ctx := context.Background()
	if err := client.CoreV1().Pods("shop").Delete(ctx, "serf-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("shop").Create(ctx, gossipPodObj("serf-2", "u2", "127.0.0.2", "serf", 0, listedBy.Add(6*time.Second)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newcomer := serftest.Start(t, serftest.Config{Name: "node-8c1f3e", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	newcomer.Join(t, survivor.Gossip)
}

// With --dry-run the remedy says what it would do, as an Event and a
// metric, and does nothing.
func TestSerfGhostDryRun(t *testing.T) {
	survivor, old, client, r := serfCluster(t, true)
	reissue(t, survivor, old, client, time.Now())
	poll.Until(t, poll.Patience, "the dry run", func() bool { return r.actions(remedy.DryRun) >= 1 })
	if evs := r.ev.With("GossipForceLeaveDryRun"); len(evs) == 0 || !strings.Contains(evs[0], "would force out member node-127-0-0-2 (failed") {
		t.Errorf("Events: %q", evs)
	}
	if n := r.actions(remedy.Done); n != 0 {
		t.Errorf("%v members forced out in a dry run", n)
	}
	if !slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-127-0-0-2" }) {
		t.Error("the survivor no longer lists the ghost after a dry run")
	}
}

// Without proof that the ghost's pod is gone, the remedy does not act: the
// pod now at the address started before the controller first read the
// ghost listed, so it may be the ghost's own (a container restarted under a
// new member name).
func TestSerfGhostNotForcedOutWithoutProof(t *testing.T) {
	survivor, old, _, r := serfCluster(t, false)

	old.Kill()
	newcomer := serftest.Start(t, serftest.Config{Name: "node-8c1f3e", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	newcomer.Join(t, survivor.Gossip)
	poll.Until(t, poll.Patience, "the ghost reported", func() bool { return r.ghosts("critical") == 1 })
	// Several passes, each past the grace period.
	passes := testutil.ToFloat64(r.m.Passes)
	poll.Until(t, poll.Patience, "ten more passes", func() bool { return testutil.ToFloat64(r.m.Passes) >= passes+10 })
	if n := r.actions(remedy.Done) + r.actions(remedy.Pending) + r.actions(remedy.DryRun); n != 0 {
		t.Errorf("%v actions on a ghost whose pod may be the one at its address", n)
	}
	if !slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-127-0-0-2" }) {
		t.Error("the ghost was forced out")
	}
}

// Seed 000 with real memberlist members using the gossip package's
// member list, read by the controller over HTTP as the pods' annotations
// say: pod cache-1's member dies without leaving, and pod cache-2 starts
// on its address and port under another name. The controller reports the
// dead member and the new one on one address, on the new pod. memberlist
// has no force-leave: the finding offers none.
func TestMemberlistGhostReportedByTheController(t *testing.T) {
	start := func(name, addr string, port int) *memberlisttest.Member {
		c := pkggossip.DefaultPodConfig(name, "shop/cache")
		memberlisttest.Shorten(c)
		// The survivor keeps the dead member listed for as long as the
		// test may take on a loaded machine (shortened, it would forget
		// it 3 s after its death, maybe before the newcomer joins).
		c.GossipToTheDeadTime = 10 * time.Minute
		c.BindAddr, c.BindPort, c.AdvertisePort = addr, port, port
		view := pkggossip.Watch(c)
		m, err := memberlisttest.Start(c, func(ml *memberlist.Memberlist) http.Handler {
			mux := http.NewServeMux()
			mux.Handle(pkggossip.Path, view.Handler(ml))
			return mux
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop() })
		return m
	}
	httpPort := func(m *memberlisttest.Member) uint16 {
		u, err := url.Parse(m.URL)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(u.Port())
		return uint16(p)
	}
	survivor := start("cache-0-7f3a", "127.0.0.21", 0)
	old := start("node-127-0-0-22", "127.0.0.22", 0)
	if _, err := old.ML.Join([]string{survivor.Address()}); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	client := fake.NewClientset(node("node-a"),
		gossipPodObj("cache-0", "u0", "127.0.0.21", "memberlist", httpPort(survivor), hour),
		gossipPodObj("cache-1", "u1", "127.0.0.22", "memberlist", httpPort(old), hour.Add(time.Minute)))
	r := startGossipReplica(t, client, nil, remedy.Settings{})
	members := func(status string) float64 {
		return testutil.ToFloat64(r.m.GossipMembers.WithLabelValues("memberlist", "shop/memberlist", status))
	}
	poll.Until(t, poll.Patience, "the controller to read both members alive", func() bool { return members("alive") == 2 })

	_ = old.Stop()
	ctx := context.Background()
	if err := client.CoreV1().Pods("shop").Delete(ctx, "cache-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the old member dead in the survivor's list", func() bool { return members("dead") == 1 })
	newcomer := start("cache-2-9e8d", "127.0.0.22", old.Port())
	// cache-2 is stamped created beyond the timestamps' resolution after
	// the death, so that the controller proves it another identity at
	// once, as it does whenever the pod comes a second or more later.
	created := time.Now().Add(3 * time.Second)
	if _, err := client.CoreV1().Pods("shop").Create(ctx, gossipPodObj("cache-2", "u2", "127.0.0.22", "memberlist", httpPort(newcomer), created), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Before cache-2's member joins, the dead member is reported on the
	// new pod's address alone; once it has joined, the finding names both
	// and is reported again.
	poll.Until(t, poll.Patience, "the dead member reported alone on the new pod", func() bool {
		return slices.ContainsFunc(r.ev.With("GossipGhostMember"), func(ev string) bool {
			return strings.HasPrefix(ev, "Pod Warning shop/cache-2") && strings.Contains(ev, "node-127-0-0-22 is dead, and shop/cache-2 now holds 127.0.0.22")
		})
	})
	if _, err := newcomer.ML.Join([]string{survivor.Address()}); err != nil {
		t.Fatal(err)
	}
	both := func(ev string) bool {
		return strings.HasPrefix(ev, "Pod Warning shop/cache-2") &&
			strings.Contains(ev, "node-127-0-0-22 (dead) and cache-2-9e8d (alive) share 127.0.0.22")
	}
	poll.Until(t, poll.Patience, "the ghost reported with both members", func() bool {
		return slices.ContainsFunc(r.ev.With("GossipGhostMember"), both)
	})
	if n := r.ghosts("critical"); n != 1 {
		t.Errorf("%v critical ghosts, want 1", n)
	}
	if v := testutil.ToFloat64(r.m.RuleGauge(rule.GossipGhostMemberID).WithLabelValues("memberlist", "shop/memberlist", "critical")); v != 1 {
		t.Errorf("ghostwatch_gossip_ghost_members = %v", v)
	}
}

// The gossip series come from the views of a pass whose gossip source was
// read; while it cannot be read the members stay as they were, and every
// cluster is down.
func TestGossipMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil)
	view := snapshot.GossipView{System: "memberlist", Cluster: "shop/cache", Members: []snapshot.GossipMember{
		{Name: "a", Status: snapshot.MemberAlive}, {Name: "b", Status: snapshot.MemberAlive}, {Name: "c", Status: snapshot.MemberDead}},
		Rejections: map[string]uint64{"label": 4, "unexpected-node": 31}}
	read := &snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "gossip", Status: snapshot.StatusOK}}, Gossip: &snapshot.Gossip{Views: []snapshot.GossipView{view}}}
	m.Gossip(read)
	want := `
# HELP ghostwatch_gossip_join_rejections_total ` + rejectionsHelp + `
# TYPE ghostwatch_gossip_join_rejections_total counter
ghostwatch_gossip_join_rejections_total{cluster="shop/cache",reason="label",system="memberlist"} 4
ghostwatch_gossip_join_rejections_total{cluster="shop/cache",reason="unexpected-node",system="memberlist"} 31
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ghostwatch_gossip_join_rejections_total"); err != nil {
		t.Error(err)
	}
	members := func(st string) float64 {
		return testutil.ToFloat64(m.GossipMembers.WithLabelValues("memberlist", "shop/cache", st))
	}
	if members("alive") != 2 || members("dead") != 1 || members("failed") != 0 {
		t.Errorf("members alive %v dead %v failed %v", members("alive"), members("dead"), members("failed"))
	}
	up := func() float64 {
		return testutil.ToFloat64(m.GossipClusterUp.WithLabelValues("memberlist", "shop/cache"))
	}
	if up() != 1 {
		t.Errorf("gossip_cluster_up = %v for a cluster read", up())
	}
	// Not read: the members and rejections stand, every cluster is down.
	m.Gossip(&snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "gossip", Status: snapshot.StatusError}}})
	if members("alive") != 2 || testutil.CollectAndCount(reg, "ghostwatch_gossip_join_rejections_total") != 2 {
		t.Error("an unread gossip source changed the series")
	}
	if up() != 0 {
		t.Errorf("gossip_cluster_up = %v while no cluster can be read", up())
	}
	// No annotated pod: none.
	m.Gossip(&snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "gossip", Status: snapshot.StatusUnsupported}}})
	if testutil.CollectAndCount(reg, "ghostwatch_gossip_members", "ghostwatch_gossip_join_rejections_total") != 0 {
		t.Error("series left after the last annotated pod went")
	}
}

// One cluster that cannot be read is judged on its last view, and the
// others as they are read; only when none can be read is the source not
// ready. Either way what was found stands.
func TestGossipOneClusterUnread(t *testing.T) {
	views := map[string]snapshot.GossipView{
		"consul": {System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{
			{Name: "consul-0", Addr: netip.MustParseAddr("10.244.1.5"), Port: 8301, Status: snapshot.MemberAlive},
			{Name: "node-10-244-1-9", Addr: netip.MustParseAddr("10.244.1.9"), Port: 8301, Status: snapshot.MemberAlive}}},
		"serf": {System: "serf", Local: "serf-0", Members: []snapshot.GossipMember{
			{Name: "serf-0", Addr: netip.MustParseAddr("10.244.1.6"), Port: 7946, Status: snapshot.MemberAlive}}},
	}
	down := map[string]*atomic.Bool{"consul": {}, "serf": {}}
	client := fake.NewClientset(node("node-a"),
		gossipPodObj("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now().Add(-time.Hour)),
		gossipPodObj("consul-9", "u9", "10.244.1.9", "consul", 0, time.Now()),
		gossipPodObj("serf-0", "u1", "10.244.1.6", "serf", 0, time.Now().Add(-time.Hour)))
	r := startReplicaWith(t, client, "a", setup{gossipInterval: 50 * time.Millisecond,
		agent: func(p sourcegossip.Member) (sourcegossip.Agent, error) {
			return gossiptest.Switch{View: views[p.System], Down: down[p.System]}, nil
		}})
	m, c := r.m, r.c
	up := func(system string) float64 {
		return testutil.ToFloat64(m.GossipClusterUp.WithLabelValues(system, "shop/"+system))
	}
	source := func() float64 { return testutil.ToFloat64(m.SourceUp.WithLabelValues("gossip")) }
	named := func() float64 {
		return testutil.ToFloat64(m.Findings.WithLabelValues(rule.GossipIPIdentityID, "warning"))
	}
	poll.Until(t, poll.Patience, "both clusters read, the IP-named member found", func() bool {
		return up("consul") == 1 && up("serf") == 1 && source() == 1 && named() == 1
	})

	down["consul"].Store(true)
	passes := testutil.ToFloat64(m.Passes)
	poll.Until(t, poll.Patience, "consul unread", func() bool { return up("consul") == 0 })
	poll.Until(t, poll.Patience, "more passes", func() bool { return testutil.ToFloat64(m.Passes) >= passes+3 })
	if source() != 1 || up("serf") != 1 || named() != 1 {
		t.Errorf("one cluster unread: source_up %v, serf up %v, findings %v; want 1, 1 and the finding on consul's last view", source(), up("serf"), named())
	}
	var reason string
	for _, sk := range c.Status().Skipped {
		if isGossipRule(sk.Rule) {
			reason += sk.Reason
		}
	}
	if reason != "" {
		t.Errorf("rules skipped while one cluster was read: %s", reason)
	}

	down["serf"].Store(true)
	poll.Until(t, poll.Patience, "no cluster read", func() bool { return source() == 0 && up("serf") == 0 })
	if named() != 1 {
		t.Errorf("findings %v after every cluster became unreadable, want the last ones to stand", named())
	}
	down["consul"].Store(false)
	down["serf"].Store(false)
	poll.Until(t, poll.Patience, "both read again", func() bool { return up("consul") == 1 && up("serf") == 1 && source() == 1 })
}

// appPod is a running pod of an application, not annotated: ns/name at
// ip, created at created and, by its node's clock, started at started.
func appPod(ns, name, uid, ip string, created, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), CreationTimestamp: metav1.Time{Time: created}},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: started}},
	}
}

// A failed member whose own pod still runs at its address is no ghost,
// and is never forced out, however the evidence around it looks: its pod
// in another namespace than most members' (a cluster spanning namespaces),
// or its pod's startTime ahead of the controller's clock (its node's
// clock two minutes fast). Only the pod itself proves another identity:
// its creation, on the API server's clock, after the member was first
// read listed.
func TestSerfMembersOwnPodNeverForcedOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func(created time.Time) *corev1.Pod
	}{
		{"its pod in another namespace than most members'", func(created time.Time) *corev1.Pod {
			return appPod("apps", "web-1", "w1", "127.0.0.5", created, created.Add(time.Second))
		}},
		{"its node's clock two minutes ahead", func(created time.Time) *corev1.Pod {
			return appPod("shop", "web-1", "w1", "127.0.0.5", created, time.Now().Add(2*time.Minute))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			survivor := serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.3:0"), RPC: netip.MustParseAddrPort("127.0.0.3:0")})
			peer := serftest.Start(t, serftest.Config{Name: "serf-1", Gossip: netip.MustParseAddrPort("127.0.0.4:0")})
			member := serftest.Start(t, serftest.Config{Name: "node-5d1e", Gossip: netip.MustParseAddrPort("127.0.0.5:0")})
			peer.Join(t, survivor.Gossip)
			member.Join(t, survivor.Gossip)
			start := time.Now().Add(-time.Hour)
			client := fake.NewClientset(node("node-a"),
				gossipPodObj("serf-0", "u0", "127.0.0.3", "serf", netip.MustParseAddrPort(survivor.RPC).Port(), start),
				gossipPodObj("serf-1", "u1", "127.0.0.4", "serf", 0, start),
				tc.pod(start.Add(time.Minute)))
			st := remedy.Settings{Grace: 300 * time.Millisecond, Budget: 5, BudgetInterval: time.Minute}
			r := startGossipReplica(t, client, []string{rule.GossipForceLeaveID}, st)
			poll.Until(t, poll.Patience, "the controller to read the three members alive", func() bool { return r.members("shop/serf", "alive") == 3 })

			// The member's agent crashes; its pod runs on.
			member.Kill()
			poll.Until(t, poll.Patience, "the member read failed", func() bool { return r.members("shop/serf", "failed") == 1 })
			failed := time.Now()
			passes := testutil.ToFloat64(r.m.Passes)
			poll.Until(t, poll.Patience, "ten more passes, past the grace period", func() bool {
				return testutil.ToFloat64(r.m.Passes) >= passes+10 && time.Since(failed) > 2*st.Grace
			})
			if n := r.actions(remedy.Done) + r.actions(remedy.Pending) + r.actions(remedy.DryRun); n != 0 {
				t.Errorf("%v actions on a member whose own pod holds its address; events %q", n, r.ev.With("GossipMemberForcedOut"))
			}
			if n := r.ghosts("critical"); n != 0 {
				t.Errorf("%v critical ghosts; events %q", n, r.ev.With("GossipGhostMember"))
			}
			if !slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-5d1e" }) {
				t.Error("the member was forced out")
			}
		})
	}
}
