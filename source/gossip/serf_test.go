package gossip

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The RPC's members map as serf members -format=json's do, status for
// status.
func TestSerfViewAsParse(t *testing.T) {
	ms := []serfMember{
		{Name: "consul-0", Addr: net.ParseIP("10.0.1.10"), Port: 7946, Tags: map[string]string{"role": "server"}, Status: "alive"},
		{Name: "going", Addr: net.ParseIP("10.0.1.11").To4(), Port: 7946, Status: "leaving"},
		{Name: "gone", Addr: net.ParseIP("10.0.1.12"), Port: 7946, Status: "left"},
		{Name: "node-abc-old", Addr: net.ParseIP("10.0.1.50"), Port: 7946, Tags: map[string]string{}, Status: "failed"},
		{Name: "v6", Addr: net.ParseIP("fd00::50"), Port: 7946, Status: "alive"},
	}
	got, err := serfView(ms)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse("members.json", []byte(`{"members": [
		{"name": "consul-0", "addr": "10.0.1.10:7946", "port": 7946, "tags": {"role": "server"}, "status": "alive"},
		{"name": "going", "addr": "10.0.1.11:7946", "port": 7946, "status": "leaving"},
		{"name": "gone", "addr": "10.0.1.12:7946", "port": 7946, "status": "left"},
		{"name": "node-abc-old", "addr": "10.0.1.50:7946", "port": 7946, "tags": {}, "status": "failed"},
		{"name": "v6", "addr": "[fd00::50]:7946", "port": 7946, "status": "alive"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want.From = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the RPC:\n%+v\nfrom serf members -format=json:\n%+v", got, want)
	}
	for _, tc := range []struct {
		m    serfMember
		want string
	}{
		{serfMember{Name: "n1", Addr: net.ParseIP("10.0.0.1"), Status: "none"}, `members[0] (n1): status "none" is none of alive, leaving, left, failed`},
		{serfMember{Name: "n1", Addr: net.IP{10, 0, 0}, Status: "alive"}, "members[0] (n1): an address of 3 bytes is not an IP address"},
	} {
		if _, err := serfView([]serfMember{tc.m}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.m, err, tc.want)
		}
	}
}

func TestSerfFromEnv(t *testing.T) {
	t.Setenv("SERF_RPC_ADDR", "")
	t.Setenv("SERF_RPC_AUTH", "")
	if s := SerfFromEnv("", ""); s.Addr != "127.0.0.1:7373" || s.AuthKey != "" {
		t.Errorf("defaults: %+v", s)
	}
	t.Setenv("SERF_RPC_ADDR", "10.0.0.5:7373")
	t.Setenv("SERF_RPC_AUTH", "from-env")
	if s := SerfFromEnv("", ""); s.Addr != "10.0.0.5:7373" || s.AuthKey != "from-env" {
		t.Errorf("from the environment: %+v", s)
	}
	if s := SerfFromEnv("127.0.0.1:7374", "given"); s.Addr != "127.0.0.1:7374" || s.AuthKey != "given" {
		t.Errorf("given: %+v", s)
	}
}

// A real agent with an RPC auth key: no key and a wrong key are refused,
// each saying what to do; the right one reads the members and the agent's
// name.
func TestSerfAuth(t *testing.T) {
	a := serftest.Start(t, serftest.Config{Name: "serf-auth", Gossip: netip.MustParseAddrPort("127.0.0.4:0"), RPC: netip.MustParseAddrPort("127.0.0.4:0"), AuthKey: "correct-horse"})
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"", []string{"serf agent " + a.RPC + ": Authentication required: the agent has an RPC auth key", "SERF_RPC_AUTH", "--serf-auth"}},
		{"battery-staple", []string{"serf agent " + a.RPC + ": Invalid authentication token: the RPC auth key given is not the agent's -rpc-auth key"}},
	} {
		s := &Serf{Addr: a.RPC, AuthKey: tc.key, Timeout: 5 * time.Second}
		_, err := s.Members(context.Background())
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("key %q: members: %v, want %q", tc.key, err, w)
			}
		}
		if err := s.ForceLeave(context.Background(), "anyone"); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
			t.Errorf("key %q: force-leave: %v, want %q", tc.key, err, tc.want[0])
		}
	}
	v, err := (&Serf{Addr: a.RPC, AuthKey: "correct-horse"}).Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.GossipMember{{Name: "serf-auth", Addr: a.Gossip.Addr(), Port: a.Gossip.Port(), Status: snapshot.MemberAlive, RawStatus: "alive", Tags: map[string]string{}}}
	if v.System != "serf" || v.Local != "serf-auth" || v.From != a.RPC || !reflect.DeepEqual(v.Members, want) {
		t.Errorf("view %+v, want %+v", v, want)
	}
}

// An agent refuses nothing force-leave is asked, so ghostwatch refuses
// what would do nothing or harm: an unlisted name, an alive member.
func TestSerfForceLeaveRefuses(t *testing.T) {
	a := serftest.Start(t, serftest.Config{Name: "serf-alone", Gossip: netip.MustParseAddrPort("127.0.0.5:0"), RPC: netip.MustParseAddrPort("127.0.0.5:0")})
	s := &Serf{Addr: a.RPC}
	for node, want := range map[string]string{
		"nobody":     "serf agent " + a.RPC + " lists no member nobody: nothing to force out",
		"serf-alone": "member serf-alone is alive: force-leave is for failed members",
	} {
		if err := s.ForceLeave(context.Background(), node); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", node, err, want)
		}
	}
	if len(a.Log.Lines(0, "Force leaving")) != 0 {
		t.Errorf("the agent was asked to force a member out: %q", a.Log.Lines(0, "Force leaving"))
	}
}

// freeAddr is a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// listen accepts connections and hands each to serve.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// handshakeOnly answers the RPC handshake as an agent does, then reads
// every request and answers none: a wedged agent.
func handshakeOnly(c net.Conn) {
	defer c.Close()
	h := &codec.MsgpackHandle{}
	dec := codec.NewDecoder(bufio.NewReader(c), h)
	w := bufio.NewWriter(c)
	enc := codec.NewEncoder(w, h)
	var req struct {
		Command string
		Seq     uint64
	}
	if dec.Decode(&req) != nil || req.Command != "handshake" {
		return
	}
	var body struct{ Version int32 }
	if dec.Decode(&body) != nil {
		return
	}
	enc.Encode(struct {
		Seq   uint64
		Error string
	}{req.Seq, ""})
	w.Flush()
	for dec.Decode(&req) == nil {
	}
}

// Every way an agent cannot be read is an error that says which and what
// to do, within the timeout.
func TestSerfErrors(t *testing.T) {
	gossipPort := serftest.Start(t, serftest.Config{Name: "serf-gossip", Gossip: netip.MustParseAddrPort("127.0.0.6:0")}).Gossip.String()
	silent := listen(t, func(c net.Conn) {
		defer c.Close()
		c.Read(make([]byte, 1024))
		time.Sleep(5 * time.Second)
	})
	closing := listen(t, func(c net.Conn) { c.Close() })
	wedged := listen(t, handshakeOnly)
	refused := freeAddr(t)
	for _, tc := range []struct {
		name, addr string
		want       []string
		deadline   bool
	}{
		{"nothing listens", refused, []string{"serf agent " + refused + ": unreachable: dial tcp " + refused + ": connect: connection refused: no agent serves RPC there"}, false},
		{"silent after accepting", silent, []string{"serf agent " + silent + ": no answer to the RPC handshake within 300ms: is " + silent + " the agent's RPC address"}, true},
		{"closes at once", closing, []string{"serf agent " + closing + ": the connection closed while connecting: is " + closing + " a Serf agent's RPC address"}, false},
		{"a gossip port, not the RPC's", gossipPort, []string{"serf agent " + gossipPort + ": the connection closed while connecting"}, false},
		{"answers the handshake, then nothing", wedged, []string{"serf agent " + wedged + ": no answer to a call within 300ms"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A short timeout where the agent is not to answer, the
			// suite's patience where it is to answer (or fail) at once.
			// That the short one ended the call is what the error says
			// (DeadlineExceeded), not a bound on how long it took.
			timeout := poll.Patience
			if tc.deadline {
				timeout = 300 * time.Millisecond
			}
			start := time.Now()
			_, err := (&Serf{Addr: tc.addr, Timeout: timeout}).Members(context.Background())
			if took := time.Since(start); tc.deadline && took < timeout {
				t.Errorf("gave up after %s, before its timeout of %s", took, timeout)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%v, want %q", err, w)
				}
			}
			if errors.Is(err, context.DeadlineExceeded) != tc.deadline {
				t.Errorf("%v: errors.Is DeadlineExceeded = %v", err, !tc.deadline)
			}
		})
	}
	// The caller giving up is not the agent's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Serf{Addr: silent}).Members(ctx); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "no answer") {
		t.Errorf("cancelled: %v", err)
	}
}

// One agent that cannot be read fails the source, and the snapshot keeps
// no view.
func TestSerfSourceFails(t *testing.T) {
	a := serftest.Start(t, serftest.Config{Name: "serf-ok", Gossip: netip.MustParseAddrPort("127.0.0.7:0"), RPC: netip.MustParseAddrPort("127.0.0.7:0")})
	refused := freeAddr(t)
	s := &snapshot.Snapshot{}
	src := &LiveSource{Agents: []Agent{&Serf{Addr: a.RPC}, &Serf{Addr: refused}}}
	if err := src.Collect(context.Background(), s); err == nil || !strings.Contains(err.Error(), refused+": unreachable") || s.Gossip != nil {
		t.Errorf("%v, gossip %+v", err, s.Gossip)
	}
	src.Agents = src.Agents[:1]
	if err := src.Collect(context.Background(), s); err != nil || len(s.Gossip.Views) != 1 || src.Describe(s) != "1 view, 1 member (0 failed, dead or left)" {
		t.Errorf("%v: %q", err, src.Describe(s))
	}
}

// A key given by mistake in the agent's address (KEY@host:port) is printed
// nowhere, though the dial's error quotes the address as given.
func TestSerfAddressRedacted(t *testing.T) {
	for _, addr := range []string{"SECRETTOKEN@" + freeAddr(t), "user:SECRETPW@" + freeAddr(t)} {
		_, err := (&Serf{Addr: addr, Timeout: 5 * time.Second}).Members(context.Background())
		if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "serf agent xxxxx@127.0.0.1:") {
			t.Errorf("%s: %v", addr, err)
		}
	}
}
