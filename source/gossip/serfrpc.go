package gossip

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// A Serf agent's RPC (its IPC, serf agent -rpc-addr) is a TCP stream of
// msgpack values. Every request is a header, {Command, Seq}, and for some
// commands a body; the agent answers each request with a header, {Seq,
// Error}, and for some commands a body, in the order asked. The first
// request must be a handshake, then an auth when the agent has an RPC key.
// serfRPC speaks the part of it ghostwatch uses: handshake, auth, members,
// stats and force-leave, one request at a time. The wire format is that of
// the serf module's agent (cmd/serf/command/agent/ipc.go, AgentIPC and its
// request and response types) and of its client (client/rpc_client.go),
// the same since IPC version 1.

// The commands serfRPC sends.
const (
	serfHandshake  = "handshake"
	serfAuth       = "auth"
	serfMembers    = "members"
	serfStats      = "stats"
	serfForceLeave = "force-leave"
)

// serfIPCVersion is the IPC version serfRPC speaks, the only one Serf has.
const serfIPCVersion = 1

// maxSerfReply bounds the bytes one reply may take: a members reply of a
// cluster of 10,000 members, each with the 512 bytes of tags memberlist
// allows, takes about 6 MB.
const maxSerfReply = 64 << 20

// The errors a Serf agent's RPC answers with (AgentIPC's handleRequest,
// handleAuth).
const (
	serfAuthRequired = "Authentication required"
	serfAuthInvalid  = "Invalid authentication token"
)

var (
	// errNotSerfRPC is a reply that is not one a Serf agent sends.
	errNotSerfRPC = errors.New("the reply is not a Serf agent's RPC")
	// errSerfReplyTooLarge is a reply longer than a serfRPC takes.
	errSerfReplyTooLarge = errors.New("the reply is too large")
)

// serfRefusal is the error a Serf agent answered a request with, as it
// said it.
type serfRefusal string

func (e serfRefusal) Error() string { return string(e) }

// serfRequestHeader precedes every request.
type serfRequestHeader struct {
	Command string
	Seq     uint64
}

// serfResponseHeader precedes every reply; Error is empty on success.
type serfResponseHeader struct {
	Seq   uint64
	Error string
}

type serfHandshakeRequest struct {
	Version int32
}

type serfAuthRequest struct {
	AuthKey string
}

type serfForceLeaveRequest struct {
	Node  string
	Prune bool
}

type serfMembersResponse struct {
	Members []serfMember
}

// serfMember is a member as the agent's members command gives it.
type serfMember struct {
	Name string
	// Addr is the member's IP address, 16 bytes for IPv4 too (Go's
	// net.IP as Serf keeps it).
	Addr []byte
	// Port is the member's gossip port.
	Port   uint16
	Tags   map[string]string
	Status string
	// ProtocolMin, ProtocolMax and ProtocolCur are the memberlist
	// protocol versions the member speaks; DelegateMin, DelegateMax and
	// DelegateCur Serf's.
	ProtocolMin, ProtocolMax, ProtocolCur uint8
	DelegateMin, DelegateMax, DelegateCur uint8
}

// serfMsgpack returns the msgpack settings the Serf agent and its client
// use (AgentIPC's and Config's newMsgpackHandle): strings written as str,
// byte slices as bin, time.Time in go-msgpack v1's format. A string field
// decodes from str, bin or the raw bytes older agents wrote alike, and so
// does a byte slice.
func serfMsgpack() *codec.MsgpackHandle {
	return &codec.MsgpackHandle{
		WriteExt:    true,
		BasicHandle: codec.BasicHandle{TimeNotBuiltin: true},
	}
}

// serfWire reads the agent's replies from the connection, keeping the
// first error the connection gave, and refuses more than left bytes.
type serfWire struct {
	r    io.Reader
	left int64
	err  error
}

func (w *serfWire) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.left <= 0 {
		w.err = errSerfReplyTooLarge
		return 0, w.err
	}
	if int64(len(p)) > w.left {
		p = p[:w.left]
	}
	n, err := w.r.Read(p)
	w.left -= int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// serfRPC is one connection to a Serf agent's RPC. It is not safe for
// concurrent use: each call sends its request and reads its reply before
// it returns. Once a call fails on the connection (a write or a read, or
// a reply that cannot be read), every later call fails.
type serfRPC struct {
	conn io.Writer
	in   *serfWire
	// br buffers what in reads; dec decodes the replies' headers from
	// it, and a reply's body is read from it whole (skimSerfValue), then
	// decoded.
	br  *bufio.Reader
	dec *codec.Decoder
	enc *codec.Encoder
	out bytes.Buffer
	seq uint64
	// maxReply bounds the bytes of one reply, maxSerfReply.
	maxReply int64
	// broken is the error that left the stream unusable.
	broken error
	// writeErr is the connection's error on a write.
	writeErr error
}

// newSerfRPC speaks the agent's RPC over conn; it sends nothing until the
// first call.
func newSerfRPC(conn io.ReadWriter) *serfRPC {
	c := &serfRPC{conn: conn, in: &serfWire{r: conn}, maxReply: maxSerfReply}
	h := serfMsgpack()
	c.br = bufio.NewReader(c.in)
	c.dec = codec.NewDecoder(c.br, h)
	c.enc = codec.NewEncoder(&c.out, h)
	return c
}

// failed reports whether the connection itself failed: a write or a read
// returned an error, the peer's closing or the context's.
func (c *serfRPC) failed() bool {
	return c.writeErr != nil || (c.in.err != nil && c.in.err != errSerfReplyTooLarge)
}

// handshake tells the agent the IPC version spoken; it must come first.
func (c *serfRPC) handshake() error {
	return c.call(serfHandshake, &serfHandshakeRequest{Version: serfIPCVersion}, nil)
}

// auth gives the agent its RPC key (serf agent -rpc-auth).
func (c *serfRPC) auth(key string) error {
	return c.call(serfAuth, &serfAuthRequest{AuthKey: key}, nil)
}

// members lists the agent's members, every status.
func (c *serfRPC) members() ([]serfMember, error) {
	var resp serfMembersResponse
	err := c.call(serfMembers, nil, &resp)
	return resp.Members, err
}

// stats returns the agent's statistics by section: stats["agent"]["name"]
// is its node name.
func (c *serfRPC) stats() (map[string]map[string]string, error) {
	var resp map[string]map[string]string
	err := c.call(serfStats, nil, &resp)
	return resp, err
}

// forceLeavePrune forces node out of the cluster and prunes it from the
// member list (serf force-leave -prune).
func (c *serfRPC) forceLeavePrune(node string) error {
	return c.call(serfForceLeave, &serfForceLeaveRequest{Node: node, Prune: true}, nil)
}

// call sends command with its body req (nil for none) and reads the reply
// into resp (nil when the command's reply has no body). An error the
// agent answered is a serfRefusal; the agent sends no body with one.
func (c *serfRPC) call(command string, req, resp any) error {
	if c.broken != nil {
		return fmt.Errorf("%s: the connection is unusable since an earlier call failed: %w", command, c.broken)
	}
	c.seq++
	seq := c.seq
	c.out.Reset()
	if err := c.enc.Encode(&serfRequestHeader{Command: command, Seq: seq}); err != nil {
		return fmt.Errorf("encoding the %s request: %w", command, err)
	}
	if req != nil {
		if err := c.enc.Encode(req); err != nil {
			return fmt.Errorf("encoding the %s request: %w", command, err)
		}
	}
	if _, err := c.conn.Write(c.out.Bytes()); err != nil {
		c.writeErr = err
		c.broken = err
		return err
	}

	c.in.left = c.maxReply
	start := c.dec.NumBytesRead()
	var h serfResponseHeader
	if err := c.dec.Decode(&h); err != nil {
		c.broken = c.readError(err, start, "the response header")
		return c.broken
	}
	if h.Seq != seq {
		c.broken = fmt.Errorf("%w: it answers request %d, where request %d (%s) was asked", errNotSerfRPC, h.Seq, seq, command)
		return c.broken
	}
	if h.Error != "" {
		return serfRefusal(h.Error)
	}
	if resp != nil {
		// The body is read whole and checked against the bounds of a
		// member list before anything of it is decoded.
		raw, err := skimSerfValue(c.br)
		if errors.Is(err, errSerfBound) || errors.Is(err, errNotSerfRPC) {
			c.broken = fmt.Errorf("the %s reply: %w", command, err)
			return c.broken
		}
		if err == nil {
			err = codec.NewDecoderBytes(raw, serfMsgpack()).Decode(resp)
		}
		if err != nil {
			c.broken = c.readError(err, start, "the "+command+" reply")
			return c.broken
		}
	}
	return nil
}

// readError says why a reply could not be decoded: the connection failed
// (the peer closed it, before the reply or in its middle, or the context
// closed it), the reply is too large, or what came is not Serf's RPC.
func (c *serfRPC) readError(err error, start int, what string) error {
	if c.in.err != nil && (err == io.EOF || err == io.ErrUnexpectedEOF || errors.Is(cause(err), c.in.err)) {
		// The bytes that came since the request; the decoder counts
		// only the values it read whole.
		n := max(c.maxReply-c.in.left, int64(c.dec.NumBytesRead()-start))
		switch {
		case c.in.err == io.EOF && n > 0:
			return fmt.Errorf("the reply ends after %d bytes, in %s: %w", n, what, io.ErrUnexpectedEOF)
		case c.in.err == errSerfReplyTooLarge:
			return fmt.Errorf("%s: %w: more than %d bytes", what, errSerfReplyTooLarge, c.maxReply)
		}
		return c.in.err
	}
	return fmt.Errorf("%w: %s: %w", errNotSerfRPC, what, err)
}

// cause is the error the msgpack decoder wrapped, which it gives by a
// Cause method rather than Unwrap; err itself when it wrapped none.
func cause(err error) error {
	if c, ok := err.(interface{ Cause() error }); ok && c.Cause() != nil {
		return c.Cause()
	}
	return err
}
