package gossip

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// The tests run real memberlist members (internal/memberlisttest), each
// on its own address of 127.0.0.0/8, so that a member can die and another
// take its address and port, as a pod takes a dead pod's IP.

// testLabel is the cluster label of the tests' clusters.
const testLabel = "shop/cache"

// testConfig is DefaultPodConfig with timings shortened for loopback
// (memberlisttest.Shorten), so that a test sees a crashed member
// suspected, declared dead and forgotten within seconds: ProbeInterval
// 200ms, ProbeTimeout 100ms, GossipInterval 20ms, GossipToTheDeadTime and
// PushPullInterval 3s, TCPTimeout 2s. SuspicionMult (4) and
// SuspicionMaxTimeoutMult (3) stay the preset's: a member is suspect 0.8s
// to 2.4s before it is declared dead.
func testConfig(name, label string) *memberlist.Config {
	c := DefaultPodConfig(name, label)
	memberlisttest.Shorten(c)
	return c
}

// testNode is a running member, its View served over HTTP, and its log.
type testNode struct {
	name, addr string
	cfg        *memberlist.Config
	ml         *memberlist.Memberlist
	view       *View
	url        string
	log        *memberlisttest.Log
	started    time.Time
}

// requireLoopback stops the test unless addr, an address of 127.0.0.0/8
// other than 127.0.0.1, can be bound (macOS, for one, configures only
// 127.0.0.1).
func requireLoopback(t *testing.T, addr string) {
	t.Helper()
	if err := memberlisttest.CheckLoopback(addr); err != nil {
		testenv.Unavailable(t, err.Error())
	}
}

// startNode starts a member named name on addr:port (port 0: any) with
// testConfig, edited by edit when not nil, and stops it at the end of the
// test unless the test stops it first.
func startNode(t *testing.T, name, addr string, port int, label string, edit func(*memberlist.Config)) *testNode {
	t.Helper()
	requireLoopback(t, addr)
	cfg := testConfig(name, label)
	cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = addr, port, port
	if edit != nil {
		edit(cfg)
	}
	view := Watch(cfg)
	m, err := memberlisttest.Start(cfg, view.Handler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.Stop()
		if t.Failed() {
			t.Logf("log of member %s (%s):\n%s", name, addr, m.Log)
		}
	})
	return &testNode{name: name, addr: addr, cfg: cfg, ml: m.ML, view: view, url: m.URL, log: m.Log, started: m.Started}
}

// address is the member's host:port, to join it.
func (n *testNode) address() string { return n.ml.LocalNode().Address() }

// port is the member's port.
func (n *testNode) port() int { return int(n.ml.LocalNode().Port) }

// join joins n to the members at the addresses of others.
func (n *testNode) join(t *testing.T, others ...*testNode) {
	t.Helper()
	var addrs []string
	for _, o := range others {
		addrs = append(addrs, o.address())
	}
	if _, err := n.ml.Join(addrs); err != nil {
		t.Fatalf("%s joining %v: %v", n.name, addrs, err)
	}
}

// members fetches the member's list from its endpoint, as ghostwatch
// does.
func (n *testNode) members(t *testing.T) (*MemberList, []byte) {
	t.Helper()
	resp, err := http.Get(n.url + Path)
	if err != nil {
		t.Fatalf("GET %s's member list: %v", n.name, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatalf("reading %s's member list: %v", n.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s's member list: %s: %s", n.name, resp.Status, buf.String())
	}
	var l MemberList
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		t.Fatalf("%s's member list is not JSON: %v\n%s", n.name, err, buf.String())
	}
	return &l, buf.Bytes()
}

// member returns the named member of l, or nil.
func (l *MemberList) member(name string) *Member {
	for i := range l.Members {
		if l.Members[i].Name == name {
			return &l.Members[i]
		}
	}
	return nil
}

// String lists the members with their states, for failure messages.
func (l *MemberList) String() string {
	var b strings.Builder
	for _, m := range l.Members {
		fmt.Fprintf(&b, " %s@%s:%d=%s/%d", m.Name, m.Addr, m.Port, m.State, m.Incarnation)
	}
	return "[" + strings.TrimSpace(b.String()) + "]"
}

// stateOf is cond for poll.UntilNoted: name is in state in n's member list.
func stateOf(t *testing.T, n *testNode, name string, state string) func() (bool, string) {
	return func() (bool, string) {
		l, _ := n.members(t)
		m := l.member(name)
		return m != nil && m.State == state, l.String()
	}
}
