package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	pkggossip "github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/eventstest"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
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
			Annotations: map[string]string{AnnotationGossip: system}},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}},
	}
	if port != 0 {
		p.Annotations[AnnotationGossipPort] = strconv.Itoa(int(port))
	}
	return p
}

// startGossipReplica runs a controller with every cluster rule, reading the
// gossip clusters every 100 ms, and the remedies ids turned on.
func startGossipReplica(t *testing.T, client kubernetes.Interface, ids []string, st remedy.Settings) *replica {
	t.Helper()
	rules, _ := Rules(rule.All(rule.Config{}))
	r := &replica{m: NewMetrics(prometheus.NewRegistry(), rules), ev: &eventstest.Recorder{}, done: make(chan error, 1)}
	r.c = New(Config{Client: client, Dynamic: noCalico(), Identity: "replica-a", LeaseNamespace: "ghostwatch", LeaseName: "ghostwatch-controller",
		LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		Rules: rules, Metrics: r.m, Events: r.ev, Debounce: 10 * time.Millisecond, GossipInterval: 100 * time.Millisecond})
	if len(ids) > 0 {
		if err := r.c.EnableRemedies(ids, st); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- r.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
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
	waitFor(t, "the controller to read both members alive", func() bool { return r.members("shop/serf", "alive") == 2 })
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
	waitFor(t, "the ghost reported", func() bool { return r.ghosts("critical") == 1 })
	reported := time.Since(reissued)
	evs := r.ev.With("GossipGhostMember")
	if len(evs) == 0 || !strings.Contains(evs[0], "node-127-0-0-2 (failed) and node-8c1f3e (alive) share 127.0.0.2") || !strings.HasPrefix(evs[0], "Pod Warning shop/serf-2") {
		t.Errorf("Events of the finding: %q", evs)
	}
	waitFor(t, "the ghost forced out", func() bool { return r.actions(remedy.Done) == 1 })
	t.Logf("after the crash and the new pod: ghost reported in %v, forced out in %v (member lists read every 100 ms, grace 300 ms)",
		reported.Round(time.Millisecond), time.Since(reissued).Round(time.Millisecond))
	if evs := r.ev.With("GossipMemberForcedOut"); len(evs) != 1 || !strings.Contains(evs[0], "forced out member node-127-0-0-2 (failed, 127.0.0.2:") || !strings.Contains(evs[0], "of serf cluster shop/serf") {
		t.Errorf("Events of the action: %q", evs)
	}
	if slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-127-0-0-2" }) {
		t.Errorf("the survivor still lists the ghost: %v", survivor.Members())
	}
	waitFor(t, "the finding to clear", func() bool { return r.ghosts("critical") == 0 })
	if v := testutil.ToFloat64(r.m.RemedyCounter(rule.GossipGhostMemberID).WithLabelValues(rule.GossipGhostMemberID)); v != 1 {
		t.Errorf("gossip_members_forced_out_total = %v", v)
	}
	if n := r.members("shop/serf", "failed"); n != 0 {
		t.Errorf("%v failed members after the force-leave", n)
	}
}

// reissue plays the seed on the Serf cluster: old's member dies without
// leaving, its pod is deleted, and pod serf-2 gets its address, started 6
// s after listedBy, when the controller had read old's member listed
// (gossipSkew, 5 s, is the margin for clocks); a member of another name
// starts there and joins the survivor.
func reissue(t *testing.T, survivor, old *serftest.Agent, client *fake.Clientset, listedBy time.Time) {
	t.Helper()
	// Pod A's member dies without leaving; its pod is gone, and a new pod
	// gets its address. Its start time is 6 s after the controller first
	// read A's member listed: gossipSkew (5 s) is the margin for clocks.
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
	waitFor(t, "the dry run", func() bool { return r.actions(remedy.DryRun) >= 1 })
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
	waitFor(t, "the ghost reported", func() bool { return r.ghosts("critical") == 1 })
	// Several passes, each past the grace period.
	passes := testutil.ToFloat64(r.m.Passes)
	waitFor(t, "ten more passes", func() bool { return testutil.ToFloat64(r.m.Passes) >= passes+10 })
	if n := r.actions(remedy.Done) + r.actions(remedy.Pending) + r.actions(remedy.DryRun); n != 0 {
		t.Errorf("%v actions on a ghost whose pod may be the one at its address", n)
	}
	if !slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == "node-127-0-0-2" }) {
		t.Error("the ghost was forced out")
	}
}

// The pods informer keeps the annotations the leader reads, and no other.
func TestGossipAnnotationsSurviveTheTrim(t *testing.T) {
	p := gossipPodObj("a-0", "u0", "10.244.0.5", "consul", 8500, time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	p.Annotations[AnnotationGossipCluster] = "mesh"
	p.Annotations[AnnotationGossipScheme] = "https"
	want := maps.Clone(p.Annotations)
	p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{...}"
	got, err := trimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.(*corev1.Pod).Annotations; !maps.Equal(a, want) {
		t.Errorf("annotations kept: %v, want %v", a, want)
	}
}

// Annotations the controller cannot use name the pod and the annotation in
// the gossip source's status, and the gossip rules are skipped, not run on
// nothing.
func TestGossipAnnotationErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"unknown system", gossipPodObj("a", "u1", "127.0.0.9", "zookeeper", 1, time.Now()), `ghostwatch.io/gossip: "zookeeper" is not consul, serf or memberlist`},
		{"memberlist without a port", gossipPodObj("a", "u1", "127.0.0.9", "memberlist", 0, time.Now()), "ghostwatch.io/gossip-port: none given, and memberlist has no default port"},
		{"nothing listens", gossipPodObj("a", "u1", "127.0.0.9", "consul", 1, time.Now()), "gossip cluster shop/consul (consul): pod shop/a: consul GET http://127.0.0.9:1/v1/agent/members: dial tcp 127.0.0.9:1: connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startGossipReplica(t, fake.NewClientset(node("node-a"), tc.pod), nil, remedy.Settings{})
			waitFor(t, "a pass", func() bool { return !r.c.Status().LastPass.IsZero() })
			var got []string
			for _, sk := range r.c.Status().Skipped {
				if isGossipRule(sk.Rule) {
					got = append(got, fmt.Sprint(sk.NotApplicable, " ", sk.Reason))
				}
			}
			if len(got) != 2 || !strings.Contains(got[0], tc.want) || !strings.HasPrefix(got[0], "false") {
				t.Errorf("gossip rules skipped: %q, want not ready: %q", got, tc.want)
			}
			if v := testutil.ToFloat64(r.m.SourceUp.WithLabelValues("gossip")); v != 0 {
				t.Errorf("source_up{gossip} = %v", v)
			}
		})
	}
}

// The annotations, as the controller reads them.
func TestGossipPodOf(t *testing.T) {
	p := gossipPodObj("consul-0", "u1", "10.244.1.5", "consul", 0, time.Now())
	p.Annotations[AnnotationGossipCluster] = "mesh"
	p.Annotations[AnnotationGossipScheme] = "https"
	g, ok := gossipPodOf(p)
	if !ok || g.err != "" || g.key != (gossipKey{"consul", "shop/mesh"}) || g.port != 8500 || g.scheme != "https" || g.ip != netip.MustParseAddr("10.244.1.5") {
		t.Errorf("%+v %v", g, ok)
	}
	pending := p.DeepCopy()
	pending.Status.Phase = corev1.PodPending
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	noIP := p.DeepCopy()
	noIP.Status.PodIP = ""
	plain := p.DeepCopy()
	plain.Annotations = nil
	for name, q := range map[string]*corev1.Pod{"pending": pending, "deleting": deleting, "no IP": noIP, "not annotated": plain} {
		if _, ok := gossipPodOf(q); ok {
			t.Errorf("%s: read as a gossip member", name)
		}
	}
	bad := p.DeepCopy()
	bad.Annotations[AnnotationGossipPort] = "http"
	bad.Annotations[AnnotationGossipScheme] = "udp"
	if g, _ := gossipPodOf(bad); g.err != `ghostwatch.io/gossip-scheme: "udp" is not http or https; ghostwatch.io/gossip-port: "http" is not a port` {
		t.Errorf("errors: %q", g.err)
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
	waitFor(t, "the controller to read both members alive", func() bool { return members("alive") == 2 })

	_ = old.Stop()
	ctx := context.Background()
	if err := client.CoreV1().Pods("shop").Delete(ctx, "cache-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old member dead in the survivor's list", func() bool { return members("dead") == 1 })
	newcomer := start("cache-2-9e8d", "127.0.0.22", old.Port())
	if _, err := client.CoreV1().Pods("shop").Create(ctx, gossipPodObj("cache-2", "u2", "127.0.0.22", "memberlist", httpPort(newcomer), time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := newcomer.ML.Join([]string{survivor.Address()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ghost reported", func() bool { return r.ghosts("critical") == 1 })
	evs := r.ev.With("GossipGhostMember")
	if len(evs) == 0 || !strings.Contains(evs[0], "node-127-0-0-22 (dead) and cache-2-9e8d (alive) share 127.0.0.22") || !strings.HasPrefix(evs[0], "Pod Warning shop/cache-2") {
		t.Errorf("Events of the finding: %q", evs)
	}
	if v := testutil.ToFloat64(r.m.RuleGauge(rule.GossipGhostMemberID).WithLabelValues("memberlist", "shop/memberlist", "critical")); v != 1 {
		t.Errorf("ghostwatch_gossip_ghost_members = %v", v)
	}
}

// The gossip series come from the views of a pass whose gossip source was
// read; while it cannot be read they stay as they were.
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
	// Not read: the last values stand.
	m.Gossip(&snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "gossip", Status: snapshot.StatusError}}})
	if members("alive") != 2 || testutil.CollectAndCount(reg, "ghostwatch_gossip_join_rejections_total") != 2 {
		t.Error("an unread gossip source changed the series")
	}
	// No annotated pod: none.
	m.Gossip(&snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "gossip", Status: snapshot.StatusUnsupported}}})
	if testutil.CollectAndCount(reg, "ghostwatch_gossip_members", "ghostwatch_gossip_join_rejections_total") != 0 {
		t.Error("series left after the last annotated pod went")
	}
}

// fixedAgent answers a fixed view.
type fixedAgent struct{ v snapshot.GossipView }

func (a fixedAgent) Members(context.Context) (*snapshot.GossipView, error) {
	v := a.v
	v.Members = slices.Clone(a.v.Members)
	return &v, nil
}

// A view is taken for the pod's only when the agent that answered is at
// the pod's address, and no other pod holds it: an address is not an
// identity.
func TestGossipViewMustBeThePods(t *testing.T) {
	member := func(name, addr string) snapshot.GossipMember {
		return snapshot.GossipMember{Name: name, Addr: netip.MustParseAddr(addr), Port: 8301, Status: snapshot.MemberAlive}
	}
	for _, tc := range []struct {
		name  string
		view  snapshot.GossipView
		other *corev1.Pod
		want  string
	}{
		{"the pod's own agent", snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}, nil, ""},
		{"another agent answered", snapshot.GossipView{System: "consul", Local: "consul-9", Members: []snapshot.GossipMember{member("consul-9", "10.244.7.7")}}, nil,
			"pod shop/consul-0: the agent that answered is consul-9 at 10.244.7.7, not at the pod's address 10.244.1.5: the view is not the pod's"},
		{"an agent not in its own list", snapshot.GossipView{System: "consul", Local: "ghost", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}, nil,
			"the agent says it is ghost, which its own member list does not name"},
		{"another system", snapshot.GossipView{System: "serf", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}, nil,
			"answered with a serf member list, not consul"},
		{"two pods hold the address", snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}},
			podWithIP("web-0", "w", "node-a", "10.244.1.5", time.Now()),
			"2 pods hold 10.244.1.5 (duplicate-pod-ip): whose view answered is not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{node("node-a"), gossipPodObj("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now())}
			if tc.other != nil {
				objs = append(objs, tc.other)
			}
			rules, _ := Rules(rule.All(rule.Config{}))
			m := NewMetrics(prometheus.NewRegistry(), rules)
			var asked []GossipPod
			var mu sync.Mutex
			c := New(Config{Client: fake.NewClientset(objs...), Dynamic: noCalico(), Identity: "a", LeaseNamespace: "ghostwatch", LeaseName: "l",
				LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
				Rules: rules, Metrics: m, Debounce: 10 * time.Millisecond, GossipInterval: 100 * time.Millisecond,
				GossipAgent: func(p GossipPod) (sourcegossip.Agent, error) {
					mu.Lock()
					asked = append(asked, p)
					mu.Unlock()
					return fixedAgent{tc.view}, nil
				}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			defer func() { cancel(); <-done }()
			waitFor(t, "a pass", func() bool { return !c.Status().LastPass.IsZero() })
			up := testutil.ToFloat64(m.SourceUp.WithLabelValues("gossip"))
			var why string
			for _, sk := range c.Status().Skipped {
				if sk.Rule == rule.GossipGhostMemberID {
					why = sk.Reason
				}
			}
			switch {
			case tc.want == "" && (up != 1 || why != ""):
				t.Errorf("source_up %v, skipped: %q; want the view read", up, why)
			case tc.want != "" && (up != 0 || !strings.Contains(why, tc.want)):
				t.Errorf("source_up %v, skipped: %q; want %q", up, why, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 || asked[0].Addr != netip.MustParseAddrPort("10.244.1.5:8500") || asked[0].Cluster != "shop/consul" || asked[0].Scheme != "http" {
				t.Errorf("asked %+v", asked)
			}
		})
	}
}

// A member's pod that goes has its cluster read again within about a
// second, not at the next interval: the last view still counts it.
func TestGossipReadAgainWhenAMembersPodGoes(t *testing.T) {
	view := snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{
		{Name: "consul-0", Addr: netip.MustParseAddr("10.244.1.5"), Port: 8301, Status: snapshot.MemberAlive}}}
	client := fake.NewClientset(node("node-a"),
		gossipPodObj("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now().Add(-time.Hour)),
		gossipPodObj("consul-1", "u1", "10.244.1.6", "consul", 0, time.Now()))
	var mu sync.Mutex
	reads := 0
	rules, _ := Rules(rule.All(rule.Config{}))
	c := New(Config{Client: client, Dynamic: noCalico(), Identity: "a", LeaseNamespace: "ghostwatch", LeaseName: "l",
		LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		Rules: rules, Debounce: 10 * time.Millisecond, GossipInterval: time.Hour,
		GossipAgent: func(GossipPod) (sourcegossip.Agent, error) {
			mu.Lock()
			reads++
			mu.Unlock()
			return fixedAgent{view}, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return reads
	}
	waitFor(t, "a pass", func() bool { return !c.Status().LastPass.IsZero() })
	if n := count(); n != 1 {
		t.Fatalf("%d reads at start, want 1", n)
	}
	if err := client.CoreV1().Pods("shop").Delete(ctx, "consul-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cluster read again", func() bool { return count() == 2 })
}

// switchAgent answers a fixed view, or fails while down.
type switchAgent struct {
	v    snapshot.GossipView
	down *atomic.Bool
}

func (a switchAgent) Members(ctx context.Context) (*snapshot.GossipView, error) {
	if a.down.Load() {
		return nil, errors.New("connection refused")
	}
	return fixedAgent{a.v}.Members(ctx)
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
	rules, _ := Rules(rule.All(rule.Config{}))
	m := NewMetrics(prometheus.NewRegistry(), rules)
	c := New(Config{Client: client, Dynamic: noCalico(), Identity: "a", LeaseNamespace: "ghostwatch", LeaseName: "l",
		LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		Rules: rules, Metrics: m, Debounce: 10 * time.Millisecond, GossipInterval: 50 * time.Millisecond,
		GossipAgent: func(p GossipPod) (sourcegossip.Agent, error) {
			return switchAgent{views[p.System], down[p.System]}, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	up := func(system string) float64 {
		return testutil.ToFloat64(m.GossipClusterUp.WithLabelValues(system, "shop/"+system))
	}
	source := func() float64 { return testutil.ToFloat64(m.SourceUp.WithLabelValues("gossip")) }
	named := func() float64 {
		return testutil.ToFloat64(m.Findings.WithLabelValues(rule.GossipIPIdentityID, "warning"))
	}
	waitFor(t, "both clusters read, the IP-named member found", func() bool {
		return up("consul") == 1 && up("serf") == 1 && source() == 1 && named() == 1
	})

	down["consul"].Store(true)
	passes := testutil.ToFloat64(m.Passes)
	waitFor(t, "consul unread", func() bool { return up("consul") == 0 })
	waitFor(t, "more passes", func() bool { return testutil.ToFloat64(m.Passes) >= passes+3 })
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
	waitFor(t, "no cluster read", func() bool { return source() == 0 && up("serf") == 0 })
	if named() != 1 {
		t.Errorf("findings %v after every cluster became unreadable, want the last ones to stand", named())
	}
	down["consul"].Store(false)
	down["serf"].Store(false)
	waitFor(t, "both read again", func() bool { return up("consul") == 1 && up("serf") == 1 && source() == 1 })
}
