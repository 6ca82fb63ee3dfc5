// Package consultest runs real Consul agents for tests and for
// ghostwatch's lab: the consul binary scripts/consul-binary.sh builds
// ($GHOSTWATCH_CONSUL_BIN), each agent on a loopback address of its own,
// with ACLs on (default deny) and one management token. It only starts
// and stops agents; what they do is Consul's own.
package consultest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// BinEnv names the directory holding the consul binary.
const BinEnv = "GHOSTWATCH_CONSUL_BIN"

// Binary is the consul executable in BinEnv.
const Binary = "consul"

// Script builds Binary and prints the directory it is in.
const Script = "scripts/consul-binary.sh"

// Token is the management token every agent of a test cluster knows.
const Token = "ghostwatch-test-management-token"

// Config is one agent to start.
type Config struct {
	// Name is the node name.
	Name string
	// Addr is the loopback address it binds: gossip, server RPC and HTTP
	// (port 8500).
	Addr netip.Addr
	// Server makes it a server, bootstrapping a cluster of one.
	Server bool
	// Join is the address of an agent to join.
	Join netip.Addr
}

// Agent is a running agent.
type Agent struct {
	Name string
	Addr netip.Addr
	// HTTP is its HTTP API, http://addr:8500.
	HTTP string

	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   sync.Mutex
	done chan struct{}
}

// ErrNotBuilt says the consul binary is not built.
var ErrNotBuilt = errors.New("the consul binary is not built: run " + Script + " (4 to 10 minutes), or set " + BinEnv + " to the directory holding it")

// Find returns the directory of the consul binary: $GHOSTWATCH_CONSUL_BIN,
// else the cache scripts/consul-binary.sh builds into; ErrNotBuilt when
// there is none.
func Find() (string, error) {
	return testenv.BinDir(BinEnv, Script, ErrNotBuilt, Binary)
}

// Bin returns the directory of the consul binary, and stops the test
// (testenv.Unavailable) when it is not built.
func Bin(tb testing.TB) string {
	tb.Helper()
	dir, err := Find()
	if errors.Is(err, ErrNotBuilt) {
		testenv.Unavailable(tb, err.Error())
		return ""
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Start starts an agent and stops it when the test ends; it returns once
// the agent answers (a server: once it leads its cluster).
func Start(tb testing.TB, c Config) *Agent {
	tb.Helper()
	a, err := Create(Bin(tb), tb.TempDir(), c)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		a.Kill()
		if tb.Failed() {
			tb.Logf("consul agent %s logged:\n%s", c.Name, a.Log())
		}
	})
	return a
}

// Create starts an agent of the consul binary in bin, its data in dir;
// it returns once the agent answers (a server: once it leads its
// cluster). The caller stops it with Kill.
func Create(bin, dir string, c Config) (*Agent, error) {
	cfg := map[string]any{
		"node_name":   c.Name,
		"data_dir":    filepath.Join(dir, "data"),
		"bind_addr":   c.Addr.String(),
		"client_addr": c.Addr.String(),
		"log_level":   "INFO",
		"ports":       map[string]any{"dns": -1, "grpc": -1, "https": -1, "grpc_tls": -1},
		"acl": map[string]any{"enabled": true, "default_policy": "deny", "enable_token_persistence": false,
			"tokens": map[string]any{"initial_management": Token, "agent": Token, "default": ""}},
		"disable_update_check": true,
		// Gone members are reaped after a day (the default 72h is as good).
		"leave_on_terminate": false,
	}
	if c.Server {
		cfg["server"], cfg["bootstrap_expect"] = true, 1
	}
	if c.Join.IsValid() {
		cfg["retry_join"] = []string{c.Join.String()}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return nil, err
	}
	a := &Agent{Name: c.Name, Addr: c.Addr, HTTP: "http://" + netip.AddrPortFrom(c.Addr, 8500).String(), log: &bytes.Buffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(filepath.Join(bin, "consul"), "agent", "-config-file", file)
	a.cmd.Stdout, a.cmd.Stderr = (*lockedWriter)(a), (*lockedWriter)(a)
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("consul agent %s: %w", c.Name, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	ready := "/v1/agent/self"
	if c.Server {
		ready = "/v1/status/leader"
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		body, err := a.Get(ready)
		if err == nil && (!c.Server || len(bytes.Trim(bytes.TrimSpace(body), `"`)) > 0) {
			break
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("consul agent %s exited: %s", c.Name, a.Log())
		default:
		}
		if time.Now().After(deadline) {
			a.Kill()
			return nil, fmt.Errorf("consul agent %s not ready within 60s (%v): %s", c.Name, err, a.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return a, nil
}

// Get asks the agent's HTTP API path with the management token, and
// returns the body of a 200 answer.
func (a *Agent) Get(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.HTTP+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Consul-Token", Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s: %s", a.HTTP, path, resp.Status, bytes.TrimSpace(buf.Bytes()))
	}
	return buf.Bytes(), nil
}

// Member is one member as /v1/agent/members lists it.
type Member struct {
	Name   string
	Addr   string
	Status int
}

// Members returns the agent's LAN members.
func (a *Agent) Members() ([]Member, error) {
	b, err := a.Get("/v1/agent/members")
	if err != nil {
		return nil, err
	}
	var ms []Member
	return ms, json.Unmarshal(b, &ms)
}

// Kill stops the agent without leaving (SIGKILL), as a pod killed by an
// OOM or a node's loss stops.
func (a *Agent) Kill() {
	if a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
	}
}

// Log returns what the agent printed.
func (a *Agent) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

type lockedWriter Agent

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(p)
}

// Loopback reports whether addr can be bound here, and says why not.
func Loopback(addr netip.Addr) error {
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return errors.New("cannot bind " + addr.String() + ": " + err.Error())
	}
	return l.Close()
}
