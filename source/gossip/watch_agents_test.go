package gossip

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	pkg "github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Without Watch.Agent, a pod's agent is the API its annotations name, at
// its address.
func TestNewAgent(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	t.Setenv("CONSUL_CACERT", "")
	t.Setenv("SERF_RPC_AUTH", "")
	at := netip.MustParseAddrPort("10.244.1.5:8501")
	if a, err := newAgent(Member{System: "consul", Addr: at, Scheme: "https"}); err != nil || a.(*Consul).Addr != "https://10.244.1.5:8501" {
		t.Errorf("consul: %#v, %v", a, err)
	}
	if a, err := newAgent(Member{System: "serf", Addr: at, Scheme: "http"}); err != nil || a.(*Serf).Addr != "10.244.1.5:8501" {
		t.Errorf("serf: %#v, %v", a, err)
	}
	if a, err := newAgent(Member{System: "memberlist", Addr: at, Scheme: "http"}); err != nil || a.(*Endpoint).URL != "http://10.244.1.5:8501"+MemberlistPath {
		t.Errorf("memberlist: %#v, %v", a, err)
	}
	if _, err := newAgent(Member{System: "zookeeper", Addr: at}); err == nil {
		t.Error("an agent for zookeeper")
	}
}

// memberOf returns the member of v named name.
func memberOf(v *snapshot.GossipView, name string) (snapshot.GossipMember, bool) {
	i := slices.IndexFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Name == name })
	if i < 0 {
		return snapshot.GossipMember{}, false
	}
	return v.Members[i], true
}

// Real Serf agents, the survivor's member list read through its RPC as
// its pod's annotations say: the other member dies without leaving and
// its pod goes; ReadCluster reads it failed, and forces it out through
// the survivor's agent.
func TestWatchReadsSerfAndForcesOut(t *testing.T) {
	t.Setenv("SERF_RPC_AUTH", "")
	survivor := serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.41:0"), RPC: netip.MustParseAddrPort("127.0.0.41:0")})
	old := serftest.Start(t, serftest.Config{Name: "node-127-0-0-42", Gossip: netip.MustParseAddrPort("127.0.0.42:0")})
	old.Join(t, survivor.Gossip)
	rpcPort := netip.MustParseAddrPort(survivor.RPC).Port()
	hour := time.Now().Add(-time.Hour)
	pods := newPods()
	w := &Watch{Pods: pods, Interval: 100 * time.Millisecond}
	start(t, w)
	pods.list(gossipPod("serf-0", "u0", "127.0.0.41", "serf", rpcPort, hour),
		gossipPod("serf-1", "u1", "127.0.0.42", "serf", 0, hour.Add(time.Minute)))
	cluster := snapshot.GossipCluster{System: "serf", Cluster: "shop/serf"}
	waitFor(t, "both members read alive", func() bool {
		s, err := collect(w)
		v, _ := view(s, cluster.System, cluster.Cluster)
		return err == nil && len(v.Members) == 2 && !slices.ContainsFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Status != snapshot.MemberAlive })
	})
	s, _ := collect(w)
	if v, _ := view(s, cluster.System, cluster.Cluster); v.Local != "serf-0" || v.From != "pod shop/serf-0 ("+survivor.RPC+")" {
		t.Errorf("view: local %q from %q", v.Local, v.From)
	}

	old.Kill()
	pods.delete("shop", "serf-1")
	ctx := context.Background()
	var leave func(context.Context, string) error
	waitFor(t, "the dead member read failed", func() bool {
		v, l, err := w.ReadCluster(ctx, cluster)
		if err != nil {
			return false
		}
		leave = l
		m, ok := memberOf(v, old.Name)
		return ok && m.Status == snapshot.MemberFailed
	})
	if leave == nil {
		t.Fatal("no force-leave through a Serf agent")
	}
	if err := leave(ctx, old.Name); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == old.Name }) {
		t.Errorf("the survivor still lists %s: %v", old.Name, survivor.Members())
	}
	waitFor(t, "the member gone from the views", func() bool {
		s, err := collect(w)
		v, _ := view(s, cluster.System, cluster.Cluster)
		_, listed := memberOf(&v, old.Name)
		return err == nil && len(v.Members) == 1 && !listed
	})
}

// A real memberlist member serving its list through the gossip package,
// read over HTTP as its pod's annotations say. memberlist has no
// force-leave: ReadCluster offers none.
func TestWatchReadsMemberlist(t *testing.T) {
	c := pkg.DefaultPodConfig("cache-0-7f3a", "shop/cache")
	memberlisttest.Shorten(c)
	c.BindAddr, c.BindPort, c.AdvertisePort = "127.0.0.43", 0, 0
	served := pkg.Watch(c)
	m, err := memberlisttest.Start(c, func(ml *memberlist.Memberlist) http.Handler {
		mux := http.NewServeMux()
		mux.Handle(pkg.Path, served.Handler(ml))
		return mux
	})
	if errors.Is(err, memberlisttest.ErrNoLoopback) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	u, err := url.Parse(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())

	pods := newPods()
	w := &Watch{Pods: pods, Interval: time.Hour}
	start(t, w)
	pods.list(gossipPod("cache-0", "u0", "127.0.0.43", "memberlist", uint16(port), time.Now()))
	waitFor(t, "a round", w.Settled)
	s, err := collect(w)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := view(s, "memberlist", "shop/memberlist")
	if v.Local != "cache-0-7f3a" || v.Label != "shop/cache" || v.From != "pod shop/cache-0 ("+m.URL+pkg.Path+")" || len(v.Members) != 1 {
		t.Errorf("view %+v", v)
	}
	v2, leave, err := w.ReadCluster(context.Background(), snapshot.GossipCluster{System: "memberlist", Cluster: "shop/memberlist"})
	if err != nil || v2.Local != "cache-0-7f3a" || leave != nil {
		t.Errorf("ReadCluster: %+v, leave %v, %v", v2, leave != nil, err)
	}
}
