package gossip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/internal/gossiptest"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// waitFor polls cond until it holds, and fails the test when it does not
// within poll.Patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(poll.Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakePods is the cluster's pods as an informer with a handler hands them
// to the Watch: a pod is handed to the registered functions as it is set
// or deleted, and the pods are Listed only once every pod of the list
// was handed, as the handler registration's HasSynced says (not the
// informer's, which comes before its handlers have run).
type fakePods struct {
	mu     sync.Mutex
	fns    []func(*corev1.Pod, bool)
	pods   map[string]*corev1.Pod
	listed bool
	// polled counts the calls of Listed.
	polled int
}

func newPods() *fakePods { return &fakePods{pods: map[string]*corev1.Pod{}} }

func (f *fakePods) OnPod(fn func(*corev1.Pod, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fns = append(f.fns, fn)
}

func (f *fakePods) Listed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polled++
	return f.listed
}

func (f *fakePods) Reporting(a netip.Addr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.pods {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && ip.Unmap() == a {
			n++
		}
	}
	return n
}

func (f *fakePods) registered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fns)
}

func (f *fakePods) pollCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polled
}

// set adds or changes p, and hands it on.
func (f *fakePods) set(p *corev1.Pod) {
	f.mu.Lock()
	f.pods[p.Namespace+"/"+p.Name] = p.DeepCopy()
	fns := f.fns
	f.mu.Unlock()
	for _, fn := range fns {
		fn(p.DeepCopy(), false)
	}
}

// delete deletes the pod ns/name, and hands it on as deleted.
func (f *fakePods) delete(ns, name string) {
	f.mu.Lock()
	p, ok := f.pods[ns+"/"+name]
	delete(f.pods, ns+"/"+name)
	fns := f.fns
	f.mu.Unlock()
	if ok {
		for _, fn := range fns {
			fn(p, true)
		}
	}
}

// list hands every pod given on, in order, then says they are listed.
func (f *fakePods) list(pods ...*corev1.Pod) {
	for _, p := range pods {
		f.set(p)
	}
	f.mu.Lock()
	f.listed = true
	f.mu.Unlock()
}

// stop stops the pods' source: nothing is listed until it starts again.
// The pods named in gone are deleted meanwhile, unannounced: a source
// that starts afresh lists what is, and says nothing of what went.
func (f *fakePods) stop(gone ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = false
	for _, name := range gone {
		delete(f.pods, name)
	}
}

// restart starts the pods' source afresh: it lists every pod it holds
// again, handing each on.
func (f *fakePods) restart() {
	f.mu.Lock()
	var pods []*corev1.Pod
	for _, p := range f.pods {
		pods = append(pods, p)
	}
	f.mu.Unlock()
	f.list(pods...)
}

// plainPod is a running pod of namespace default at ip, not annotated.
func plainPod(name, uid, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: time.Now()}}}
}

// hostPod is a running hostNetwork pod of namespace kube-system reporting
// ip, its node's address.
func hostPod(name, uid, ip string) *corev1.Pod {
	p := plainPod(name, uid, ip)
	p.Namespace, p.Spec.HostNetwork = "kube-system", true
	return p
}

// agentFunc is an agent that answers with a function.
type agentFunc func(context.Context) (*snapshot.GossipView, error)

func (f agentFunc) Members(ctx context.Context) (*snapshot.GossipView, error) { return f(ctx) }

// leaver answers a fixed view, and records the members it forces out.
type leaver struct {
	gossiptest.Fixed
	mu   *sync.Mutex
	left *[]string
}

func (a leaver) ForceLeave(_ context.Context, node string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	*a.left = append(*a.left, node)
	return nil
}

// clock is a clock the test sets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// start starts w until the test ends.
func start(t *testing.T, w *Watch) context.CancelFunc {
	t.Helper()
	if w.Clusters == nil {
		w.Clusters = shopClusters()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return cancel
}

// shopClusters declares the clusters the tests' pods are annotated as
// members of: consul, serf and memberlist in namespace shop, and consul's
// mesh-0 to mesh-19 there, without credentials.
func shopClusters() *Declarations {
	d := &Declarations{}
	for _, sys := range []string{"consul", "serf", "memberlist"} {
		d.Clusters = append(d.Clusters, Declared{System: sys, Namespace: "shop"})
	}
	for i := range 20 {
		d.Clusters = append(d.Clusters, Declared{System: "consul", Namespace: "shop", Name: fmt.Sprintf("mesh-%d", i)})
	}
	return d
}

// collect collects w into a new snapshot.
func collect(w *Watch) (*snapshot.Snapshot, error) {
	s := &snapshot.Snapshot{}
	err := w.Collect(context.Background(), s)
	return s, err
}

// view finds the view of cluster in s.
func view(s *snapshot.Snapshot, system, cluster string) (snapshot.GossipView, bool) {
	if s.Gossip == nil {
		return snapshot.GossipView{}, false
	}
	for _, v := range s.Gossip.Views {
		if v.System == system && v.Cluster == cluster {
			return v, true
		}
	}
	return snapshot.GossipView{}, false
}

func member(name, addr string) snapshot.GossipMember {
	return snapshot.GossipMember{Name: name, Addr: netip.MustParseAddr(addr), Port: 8301, Status: snapshot.MemberAlive}
}

// Annotations the Watch cannot use name the pod and the annotation in the
// source's error, as does an agent that does not answer: the gossip rules
// are then skipped as not ready, not run on nothing, nor found not
// applicable.
func TestWatchAnnotationErrors(t *testing.T) {
	// The agent is Consul's API as the environment configures it: none
	// of its settings may stand in the way of the request.
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	t.Setenv("CONSUL_CACERT", "")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"unknown system", gossipPod("a", "u1", "127.0.0.9", "zookeeper", 1, time.Now()),
			`gossip cluster shop/zookeeper (zookeeper): pod shop/a: ghostwatch.io/gossip: "zookeeper" is not consul, serf or memberlist`},
		{"memberlist without a port", gossipPod("a", "u1", "127.0.0.9", "memberlist", 0, time.Now()),
			"gossip cluster shop/memberlist (memberlist): pod shop/a: ghostwatch.io/gossip-port: none given, and memberlist has no default port"},
		{"nothing listens", gossipPod("a", "u1", "127.0.0.9", "consul", 1, time.Now()),
			"gossip cluster shop/consul (consul): pod shop/a: consul GET http://127.0.0.9:1/v1/agent/members: dial tcp 127.0.0.9:1: connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := newPods()
			w := &Watch{Pods: pods, Interval: time.Hour}
			start(t, w)
			pods.list(tc.pod)
			waitFor(t, "a round", w.Settled)
			if err := w.Ready(time.Now()); err != nil {
				t.Errorf("not ready after a round: %v", err)
			}
			s, err := collect(w)
			if err == nil || err.Error() != tc.want || errors.Is(err, source.ErrUnsupported) {
				t.Errorf("Collect: %v\nwant the source failing: %s", err, tc.want)
			}
			if s.Gossip != nil {
				t.Errorf("a failing Collect set s.Gossip: %+v", s.Gossip)
			}
		})
	}
}

// No running pod annotated: the source is unsupported, and the gossip
// rules not applicable.
func TestWatchNoAnnotatedPod(t *testing.T) {
	pods := newPods()
	w := &Watch{Pods: pods, Interval: time.Hour}
	start(t, w)
	pods.list(plainPod("web-0", "w0", "10.244.1.7"))
	waitFor(t, "a round", w.Settled)
	s, err := collect(w)
	if !errors.Is(err, source.ErrUnsupported) || err.Error() != "no running pod is annotated ghostwatch.io/gossip" || s.Gossip != nil {
		t.Errorf("Collect: %v, %+v", err, s.Gossip)
	}
}

// A view is taken for the pod's only when the agent that answered is at
// the pod's address, of the system annotated, and the pod still holds the
// address, alone, once the answer is in: an address is not an identity.
func TestWatchViewMustBeThePods(t *testing.T) {
	own := snapshot.GossipView{System: "consul", Local: "consul-0", From: "agent", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}
	for _, tc := range []struct {
		name string
		view snapshot.GossipView
		// other is listed after the member's pod.
		other *corev1.Pod
		// during happens while the agent is asked.
		during func(*fakePods)
		want   string
		// notAsked: the agent (and the credential) is not even built,
		// let alone sent a request.
		notAsked bool
	}{
		{name: "the pod's own agent", view: own},
		{name: "another agent answered", view: snapshot.GossipView{System: "consul", Local: "consul-9", Members: []snapshot.GossipMember{member("consul-9", "10.244.7.7")}},
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: the agent that answered is consul-9 at 10.244.7.7, not at the pod's address 10.244.1.5: the view is not the pod's"},
		{name: "an agent not in its own list", view: snapshot.GossipView{System: "consul", Local: "ghost", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}},
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: the agent says it is ghost, which its own member list does not name"},
		{name: "another system", view: snapshot.GossipView{System: "serf", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}},
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: answered with a serf member list, not consul"},
		{name: "two pods hold the address", view: own, other: plainPod("web-0", "w", "10.244.1.5"), notAsked: true,
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: not asked: 2 pods report 10.244.1.5 (hostNetwork pods counted): an address is not an identity, so nothing is sent to it and no answer from it is taken for the pod's"},
		{name: "a hostNetwork pod reports the address", view: own, other: hostPod("kube-proxy-a", "k", "10.244.1.5"), notAsked: true,
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: not asked: 2 pods report 10.244.1.5 (hostNetwork pods counted): an address is not an identity, so nothing is sent to it and no answer from it is taken for the pod's"},
		{name: "the pod went while asked", view: own, during: func(p *fakePods) { p.delete("shop", "consul-0") },
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: the pod left its address while it was asked"},
		{name: "the pod moved while asked", view: own, during: func(p *fakePods) {
			p.set(gossipPod("consul-0", "u0", "10.244.1.8", "consul", 0, time.Now()))
		}, want: "gossip cluster shop/consul (consul): pod shop/consul-0: the pod left its address while it was asked"},
		{name: "a pod took the address while asked", view: own, during: func(p *fakePods) { p.set(plainPod("web-0", "w", "10.244.1.5")) },
			want: "gossip cluster shop/consul (consul): pod shop/consul-0: 2 pods report 10.244.1.5 (hostNetwork pods counted): an address is not an identity, so nothing is sent to it and no answer from it is taken for the pod's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := newPods()
			var mu sync.Mutex
			var asked []Member
			w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(m Member) (Agent, error) {
				mu.Lock()
				asked = append(asked, m)
				mu.Unlock()
				return agentFunc(func(ctx context.Context) (*snapshot.GossipView, error) {
					if tc.during != nil {
						tc.during(pods)
					}
					return gossiptest.Fixed{View: tc.view}.Members(ctx)
				}), nil
			}}
			// What the first round read, collected before a round that a
			// pod's going or moving asks for can follow it.
			var s *snapshot.Snapshot
			var err error
			read := make(chan struct{})
			var once sync.Once
			w.OnChange(func() {
				once.Do(func() {
					s, err = collect(w)
					close(read)
				})
			})
			start(t, w)
			objs := []*corev1.Pod{gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now())}
			if tc.other != nil {
				objs = append(objs, tc.other)
			}
			pods.list(objs...)
			waitFor(t, "a round", w.Settled)
			<-read
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Collect: %v; want the view read", err)
			case tc.want == "":
				v, ok := view(s, "consul", "shop/consul")
				if !ok || v.Unread != "" || v.From != "pod shop/consul-0 (agent)" || len(v.Members) != 1 {
					t.Errorf("view %+v", v)
				}
				if d := w.Describe(s); d != "1 clusters, 1 members" {
					t.Errorf("Describe: %q", d)
				}
			case err == nil || err.Error() != tc.want:
				t.Errorf("Collect: %v\nwant: %s", err, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			want := Member{Namespace: "shop", Name: "consul-0", UID: "u0", System: "consul", Cluster: "shop/consul", Addr: netip.MustParseAddrPort("10.244.1.5:8500"), Scheme: "http"}
			switch {
			case tc.notAsked && len(asked) != 0:
				t.Errorf("asked %+v; an address another pod reports must be sent nothing", asked)
			case !tc.notAsked && (len(asked) == 0 || asked[0] != want):
				t.Errorf("asked %+v, want %+v first", asked, want)
			}
		})
	}
}

// The clusters are read once every pod was handed to the Watch, not
// sooner: a pod that shares the member's address, handed last, is known
// when the member's view is taken. (The leader's reader started on the
// informer's own HasSynced, which comes before its handlers have run: its
// first round could miss the pods handed last, a member's own included.)
func TestWatchWaitsForThePodsListed(t *testing.T) {
	pods := newPods()
	var asked atomic.Int32
	w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(Member) (Agent, error) {
		asked.Add(1)
		return gossiptest.Fixed{View: snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}}, nil
	}}
	start(t, w)
	pods.set(gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now()))
	polled := pods.pollCount()
	waitFor(t, "the Watch to find the pods not listed, three times", func() bool { return pods.pollCount() >= polled+3 })
	if n := asked.Load(); n != 0 || w.Settled() {
		t.Fatalf("%d agents asked, settled %v, before the pods were listed", n, w.Settled())
	}
	if err := w.Ready(time.Now()); err == nil || err.Error() != "the gossip clusters' views were not read yet" {
		t.Errorf("Ready: %v", err)
	}
	if _, err := collect(w); err == nil || err.Error() != "the gossip clusters' views were not read yet" {
		t.Errorf("Collect: %v", err)
	}
	pods.list(plainPod("web-0", "w", "10.244.1.5"))
	waitFor(t, "a round", w.Settled)
	if _, err := collect(w); err == nil || !strings.Contains(err.Error(), "2 pods report 10.244.1.5") {
		t.Errorf("Collect: %v; want the view refused", err)
	}
}

// A cluster is read from its oldest pods first (then by namespace and
// name), three at most; a pod whose annotations cannot be used is named
// and not asked.
func TestWatchTriesThreeOldestFirst(t *testing.T) {
	hour := time.Now().Add(-time.Hour)
	bad := gossipPod("c-bad", "ub", "10.244.2.9", "consul", 0, hour.Add(-time.Minute))
	bad.Annotations[AnnotationGossipScheme] = "udp"
	pods := newPods()
	var mu sync.Mutex
	var asked []string
	up := map[string]bool{}
	w := &Watch{Pods: pods, Interval: 20 * time.Millisecond, Agent: func(m Member) (Agent, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, m.Name)
		if !up[m.Name] {
			return nil, errors.New("connection refused")
		}
		return gossiptest.Fixed{View: snapshot.GossipView{System: "consul", From: m.Addr.String()}}, nil
	}}
	var rounds atomic.Int32
	w.OnChange(func() { rounds.Add(1) })
	start(t, w)
	pods.list(gossipPod("c-3", "u3", "10.244.2.3", "consul", 0, hour.Add(2*time.Minute)),
		gossipPod("c-2", "u2", "10.244.2.2", "consul", 0, hour.Add(time.Minute)),
		gossipPod("c-1", "u1", "10.244.2.1", "consul", 0, hour.Add(time.Minute)),
		gossipPod("c-0", "u0", "10.244.2.0", "consul", 0, hour), bad)
	waitFor(t, "a round", w.Settled)
	_, err := collect(w)
	want := `gossip cluster shop/consul (consul): pod shop/c-bad: ghostwatch.io/gossip-scheme: "udp" is not http or https; ` +
		"pod shop/c-0: connection refused; pod shop/c-1: connection refused; pod shop/c-2: connection refused"
	if err == nil || err.Error() != want {
		t.Errorf("Collect: %v\nwant: %s", err, want)
	}
	mu.Lock()
	if got := asked[:min(len(asked), 3)]; !slices.Equal(got, []string{"c-0", "c-1", "c-2"}) {
		t.Errorf("asked %v first, want c-0, c-1, c-2", asked)
	}
	up["c-1"] = true
	asked = nil
	mu.Unlock()
	waitFor(t, "c-1's view", func() bool {
		s, err := collect(w)
		v, _ := view(s, "consul", "shop/consul")
		return err == nil && v.From == "pod shop/c-1 (10.244.2.1:8500)"
	})
	// Every round from now on started once c-1 answered.
	mu.Lock()
	asked = nil
	mu.Unlock()
	n := rounds.Load()
	waitFor(t, "two more rounds", func() bool { return rounds.Load() >= n+2 })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, "c-1") || slices.Contains(asked, "c-2") {
		t.Errorf("asked %v, want c-1, which answers, and not c-2", asked)
	}
}

// A round reads eight clusters at once, no more.
func TestWatchReadsAtMostEightAtOnce(t *testing.T) {
	pods := newPods()
	release := make(chan struct{})
	var mu sync.Mutex
	reading, most := 0, 0
	w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(Member) (Agent, error) {
		return agentFunc(func(ctx context.Context) (*snapshot.GossipView, error) {
			mu.Lock()
			reading++
			most = max(most, reading)
			mu.Unlock()
			defer func() {
				mu.Lock()
				reading--
				mu.Unlock()
			}()
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &snapshot.GossipView{System: "consul"}, nil
		}), nil
	}}
	start(t, w)
	var objs []*corev1.Pod
	for i := range 12 {
		p := gossipPod(fmt.Sprintf("c%d", i), fmt.Sprintf("u%d", i), fmt.Sprintf("10.244.3.%d", i+1), "consul", 0, time.Now())
		p.Annotations[AnnotationGossipCluster] = fmt.Sprintf("mesh-%d", i)
		objs = append(objs, p)
	}
	pods.list(objs...)
	waitFor(t, "eight clusters read at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reading == 8
	})
	close(release)
	waitFor(t, "a round", w.Settled)
	s, err := collect(w)
	if err != nil || len(s.Gossip.Views) != 12 {
		t.Fatalf("Collect: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 8 {
		t.Errorf("%d clusters read at once, want 8", most)
	}
}

// A member's pod that goes, or leaves its address, has its cluster read
// again within about a second, not at the next interval: the last view
// still counts it. A change that moves no member does not.
func TestWatchReadAgainWhenAMembersPodGoes(t *testing.T) {
	v := snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}
	pods := newPods()
	var reads atomic.Int32
	w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(Member) (Agent, error) {
		reads.Add(1)
		return gossiptest.Fixed{View: v}, nil
	}}
	var rounds atomic.Int32
	w.OnChange(func() { rounds.Add(1) })
	start(t, w)
	pods.list(gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now().Add(-time.Hour)),
		gossipPod("consul-1", "u1", "10.244.1.6", "consul", 0, time.Now()),
		gossipPod("consul-2", "u2", "10.244.1.7", "consul", 0, time.Now()))
	waitFor(t, "a round", func() bool { return rounds.Load() == 1 })
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads at start, want 1", n)
	}
	if c := w.Changes(); !c.All || c.Why != "gossip" {
		t.Errorf("Changes after a round: %+v", c)
	}
	if c := w.Changes(); !c.Empty() {
		t.Errorf("Changes taken twice: %+v", c)
	}
	pods.delete("shop", "consul-1")
	waitFor(t, "the cluster read again after a member's pod went", func() bool { return rounds.Load() == 2 })
	moved := gossipPod("consul-2", "u2", "10.244.1.8", "consul", 0, time.Now())
	pods.set(moved)
	waitFor(t, "the cluster read again after a member's pod moved", func() bool { return rounds.Load() == 3 })
	if n := reads.Load(); n != 3 {
		t.Errorf("%d reads, want 3", n)
	}
	if c := w.Changes(); !c.All {
		t.Errorf("Changes after more rounds: %+v", c)
	}
}

// One cluster that cannot be read is judged on its last view, and the
// others as they are read; only when none can be read does the source
// fail. A cluster never read is there without members.
func TestWatchOneClusterUnread(t *testing.T) {
	views := map[string]snapshot.GossipView{
		"consul": {System: "consul", Local: "consul-0", From: "consul-api", Members: []snapshot.GossipMember{
			member("consul-0", "10.244.1.5"), member("node-10-244-1-9", "10.244.1.9")}},
		"serf":       {System: "serf", Local: "serf-0", From: "serf-rpc", Members: []snapshot.GossipMember{member("serf-0", "10.244.1.6")}},
		"memberlist": {System: "memberlist", Local: "cache-0", Members: []snapshot.GossipMember{member("cache-0", "10.244.1.10")}},
	}
	down := map[string]*atomic.Bool{"consul": {}, "serf": {}, "memberlist": {}}
	down["memberlist"].Store(true)
	pods := newPods()
	w := &Watch{Pods: pods, Interval: 10 * time.Millisecond, Agent: func(m Member) (Agent, error) {
		return gossiptest.Switch{View: views[m.System], Down: down[m.System]}, nil
	}}
	var rounds atomic.Int32
	w.OnChange(func() { rounds.Add(1) })
	start(t, w)
	pods.list(gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now().Add(-time.Hour)),
		gossipPod("consul-9", "u9", "10.244.1.9", "consul", 0, time.Now()),
		gossipPod("serf-0", "u1", "10.244.1.6", "serf", 0, time.Now().Add(-time.Hour)),
		gossipPod("cache-0", "u2", "10.244.1.10", "memberlist", 8080, time.Now()))
	waitFor(t, "a round", w.Settled)
	s, err := collect(w)
	if err != nil {
		t.Fatal(err)
	}
	ml, _ := view(s, "memberlist", "shop/memberlist")
	wantML := "gossip cluster shop/memberlist (memberlist): pod shop/cache-0: connection refused"
	if ml.From != "not read yet" || len(ml.Members) != 0 || ml.Unread != wantML {
		t.Errorf("a cluster never read: %+v", ml)
	}
	if d := w.Describe(s); d != "3 clusters, 3 members; 1 not read again, judged on their last view: "+wantML {
		t.Errorf("Describe: %q", d)
	}

	down["consul"].Store(true)
	n := rounds.Load()
	waitFor(t, "a round after consul went down", func() bool { return rounds.Load() >= n+2 })
	s, err = collect(w)
	if err != nil {
		t.Fatalf("Collect with one cluster read: %v", err)
	}
	c, _ := view(s, "consul", "shop/consul")
	wantC := "gossip cluster shop/consul (consul): pod shop/consul-0: connection refused; pod shop/consul-9: connection refused"
	if c.Unread != wantC || len(c.Members) != 2 || c.From != "pod shop/consul-0 (consul-api)" {
		t.Errorf("consul unread, judged on its last view: %+v", c)
	}
	if sf, _ := view(s, "serf", "shop/serf"); sf.Unread != "" || sf.From != "pod shop/serf-0 (serf-rpc)" {
		t.Errorf("serf read: %+v", sf)
	}
	if d := w.Describe(s); d != "3 clusters, 3 members; 2 not read again, judged on their last view: "+wantC+"; "+wantML {
		t.Errorf("Describe: %q", d)
	}

	down["serf"].Store(true)
	n = rounds.Load()
	waitFor(t, "a round after serf went down", func() bool { return rounds.Load() >= n+2 })
	s, err = collect(w)
	if want := wantC + "; " + wantML + "; gossip cluster shop/serf (serf): pod shop/serf-0: connection refused"; err == nil || err.Error() != want {
		t.Errorf("Collect with no cluster read: %v\nwant: %s", err, want)
	}
	if s.Gossip != nil {
		t.Error("a failing Collect set s.Gossip")
	}
	down["consul"].Store(false)
	down["serf"].Store(false)
	waitFor(t, "both read again", func() bool {
		s, err := collect(w)
		c, _ := view(s, "consul", "shop/consul")
		sf, _ := view(s, "serf", "shop/serf")
		return err == nil && c.Unread == "" && sf.Unread == ""
	})
}

// A member whose view does not say when it went is stamped with when the
// Watch first read it listed; a cluster no longer annotated is forgotten,
// and its times with it.
func TestWatchStampsFirstListed(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	since := t0.Add(-time.Hour)
	var mu sync.Mutex
	ms := []snapshot.GossipMember{member("consul-0", "10.244.1.5"), member("b", "10.244.1.11")}
	withSince := member("s", "10.244.1.12")
	withSince.Since = since
	ms = append(ms, withSince)
	pods := newPods()
	w := &Watch{Pods: pods, Interval: 10 * time.Millisecond, Now: clk.Now, Agent: func(Member) (Agent, error) {
		mu.Lock()
		defer mu.Unlock()
		return gossiptest.Fixed{View: snapshot.GossipView{System: "consul", Local: "consul-0", Members: slices.Clone(ms)}}, nil
	}}
	start(t, w)
	consul := gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now())
	pods.list(consul)
	waitFor(t, "a round", w.Settled)
	listed := func(name string) (time.Time, bool) {
		s, err := collect(w)
		if err != nil {
			return time.Time{}, false
		}
		v, _ := view(s, "consul", "shop/consul")
		i := slices.IndexFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Name == name })
		if i < 0 {
			return time.Time{}, false
		}
		return v.Members[i].Listed, true
	}
	if l, ok := listed("b"); !ok || !l.IsZero() {
		t.Errorf("b first read: listed %v %v, want no time yet", l, ok)
	}

	t1 := t0.Add(time.Minute)
	clk.set(t1)
	mu.Lock()
	ms = append(ms, member("c", "10.244.1.13"))
	mu.Unlock()
	waitFor(t, "c read", func() bool { _, ok := listed("c"); return ok })
	waitFor(t, "c read again", func() bool { l, _ := listed("c"); return l.Equal(t1) })
	if l, _ := listed("b"); !l.Equal(t0) {
		t.Errorf("b listed %v, want %v", l, t0)
	}
	if l, _ := listed("s"); !l.IsZero() {
		t.Errorf("a member whose view says when it changed was stamped %v", l)
	}

	pods.delete("shop", "consul-0")
	waitFor(t, "the cluster forgotten", func() bool {
		_, err := collect(w)
		return errors.Is(err, source.ErrUnsupported)
	})
	clk.set(t1.Add(time.Minute))
	pods.set(consul)
	waitFor(t, "the cluster read again", func() bool { _, ok := listed("b"); return ok })
	if l, _ := listed("b"); !l.IsZero() {
		t.Errorf("b listed %v after its cluster was forgotten, want no time yet", l)
	}
}

// Fresh reads again the clusters a re-check names, and only those, with
// the same checks as a round; a cluster it cannot read is left out. A
// query that names no cluster leaves the snapshot as it is.
func TestWatchFresh(t *testing.T) {
	views := map[string]snapshot.GossipView{
		"consul": {System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}},
		"serf":   {System: "serf", Local: "serf-0", Members: []snapshot.GossipMember{member("serf-0", "10.244.1.6")}},
	}
	down := map[string]*atomic.Bool{"consul": {}, "serf": {}}
	var mu sync.Mutex
	reads := map[string]int{}
	pods := newPods()
	w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(m Member) (Agent, error) {
		mu.Lock()
		reads[m.System]++
		mu.Unlock()
		return gossiptest.Switch{View: views[m.System], Down: down[m.System]}, nil
	}}
	count := func(system string) int {
		mu.Lock()
		defer mu.Unlock()
		return reads[system]
	}
	start(t, w)
	pods.list(gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now()),
		gossipPod("serf-0", "u1", "10.244.1.6", "serf", 0, time.Now()))
	waitFor(t, "a round", w.Settled)
	found, err := collect(w)
	if err != nil || len(found.Gossip.Views) != 2 {
		t.Fatalf("Collect: %v", err)
	}
	ctx := context.Background()
	serf := snapshot.GossipCluster{System: "serf", Cluster: "shop/serf"}
	consul := snapshot.GossipCluster{System: "consul", Cluster: "shop/consul"}

	s := &snapshot.Snapshot{Gossip: found.Gossip}
	if err := w.Fresh(ctx, snapshot.Query{Gossip: []snapshot.GossipCluster{serf, serf}}, s); err != nil {
		t.Fatal(err)
	}
	if len(s.Gossip.Views) != 1 || s.Gossip.Views[0].Cluster != "shop/serf" || s.Gossip.Views[0].From != "pod shop/serf-0 ()" {
		t.Errorf("fresh views %+v, want serf's alone", s.Gossip.Views)
	}
	if count("serf") != 2 || count("consul") != 1 {
		t.Errorf("reads %v, want serf read once again and consul not", reads)
	}
	if len(found.Gossip.Views) != 2 {
		t.Error("Fresh changed the snapshot it replaced the views of")
	}

	down["consul"].Store(true)
	s = &snapshot.Snapshot{Gossip: found.Gossip}
	q := snapshot.Query{Gossip: []snapshot.GossipCluster{consul, serf, {System: "consul", Cluster: "shop/nobody"}}}
	if err := w.Fresh(ctx, q, s); err != nil {
		t.Fatal(err)
	}
	if len(s.Gossip.Views) != 1 || s.Gossip.Views[0].Cluster != "shop/serf" {
		t.Errorf("fresh views %+v, want serf's alone: consul cannot be read, nobody annotates shop/nobody", s.Gossip.Views)
	}

	// A pod that takes serf-0's address: its agent's view is no longer
	// known to be the pod's.
	pods.set(plainPod("web-0", "w", "10.244.1.6"))
	s = &snapshot.Snapshot{Gossip: found.Gossip}
	if err := w.Fresh(ctx, snapshot.Query{Gossip: []snapshot.GossipCluster{serf}}, s); err != nil {
		t.Fatal(err)
	}
	if s.Gossip == nil || len(s.Gossip.Views) != 0 {
		t.Errorf("fresh views %+v, want none: two pods hold serf-0's address", s.Gossip)
	}

	before := count("consul") + count("serf")
	s = &snapshot.Snapshot{Gossip: found.Gossip}
	if err := w.Fresh(ctx, snapshot.Query{PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}, s); err != nil {
		t.Fatal(err)
	}
	if s.Gossip != found.Gossip || len(s.Gossip.Views) != 2 {
		t.Errorf("a query naming no cluster changed s.Gossip: %+v", s.Gossip)
	}
	if n := count("consul") + count("serf"); n != before {
		t.Errorf("a query naming no cluster read %d clusters", n-before)
	}
}

// ReadCluster reads one cluster afresh, with the means to force a member
// out through the agent that answered, when it has them.
func TestWatchReadCluster(t *testing.T) {
	var mu sync.Mutex
	var left []string
	pods := newPods()
	w := &Watch{Pods: pods, Interval: time.Hour, Agent: func(m Member) (Agent, error) {
		switch m.System {
		case "consul":
			return leaver{gossiptest.Fixed{View: snapshot.GossipView{System: "consul", Local: "consul-0", Members: []snapshot.GossipMember{member("consul-0", "10.244.1.5")}}}, &mu, &left}, nil
		default:
			return gossiptest.Fixed{View: snapshot.GossipView{System: "memberlist", Local: "cache-0", Members: []snapshot.GossipMember{member("cache-0", "10.244.1.10")}}}, nil
		}
	}}
	start(t, w)
	pods.list(gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now()),
		gossipPod("cache-0", "u1", "10.244.1.10", "memberlist", 8080, time.Now()))
	ctx := context.Background()
	v, leave, err := w.ReadCluster(ctx, snapshot.GossipCluster{System: "consul", Cluster: "shop/consul"})
	if err != nil || v.Cluster != "shop/consul" || v.From != "pod shop/consul-0 ()" || leave == nil {
		t.Fatalf("consul: %+v, leave %v, %v", v, leave != nil, err)
	}
	if err := leave(ctx, "node-10-244-1-9"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(left, []string{"node-10-244-1-9"}) {
		t.Errorf("forced out %v", left)
	}
	mu.Unlock()
	// The force-leave carries the credential: once another pod reports
	// the agent's address (here a hostNetwork pod), it is not sent, and
	// says so.
	pods.set(hostPod("kube-proxy-a", "k", "10.244.1.5"))
	err = leave(ctx, "node-10-244-1-8")
	var ns *NotSentError
	if !errors.As(err, &ns) || !ns.NotSent() {
		t.Errorf("leave with the address shared = %v; want a NotSentError", err)
	}
	mu.Lock()
	if !slices.Equal(left, []string{"node-10-244-1-9"}) {
		t.Errorf("forced out %v; nothing may be sent to a shared address", left)
	}
	mu.Unlock()
	if v, leave, err := w.ReadCluster(ctx, snapshot.GossipCluster{System: "memberlist", Cluster: "shop/memberlist"}); err != nil || v == nil || leave != nil {
		t.Errorf("memberlist: %+v, leave %v, %v; want the view and no force-leave", v, leave != nil, err)
	}
	if _, _, err := w.ReadCluster(ctx, snapshot.GossipCluster{System: "consul", Cluster: "shop/nobody"}); err == nil || err.Error() != "gossip cluster shop/nobody (consul): no pod to ask" {
		t.Errorf("a cluster nobody annotates: %v", err)
	}
}

// A Start once the ctx of the last one ended starts afresh: no round read
// yet, the first-listed times forgotten, and the annotated pods learnt
// again from the pods' source, which lists them again (a pod gone in
// between is not asked). OnPod is registered once. A Start while the
// last one runs is refused.
func TestWatchStartsAfresh(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	pods := newPods()
	var mu sync.Mutex
	var asked []string
	w := &Watch{Pods: pods, Clusters: shopClusters(), Interval: time.Hour, Now: clk.Now, Agent: func(m Member) (Agent, error) {
		mu.Lock()
		asked = append(asked, m.Name)
		mu.Unlock()
		if m.System == "serf" {
			return gossiptest.Fixed{View: snapshot.GossipView{System: "serf", Local: "serf-0", Members: []snapshot.GossipMember{member("serf-0", "10.244.1.6")}}}, nil
		}
		return gossiptest.Fixed{View: snapshot.GossipView{System: "consul", Members: []snapshot.GossipMember{member("a", "10.244.1.11")}}}, nil
	}}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	if err := w.Start(ctx1); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	pods.list(gossipPod("consul-1", "u1", "10.244.1.4", "consul", 0, hour),
		gossipPod("consul-0", "u0", "10.244.1.5", "consul", 0, hour.Add(time.Minute)),
		gossipPod("serf-0", "u2", "10.244.1.6", "serf", 0, hour))
	waitFor(t, "a round", w.Settled)
	if err := w.Start(ctx1); err == nil {
		t.Error("a second Start while the first runs was accepted")
	}
	s, err := collect(w)
	if err != nil || len(s.Gossip.Views) != 2 {
		t.Fatalf("first start: %v", err)
	}
	mu.Lock()
	if !slices.Equal(asked, []string{"consul-1", "serf-0"}) && !slices.Equal(asked, []string{"serf-0", "consul-1"}) {
		t.Errorf("first start asked %v", asked)
	}
	asked = nil
	mu.Unlock()

	// The leader steps down; its pods' source stops with it, and
	// consul-1 and serf-0 go meanwhile, unannounced.
	cancel1()
	pods.stop("shop/consul-1", "shop/serf-0")
	clk.set(t0.Add(time.Minute))
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := w.Start(ctx2); err != nil {
		t.Fatalf("Start after the first ctx ended: %v", err)
	}
	if w.Settled() {
		t.Error("settled on the last start's round")
	}
	if _, err := collect(w); err == nil || err.Error() != "the gossip clusters' views were not read yet" {
		t.Errorf("Collect before the first round of the new start: %v", err)
	}
	pods.restart()
	waitFor(t, "a round", w.Settled)
	s, err = collect(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Gossip.Views) != 1 {
		t.Errorf("views %+v, want consul's alone: serf-0 went", s.Gossip.Views)
	}
	if v, _ := view(s, "consul", "shop/consul"); len(v.Members) != 1 || !v.Members[0].Listed.IsZero() || v.From != "pod shop/consul-0 ()" {
		t.Errorf("consul's view %+v: want it read from consul-0, its member's first-listed time forgotten", v)
	}
	mu.Lock()
	if !slices.Equal(asked, []string{"consul-0"}) {
		t.Errorf("the new start asked %v, want consul-0 alone", asked)
	}
	mu.Unlock()
	if n := pods.registered(); n != 1 {
		t.Errorf("OnPod registered %d times", n)
	}
}
