// Package memberlisttest runs real memberlist members in-process for tests
// and for ghostwatch's lab: each on its own address of 127.0.0.0/8 (Linux
// routes all of it to lo), so that a member can die and another take its
// address and port, as a pod takes a dead pod's IP; each with its log kept
// for searching and an HTTP server of the caller's. It only starts and
// stops members; what they do is memberlist's own. It does not import the
// ghostwatch/gossip package, whose own tests use it.
package memberlisttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Shorten shortens c's timings for members on loopback, so that a crashed
// member is suspected, declared dead and forgotten within seconds. Each
// value, with memberlist's DefaultLANConfig default:
//
//   - ProbeInterval 1s -> 200ms and ProbeTimeout 500ms -> 100ms: loopback
//     answers in microseconds, and 100ms leaves room for a busy machine;
//   - GossipInterval 200ms -> 20ms;
//   - GossipToTheDeadTime and PushPullInterval 30s (15s in the
//     ghostwatch/gossip preset) -> 3s, kept equal as both keep them;
//   - TCPTimeout 10s -> 2s.
//
// SuspicionMult and SuspicionMaxTimeoutMult stay c's: with the preset's 4
// and 3, a member is suspect 0.8s to 2.4s before it is declared dead.
func Shorten(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.GossipToTheDeadTime = 3 * time.Second
	c.PushPullInterval = 3 * time.Second
	c.TCPTimeout = 2 * time.Second
}

// ErrNoLoopback says a loopback address other than 127.0.0.1 cannot be
// bound: macOS, for one, routes only 127.0.0.1 to lo.
var ErrNoLoopback = errors.New("every address of 127.0.0.0/8 must be bound on lo, as Linux routes it")

// CheckLoopback returns an error wrapping ErrNoLoopback when addr, an
// address of 127.0.0.0/8, cannot be bound.
func CheckLoopback(addr string) error {
	l, err := net.ListenPacket("udp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return fmt.Errorf("cannot bind %s (%v): %w", addr, err, ErrNoLoopback)
	}
	return l.Close()
}

// Member is a running member and its HTTP server.
type Member struct {
	// Config is the member's configuration, as it was created.
	Config *memberlist.Config
	ML     *memberlist.Memberlist
	// URL is its HTTP server's, http://addr:port on the member's bind
	// address.
	URL string
	// Log holds what memberlist logged.
	Log *Log
	// Started is when Start was called.
	Started time.Time

	srv  *http.Server
	once sync.Once
	err  error
}

// Start creates a member from c, whose BindAddr, BindPort and
// AdvertisePort the caller sets, logging into the member's Log, and serves
// serve(ml) over HTTP on a free port of c.BindAddr. The log goes to the
// Log through c.LogOutput when c.LogOutput passes lines on (it has a
// SetOutput method, as the gossip package's Rejections), else c.LogOutput
// is the Log. The caller stops it with Stop. An address that cannot be
// bound is an error wrapping ErrNoLoopback.
func Start(c *memberlist.Config, serve func(*memberlist.Memberlist) http.Handler) (*Member, error) {
	if err := CheckLoopback(c.BindAddr); err != nil {
		return nil, fmt.Errorf("member %s: %w", c.Name, err)
	}
	m := &Member{Config: c, Log: &Log{}, Started: time.Now()}
	if w, ok := c.LogOutput.(interface{ SetOutput(io.Writer) }); ok {
		w.SetOutput(m.Log)
	} else {
		c.LogOutput = m.Log
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		return nil, fmt.Errorf("starting member %s on %s:%d: %w", c.Name, c.BindAddr, c.BindPort, err)
	}
	m.ML = ml
	ln, err := net.Listen("tcp", net.JoinHostPort(c.BindAddr, "0"))
	if err != nil {
		_ = ml.Shutdown()
		return nil, fmt.Errorf("member %s: its HTTP listener: %w", c.Name, err)
	}
	m.URL = "http://" + ln.Addr().String()
	m.srv = &http.Server{Handler: serve(ml), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// Name is the member's name.
func (m *Member) Name() string { return m.Config.Name }

// Address is the member's host:port, to join it.
func (m *Member) Address() string { return m.ML.LocalNode().Address() }

// Port is the member's gossip port.
func (m *Member) Port() int { return int(m.ML.LocalNode().Port) }

// Stop stops the member without leaving, as a pod killed by SIGKILL or an
// OOM stops, and its HTTP server; their sockets are closed when it
// returns. It may be called more than once, and after ml.Shutdown.
func (m *Member) Stop() error {
	m.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.err = errors.Join(m.srv.Shutdown(ctx), m.ML.Shutdown())
	})
	return m.err
}

// Log collects a member's log lines, safe for concurrent writers.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns the log so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the log lines holding every one of words.
func (l *Log) Lines(words ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok && line != "" {
			out = append(out, line)
		}
	}
	return out
}
