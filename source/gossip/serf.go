package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/serf/client"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Serf is a Serf agent's RPC endpoint, as serf's own CLI reaches it:
// -rpc-addr (SERF_RPC_ADDR) and -rpc-auth (SERF_RPC_AUTH).
type Serf struct {
	// Addr is the agent's RPC address, host:port (serf agent -rpc-addr,
	// 127.0.0.1:7373 by default): not its gossip port (7946).
	Addr string
	// AuthKey is the agent's RPC auth key (serf agent -rpc-auth); empty
	// sends none.
	AuthKey string
	// Timeout bounds one exchange with the agent: connecting, the
	// handshake and the calls together. 0 means 10 s, the serf CLI's own
	// timeout; an agent on another continent needs no more than a second.
	Timeout time.Duration
}

// SerfFromEnv returns the agent as serf's CLI finds it: addr, else
// SERF_RPC_ADDR, else 127.0.0.1:7373; authKey, else SERF_RPC_AUTH.
func SerfFromEnv(addr, authKey string) *Serf {
	s := &Serf{Addr: addr, AuthKey: authKey}
	if s.Addr == "" {
		s.Addr = os.Getenv("SERF_RPC_ADDR")
	}
	if s.Addr == "" {
		s.Addr = "127.0.0.1:7373"
	}
	if s.AuthKey == "" {
		s.AuthKey = os.Getenv("SERF_RPC_AUTH")
	}
	return s
}

// The errors a Serf agent's RPC answers with (serf's agent/ipc.go).
const (
	serfAuthRequired = "Authentication required"
	serfAuthInvalid  = "Invalid authentication token"
)

// session opens one RPC connection to the agent (handshake, then auth when
// a key is given), runs f on it and closes it, all within the timeout.
//
// This client (serf v0.10.2) cannot be interrupted: it gives no way to
// abandon a handshake, and closing it while a call waits races with the
// call (serf v0.10.3 fixed that, and needs memberlist v0.6 and newer
// golang.org/x modules than the rest of ghostwatch). So an exchange that
// outlives the timeout is abandoned, not stopped: its goroutine closes the
// connection once the agent answers or drops it, and an agent that does
// neither holds one goroutine and one connection until it does.
func (s *Serf) session(ctx context.Context, f func(*client.RPCClient) error) error {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	opened := make(chan struct{})
	go func() {
		c, err := client.ClientFromConfig(&client.Config{Addr: s.Addr, AuthKey: s.AuthKey, Timeout: timeout})
		close(opened)
		if err != nil {
			done <- s.explain(err, "connecting")
			return
		}
		defer c.Close()
		done <- f(c)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		case <-opened:
			return s.expired(ctx, timeout, "to a call")
		default:
			return s.expired(ctx, timeout, "to the RPC handshake")
		}
	}
}

// expired says that the agent did not answer in time, or that the caller
// gave up.
func (s *Serf) expired(ctx context.Context, timeout time.Duration, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("serf agent %s: no answer %s within %s: is %s the agent's RPC address (serf agent -rpc-addr, 127.0.0.1:7373 by default), not its gossip port (7946)? %w",
			s.Addr, what, timeout, s.Addr, context.DeadlineExceeded)
	}
	return fmt.Errorf("serf agent %s: %w", s.Addr, context.Cause(ctx))
}

// explain turns what the RPC client returned into what failed and what to
// do.
func (s *Serf) explain(err error, doing string) error {
	var op *net.OpError
	switch {
	case err.Error() == serfAuthRequired:
		return fmt.Errorf("serf agent %s: %s: the agent has an RPC auth key (serf agent -rpc-auth); give it in SERF_RPC_AUTH (scan: --serf-auth)", s.Addr, err)
	case err.Error() == serfAuthInvalid:
		return fmt.Errorf("serf agent %s: %s: the RPC auth key given is not the agent's -rpc-auth key", s.Addr, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("serf agent %s: unreachable: %w: no agent serves RPC there (serf agent -rpc-addr, 127.0.0.1:7373 by default)", s.Addr, err)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("serf agent %s: unreachable: %w", s.Addr, err)
	case closed(err):
		return fmt.Errorf("serf agent %s: the connection closed while %s: is %s a Serf agent's RPC address (serf agent -rpc-addr), not its gossip port or another service?", s.Addr, doing, s.Addr)
	}
	return fmt.Errorf("serf agent %s: %s: %w", s.Addr, doing, err)
}

// closed reports whether err says the peer closed the connection: the
// client's own word once its reader saw the end, or the socket's when a
// write came first.
func closed(err error) bool {
	return err.Error() == "client closed" || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Members returns the agent's view of its members (the RPC's members
// call), with its own name (the stats call) as the view's Local.
func (s *Serf) Members(ctx context.Context) (*snapshot.GossipView, error) {
	var ms []client.Member
	var stats map[string]map[string]string
	err := s.session(ctx, func(c *client.RPCClient) error {
		var err error
		if ms, err = c.Members(); err != nil {
			return s.explain(err, "reading members")
		}
		// The agent's name is a nicety: an agent that will not say it
		// still gives its members.
		stats, _ = c.Stats()
		return nil
	})
	if err != nil {
		return nil, err
	}
	v, err := serfView(ms)
	if err != nil {
		return nil, fmt.Errorf("serf agent %s: members:%w", s.Addr, err)
	}
	if err := checkNames(v); err != nil {
		return nil, fmt.Errorf("serf agent %s: members: %w", s.Addr, err)
	}
	v.From = s.Addr
	v.Local = stats["agent"]["name"]
	return v, nil
}

// serfView maps the RPC's members as parseSerf maps serf members
// -format=json.
func serfView(ms []client.Member) (*snapshot.GossipView, error) {
	v := &snapshot.GossipView{System: "serf"}
	for i, m := range ms {
		where := fmt.Sprintf(" members[%d] (%s)", i, m.Name)
		st, err := serfStatus(m.Status)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		a, ok := netip.AddrFromSlice(m.Addr)
		if !ok {
			return nil, fmt.Errorf("%s: an address of %d bytes is not an IP address", where, len(m.Addr))
		}
		v.Members = append(v.Members, snapshot.GossipMember{Name: m.Name, Addr: a.Unmap(), Port: m.Port, Status: st, RawStatus: m.Status, Tags: m.Tags})
	}
	return v, nil
}

// ForceLeave forces node out of the cluster and prunes it from the member
// list (the RPC's force-leave with prune, serf force-leave -prune). The
// node must be listed, failed or left: serf accepts any name silently, and
// an alive member would refute it. Agents before Serf 0.8.4 ignore prune
// and keep the node as left for TombstoneTimeout (24 h by default); that
// is an error naming it.
func (s *Serf) ForceLeave(ctx context.Context, node string) error {
	return s.session(ctx, func(c *client.RPCClient) error {
		status, err := s.memberStatus(c, node)
		switch {
		case err != nil:
			return err
		case status == "":
			return fmt.Errorf("serf agent %s lists no member %s: nothing to force out", s.Addr, node)
		case status == "alive" || status == "leaving":
			return fmt.Errorf("serf agent %s: member %s is %s: force-leave is for failed members (an alive one refutes it)", s.Addr, node, status)
		}
		if err := c.ForceLeavePrune(node); err != nil {
			return s.explain(err, "forcing "+node+" out")
		}
		status, err = s.memberStatus(c, node)
		switch {
		case err != nil:
			return err
		case status != "":
			return fmt.Errorf("serf agent %s still lists %s (%s) after force-leave with prune: agents before Serf 0.8.4 ignore prune and keep it for TombstoneTimeout (24 h by default)", s.Addr, node, status)
		}
		return nil
	})
}

// memberStatus is node's status as the agent lists it, "" when unlisted.
func (s *Serf) memberStatus(c *client.RPCClient, node string) (string, error) {
	ms, err := c.Members()
	if err != nil {
		return "", s.explain(err, "reading members")
	}
	for _, m := range ms {
		if m.Name == node {
			return m.Status, nil
		}
	}
	return "", nil
}
