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

	"github.com/ghostwatch/ghostwatch/internal/redact"
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

// session opens one RPC connection to the agent (handshake, then auth when
// a key is given), runs f on it and closes it, all within the timeout.
// When ctx ends first, the connection is closed under the call waiting on
// the agent, and session says which part the agent did not answer.
func (s *Serf) session(ctx context.Context, f func(*serfRPC) error) error {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return s.expired(ctx, timeout, "to the RPC handshake")
		}
		// A dial's error quotes the address as given.
		return redact.Error(s.explain(err, "connecting"), s.Addr)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	c := newSerfRPC(conn)
	what := "to the RPC handshake"
	err = s.open(c)
	if err == nil {
		what = "to a call"
		err = f(c)
	}
	if c.failed() && ctx.Err() != nil {
		return s.expired(ctx, timeout, what)
	}
	return err
}

// open shakes hands with the agent, then gives it the auth key if any.
func (s *Serf) open(c *serfRPC) error {
	if err := c.handshake(); err != nil {
		return s.explain(err, "connecting")
	}
	if s.AuthKey != "" {
		if err := c.auth(s.AuthKey); err != nil {
			return s.explain(err, "connecting")
		}
	}
	return nil
}

// addr is the agent's address as it is printed: without the user
// information an address may carry by mistake (a key given as
// KEY@host:port).
func (s *Serf) addr() string { return redact.Addr(s.Addr) }

// expired says that the agent did not answer in time, or that the caller
// gave up.
func (s *Serf) expired(ctx context.Context, timeout time.Duration, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("serf agent %s: no answer %s within %s: is %s the agent's RPC address (serf agent -rpc-addr, 127.0.0.1:7373 by default), not its gossip port (7946)? %w",
			s.addr(), what, timeout, s.addr(), context.DeadlineExceeded)
	}
	return fmt.Errorf("serf agent %s: %w", s.addr(), context.Cause(ctx))
}

// explain turns what the RPC returned into what failed and what to do.
func (s *Serf) explain(err error, doing string) error {
	var op *net.OpError
	var refusal serfRefusal
	switch {
	case errors.As(err, &refusal) && refusal == serfAuthRequired:
		return fmt.Errorf("serf agent %s: %s: the agent has an RPC auth key (serf agent -rpc-auth); give it in SERF_RPC_AUTH (scan: --serf-auth)", s.addr(), err)
	case errors.As(err, &refusal) && refusal == serfAuthInvalid:
		return fmt.Errorf("serf agent %s: %s: the RPC auth key given is not the agent's -rpc-auth key", s.addr(), err)
	case errors.As(err, &refusal):
		return fmt.Errorf("serf agent %s: %s: the agent answered with an error: %w; its log may say more", s.addr(), doing, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("serf agent %s: unreachable: %w: no agent serves RPC there (serf agent -rpc-addr, 127.0.0.1:7373 by default)", s.addr(), err)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("serf agent %s: unreachable: %w", s.addr(), err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("serf agent %s: the connection closed in the middle of a reply while %s (%w): is %s a Serf agent's RPC address (serf agent -rpc-addr), not its gossip port or another service?", s.addr(), doing, err, s.addr())
	case closed(err):
		return fmt.Errorf("serf agent %s: the connection closed while %s: is %s a Serf agent's RPC address (serf agent -rpc-addr), not its gossip port or another service?", s.addr(), doing, s.addr())
	case errors.Is(err, errNotSerfRPC):
		return fmt.Errorf("serf agent %s: %s: %w: is %s a Serf agent's RPC address (serf agent -rpc-addr), not its gossip port or another service?", s.addr(), doing, err, s.addr())
	}
	return fmt.Errorf("serf agent %s: %s: %w", s.addr(), doing, err)
}

// closed reports whether err says the connection closed: the peer's end
// of the stream, or the socket's word when a write came first.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Members returns the agent's view of its members (the RPC's members
// call), with its own name (the stats call) as the view's Local.
func (s *Serf) Members(ctx context.Context) (*snapshot.GossipView, error) {
	var v *snapshot.GossipView
	err := s.session(ctx, func(c *serfRPC) (err error) {
		v, err = s.view(c)
		return err
	})
	if err != nil {
		return nil, err
	}
	v.From = s.addr()
	return v, nil
}

// view reads the members and the agent's name on an open connection.
func (s *Serf) view(c *serfRPC) (*snapshot.GossipView, error) {
	ms, err := c.members()
	if err != nil {
		return nil, s.explain(err, "reading members")
	}
	// The agent's name is a nicety: an agent that will not say it
	// still gives its members.
	stats, _ := c.stats()
	v, err := serfView(ms)
	if err != nil {
		return nil, fmt.Errorf("serf agent %s: members:%w", s.addr(), err)
	}
	if err := checkNames(v); err != nil {
		return nil, fmt.Errorf("serf agent %s: members: %w", s.addr(), err)
	}
	v.Local = stats["agent"]["name"]
	return v, nil
}

// serfView maps the RPC's members as parseSerf maps serf members
// -format=json.
func serfView(ms []serfMember) (*snapshot.GossipView, error) {
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
	return s.session(ctx, func(c *serfRPC) error { return s.forceLeave(c, node) })
}

// forceLeave forces node out on an open connection, as ForceLeave says.
func (s *Serf) forceLeave(c *serfRPC, node string) error {
	status, err := s.memberStatus(c, node)
	switch {
	case err != nil:
		return err
	case status == "":
		return fmt.Errorf("serf agent %s lists no member %s: nothing to force out", s.addr(), node)
	case status == "alive" || status == "leaving":
		return fmt.Errorf("serf agent %s: member %s is %s: force-leave is for failed members (an alive one refutes it)", s.addr(), node, status)
	}
	if err := c.forceLeavePrune(node); err != nil {
		return s.explain(err, "forcing "+node+" out")
	}
	status, err = s.memberStatus(c, node)
	switch {
	case err != nil:
		return err
	case status != "":
		return fmt.Errorf("serf agent %s still lists %s (%s) after force-leave with prune: agents before Serf 0.8.4 ignore prune and keep it for TombstoneTimeout (24 h by default)", s.addr(), node, status)
	}
	return nil
}

// memberStatus is node's status as the agent lists it, "" when unlisted.
func (s *Serf) memberStatus(c *serfRPC, node string) (string, error) {
	ms, err := c.members()
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
