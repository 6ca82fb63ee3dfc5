package gossip

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pkg "github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/internal/kubefake"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Without Watch.Agent, a pod's agent is the API its annotations name, at
// its address, with what its cluster's declaration says: the declared
// scheme over the annotated one, the credential read from the declared
// file or Secret, and no agent at all where the credential would travel in
// clear text unless the declaration allows it.
func TestDeclaredAgent(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	t.Setenv("SERF_RPC_AUTH", "from-env")
	ctx := context.Background()
	at := netip.MustParseAddrPort("10.244.1.5:8501")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "consul-acl"}, Data: map[string][]byte{"token": []byte("from-secret")}}).CoreV1()
	for _, tc := range []struct {
		name string
		d    Declared
		m    Member
		want string // the agent's address and credential, or the error
	}{
		{"consul over https, token from a file", Declared{System: "consul", Namespace: "shop", TokenFile: token}, Member{System: "consul", Addr: at, Scheme: "https"}, "consul https://10.244.1.5:8501 s3cret"},
		{"consul, token from the namespace's Secret", Declared{System: "consul", Namespace: "shop", Scheme: "https", TokenSecret: &SecretKey{Name: "consul-acl", Key: "token"}}, Member{System: "consul", Addr: at, Scheme: "http"}, "consul https://10.244.1.5:8501 from-secret"},
		{"consul without a token, over http", Declared{System: "consul", Namespace: "shop"}, Member{System: "consul", Addr: at, Scheme: "http"}, "consul http://10.244.1.5:8501 "},
		{"consul, a token over http refused", Declared{System: "consul", Namespace: "shop", TokenFile: token}, Member{System: "consul", Addr: at, Scheme: "http"},
			"the pod is asked over http, and the ACL token would travel in clear text: declare scheme: https for cluster shop/consul (consul) (or allowPlaintextCredentials: true)"},
		{"consul, a token over http allowed", Declared{System: "consul", Namespace: "shop", TokenFile: token, AllowPlaintextCredentials: true}, Member{System: "consul", Addr: at, Scheme: "http"}, "consul http://10.244.1.5:8501 s3cret"},
		{"consul, the Secret's key missing", Declared{System: "consul", Namespace: "shop", TokenSecret: &SecretKey{Name: "consul-acl", Key: "acl"}}, Member{System: "consul", Addr: at, Scheme: "https"}, `tokenSecret shop/consul-acl: no key "acl"`},
		{"serf with its key, allowed in clear", Declared{System: "serf", Namespace: "shop", TokenFile: token, AllowPlaintextCredentials: true}, Member{System: "serf", Addr: at}, "serf 10.244.1.5:8501 s3cret"},
		{"serf without a key", Declared{System: "serf", Namespace: "shop"}, Member{System: "serf", Addr: at}, "serf 10.244.1.5:8501 "},
		{"memberlist", Declared{System: "memberlist", Namespace: "shop"}, Member{System: "memberlist", Addr: at, Scheme: "http"}, "memberlist http://10.244.1.5:8501" + MemberlistPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.d.agent(ctx, tc.m, secrets)
			var got string
			switch a := a.(type) {
			case nil:
				got = err.Error()
			case *Consul:
				got = "consul " + a.Addr + " " + a.Token
			case *Serf:
				got = "serf " + a.Addr + " " + a.AuthKey
			case clocked:
				got = "memberlist " + a.Agent.(*Endpoint).URL
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// allAlive waits until the watch reads n members of cluster, all alive.
func allAlive(t *testing.T, w *Watch, cluster snapshot.GossipCluster, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d members of %s read alive", n, cluster.Cluster), func() bool {
		s, err := collect(w)
		v, _ := view(s, cluster.System, cluster.Cluster)
		return err == nil && len(v.Members) == n && !slices.ContainsFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Status != snapshot.MemberAlive })
	})
}

// forceOutFailed waits until a fresh read of cluster lists member failed,
// and forces it out through the agent that gave that read.
func forceOutFailed(t *testing.T, w *Watch, cluster snapshot.GossipCluster, member string) {
	t.Helper()
	ctx := context.Background()
	var leave func(context.Context, string) error
	waitFor(t, member+" read failed", func() bool {
		v, l, err := w.ReadCluster(ctx, cluster)
		if err != nil {
			return false
		}
		leave = l
		m, ok := memberOf(v, member)
		return ok && m.Status == snapshot.MemberFailed
	})
	if leave == nil {
		t.Fatalf("no force-leave through a %s agent", cluster.System)
	}
	if err := leave(ctx, member); err != nil {
		t.Fatal(err)
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
	allAlive(t, w, cluster, 2)
	s, _ := collect(w)
	if v, _ := view(s, cluster.System, cluster.Cluster); v.Local != "serf-0" || v.From != "pod shop/serf-0 ("+survivor.RPC+")" {
		t.Errorf("view: local %q from %q", v.Local, v.From)
	}

	old.Kill()
	pods.delete("shop", "serf-1")
	forceOutFailed(t, w, cluster, old.Name)
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

// consulAt is a Consul-shaped agent named name, listening at ip (TLS when
// tls is set: its certificate names example.com), that records each
// request with the token it carried.
func consulAt(t *testing.T, ip, name string, tls bool) (srv *httptest.Server, port uint16, asked func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" token="+r.Header.Get("X-Consul-Token"))
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/agent/members":
			fmt.Fprintf(w, `[{"Name": %q, "Addr": %q, "Port": 8301, "Tags": {"dc": "dc1"}, "Status": 1}]`, name, ip)
		case "/v1/agent/self":
			fmt.Fprintf(w, `{"Config": {"Datacenter": "dc1", "NodeName": %q}}`, name)
		default:
			http.NotFound(w, r)
		}
	})
	srv = httptest.NewUnstartedServer(mux)
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, uint16(l.Addr().(*net.TCPAddr).Port), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// The credential goes to the clusters the operator declared, and to
// nothing else: a pod of a tenant namespace annotated as a Consul agent
// is asked nothing (the environment's token, which the controller once
// sent to any annotated pod, is not read at all), and the declared
// cluster's agent gets its own token, from its file, over TLS checked
// against the declared CA and server name. The cluster not declared is
// named once.
func TestWatchSendsTheTokenOnlyToDeclaredClusters(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "env-operator-token")
	shop, shopPort, shopAsked := consulAt(t, "127.0.0.51", "consul-0", true)
	_, tenantPort, tenantAsked := consulAt(t, "127.0.0.52", "evil", false)
	dir := t.TempDir()
	ca, token := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: shop.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("shop-reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pods := newPods()
	w := &Watch{Pods: pods, Interval: time.Hour, Clusters: &Declarations{Clusters: []Declared{
		{System: "consul", Namespace: "shop", Scheme: "https", TokenFile: token, CAFile: ca, TLSServerName: "example.com"},
	}}}
	start(t, w)
	hour := time.Now().Add(-time.Hour)
	evil := gossipPod("evil", "u9", "127.0.0.52", "consul", tenantPort, hour.Add(-time.Minute))
	evil.Namespace = "tenant"
	pods.list(gossipPod("consul-0", "u0", "127.0.0.51", "consul", shopPort, hour), evil)
	waitFor(t, "a round", w.Settled)
	s, err := collect(w)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := view(s, "consul", "shop/consul"); !ok || v.Unread != "" || v.Local != "consul-0" {
		t.Errorf("the declared cluster's view: %+v", v)
	}
	if got := tenantAsked(); len(got) != 0 {
		t.Errorf("the tenant's pod was asked: %q", got)
	}
	for _, r := range shopAsked() {
		if !strings.HasSuffix(r, " token=shop-reader") {
			t.Errorf("the declared agent was asked %q: want its own token", r)
		}
	}
	if d := w.Describe(s); d != "1 clusters, 1 members; 1 annotated but not declared, not read: tenant/consul (consul)" {
		t.Errorf("Describe: %q", d)
	}
}

// Real Consul agents with ACLs on (default deny), read through the HTTP
// API as the declared cluster's pods say, with the declared token: a
// client dies without leaving and its pod goes; ReadCluster reads it
// failed, and forces it out (force-leave with prune) through the server's
// agent, which needs the token's operator:write.
func TestWatchReadsConsulAndForcesOut(t *testing.T) {
	server := consultest.Start(t, consultest.Config{Name: "consul-0", Addr: netip.MustParseAddr("127.0.0.81"), Server: true})
	survivor := consultest.Start(t, consultest.Config{Name: "consul-1", Addr: netip.MustParseAddr("127.0.0.82"), Join: server.Addr})
	old := consultest.Start(t, consultest.Config{Name: "ip-127-0-0-83", Addr: netip.MustParseAddr("127.0.0.83"), Join: server.Addr})
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(consultest.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	pods := newPods()
	w := &Watch{Pods: pods, Interval: 100 * time.Millisecond, Clusters: &Declarations{Clusters: []Declared{
		{System: "consul", Namespace: "shop", TokenFile: token, AllowPlaintextCredentials: true}}}}
	start(t, w)
	pods.list(gossipPod("consul-0", "u0", "127.0.0.81", "consul", 0, hour),
		gossipPod("consul-1", "u1", "127.0.0.82", "consul", 0, hour.Add(time.Minute)),
		gossipPod("consul-2", "u2", "127.0.0.83", "consul", 0, hour.Add(2*time.Minute)))
	cluster := snapshot.GossipCluster{System: "consul", Cluster: "shop/consul"}
	allAlive(t, w, cluster, 3)
	old.Kill()
	pods.delete("shop", "consul-2")
	forceOutFailed(t, w, cluster, old.Name)
	waitFor(t, "the member pruned from the survivor's list", func() bool {
		ms, err := survivor.Members()
		return err == nil && !slices.ContainsFunc(ms, func(m consultest.Member) bool { return m.Name == old.Name })
	})
}

// A member list read from a pod's agent carries that agent's clock,
// measured from the Date of its answer, so that when a member went can be
// held against when a pod was created.
func TestDeclaredMemberlistClockMeasured(t *testing.T) {
	ahead := 3 * time.Minute
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", time.Now().Add(ahead).UTC().Format(http.TimeFormat))
		fmt.Fprint(w, `{"kind":"ghostwatch.io/memberlist-members","version":1,"local":"cache-0","members":[{"name":"cache-0","addr":"127.0.0.1","port":7946,"state":"alive"}]}`)
	}))
	defer srv.Close()
	d := Declared{System: "memberlist", Namespace: "shop"}
	a, err := d.agent(context.Background(), Member{Namespace: "shop", Name: "cache-0", System: "memberlist", Addr: netip.MustParseAddrPort(srv.Listener.Addr().String()), Scheme: "http"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := v.Clock
	if !c.Measured || c.Offset-c.Bound > ahead || c.Offset+c.Bound < ahead || !strings.Contains(c.String(), "pod shop/cache-0's agent's clock") {
		t.Errorf("clock %v; want %s ahead, within its bound", c, ahead)
	}
}
