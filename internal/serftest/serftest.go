// Package serftest runs real Serf agents in-process for tests and for
// ghostwatch's lab: the serf library gossiping on a loopback address, and
// the RPC server serf agent serves (its IPC, from the serf module's agent
// package), so that a test reads and drives them as an operator's serf CLI
// does. It only starts and stops agents; what they do is Serf's own.
package serftest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/cmd/serf/command/agent"
	"github.com/hashicorp/serf/serf"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// Config is one agent to start.
type Config struct {
	// Name is the Serf node name.
	Name string
	// Gossip is the address memberlist binds, UDP and TCP; port 0 picks
	// a free one.
	Gossip netip.AddrPort
	// RPC is where the agent's RPC server listens (serf agent -rpc-addr);
	// an invalid one serves no RPC.
	RPC netip.AddrPort
	// AuthKey is the RPC auth key (serf agent -rpc-auth); empty asks for
	// none.
	AuthKey string
	// Tune changes the Serf configuration after Fast set it.
	Tune func(*serf.Config)
}

// Fast returns Serf's default configuration with the timings a test on
// loopback can afford shortened. Each changed value with its default:
//
//   - memberlist ProbeInterval 1 s → 200 ms, ProbeTimeout 500 ms → 100 ms:
//     a member that stops answering is probed five times as often (a
//     shorter timeout makes a busy test machine suspect live members);
//   - memberlist SuspicionMult 4 → 2, SuspicionMaxTimeoutMult 6 → 1:
//     a suspect is declared dead after 2 probe intervals (scaled by the
//     log of the cluster size), without waiting for confirmations that a
//     cluster of three cannot give;
//   - memberlist GossipInterval 200 ms → 20 ms, PushPullInterval 30 s →
//     1 s, TCPTimeout 10 s → 1 s: state spreads within a test's patience;
//   - Serf ReapInterval 15 s → 100 ms, ReconnectInterval 30 s → 200 ms:
//     the reaper and the reconnector run often enough to be watched.
//
// Left alone, as a cluster keeps them: ReconnectTimeout (24 h: how long a
// failed member is kept and reconnected to) and TombstoneTimeout (24 h: a
// left one), GossipToTheDeadTime (30 s), DeadNodeReclaimTime (0: a dead
// name is never reclaimed at another address), and the flap and intent
// windows.
func Fast() *serf.Config {
	c := serf.DefaultConfig()
	m := c.MemberlistConfig // memberlist's DefaultLANConfig
	m.ProbeInterval = 200 * time.Millisecond
	m.ProbeTimeout = 100 * time.Millisecond
	m.SuspicionMult = 2
	m.SuspicionMaxTimeoutMult = 1
	m.GossipInterval = 20 * time.Millisecond
	m.PushPullInterval = time.Second
	m.TCPTimeout = time.Second
	c.ReapInterval = 100 * time.Millisecond
	c.ReconnectInterval = 200 * time.Millisecond
	return c
}

// Agent is a running agent.
type Agent struct {
	Name string
	// Gossip is the address it gossips on, its port the one bound.
	Gossip netip.AddrPort
	// RPC is the address of its RPC server; "" when it serves none.
	RPC string
	// Log holds what the agent, Serf and memberlist logged.
	Log *Log

	agent *agent.Agent
	ipc   *agent.AgentIPC
	once  sync.Once
}

// ErrNoLoopback says a loopback address other than 127.0.0.1 cannot be
// bound: macOS, for one, routes only 127.0.0.1 to lo, where Linux routes
// all of 127.0.0.0/8.
var ErrNoLoopback = errors.New("the loopback addresses 127.0.0.0/8 cannot be bound here")

// Start starts an agent and stops it when the test ends. A loopback
// address other than 127.0.0.1 that cannot be bound (macOS routes only
// 127.0.0.1 to lo) stops the test with testenv.Unavailable.
func Start(tb testing.TB, c Config) *Agent {
	tb.Helper()
	ag, err := Create(c)
	if errors.Is(err, ErrNoLoopback) {
		testenv.Unavailable(tb, err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ag.Kill()
		if tb.Failed() {
			tb.Logf("serf agent %s logged:\n%s", c.Name, ag.Log.String())
		}
	})
	return ag
}

// Create starts an agent; the caller stops it with Kill. An address that
// cannot be bound is an error wrapping ErrNoLoopback.
func Create(c Config) (*Agent, error) {
	conf := Fast()
	if c.Tune != nil {
		c.Tune(conf)
	}
	conf.NodeName = c.Name
	conf.MemberlistConfig.Name = c.Name
	conf.MemberlistConfig.BindAddr = c.Gossip.Addr().String()
	conf.MemberlistConfig.BindPort = int(c.Gossip.Port())
	conf.MemberlistConfig.AdvertiseAddr = ""
	conf.MemberlistConfig.AdvertisePort = 0
	probe, err := net.Listen("tcp", netip.AddrPortFrom(c.Gossip.Addr(), 0).String())
	if err != nil {
		return nil, fmt.Errorf("serf agent %s: cannot bind %s (%v): %w", c.Name, c.Gossip.Addr(), err, ErrNoLoopback)
	}
	probe.Close()
	l := &Log{}
	out := io.Writer(l)
	a, err := agent.Create(agent.DefaultConfig(), conf, out)
	if err != nil {
		return nil, fmt.Errorf("serf agent %s: %w", c.Name, err)
	}
	if err := a.Start(); err != nil {
		a.Shutdown()
		return nil, fmt.Errorf("serf agent %s: %w", c.Name, err)
	}
	ag := &Agent{Name: c.Name, Log: l, agent: a}
	local := a.Serf().Memberlist().LocalNode()
	ag.Gossip = netip.AddrPortFrom(netip.MustParseAddr(local.Addr.String()), local.Port)
	if c.RPC.IsValid() {
		ln, err := net.Listen("tcp", c.RPC.String())
		if err != nil {
			a.Shutdown()
			return nil, fmt.Errorf("serf agent %s: RPC listener: %w", c.Name, err)
		}
		ag.ipc = agent.NewAgentIPC(a, c.AuthKey, ln, out, agent.NewLogWriter(512), false)
		ag.RPC = ln.Addr().String()
	}
	return ag, nil
}

// Join joins the agent to the cluster of the agents at addrs, and fails
// the test when it cannot.
func (a *Agent) Join(tb testing.TB, addrs ...netip.AddrPort) {
	tb.Helper()
	if err := a.JoinCluster(addrs...); err != nil {
		tb.Fatal(err)
	}
}

// JoinCluster joins the agent to the cluster of the agents at addrs.
func (a *Agent) JoinCluster(addrs ...netip.AddrPort) error {
	var s []string
	for _, x := range addrs {
		s = append(s, x.String())
	}
	if _, err := a.agent.Join(s, false); err != nil {
		return fmt.Errorf("serf agent %s joining %v: %w", a.Name, s, err)
	}
	return nil
}

// Kill stops the agent without leaving, as a pod killed by SIGKILL or an
// OOM stops: its RPC server, then Serf and memberlist, their sockets
// closed, no leave message sent.
func (a *Agent) Kill() {
	a.once.Do(func() {
		if a.ipc != nil {
			a.ipc.Shutdown()
		}
		a.agent.Shutdown()
	})
}

// Members returns what Serf itself holds, for a test to compare with what
// the RPC gave.
func (a *Agent) Members() []serf.Member { return a.agent.Serf().Members() }

// Log is a log that tests can search, safe for concurrent writers.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns the log so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Len is how much has been logged so far: a mark for Lines.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// Lines returns the lines logged after the mark from (a Len) that contain
// s.
func (l *Log) Lines(from int, s string) []string {
	all := l.String()
	if from > len(all) {
		from = len(all)
	}
	var out []string
	for _, line := range strings.Split(all[from:], "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
