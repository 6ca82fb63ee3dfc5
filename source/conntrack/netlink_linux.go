//go:build linux

package conntrack

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

const (
	// readBufSize holds the largest datagram the kernel sends in a dump:
	// netlink dumps fill skbs of at most 32 KiB.
	readBufSize = 64 << 10
	// sockRcvBuf is the socket receive buffer asked for (SO_RCVBUFFORCE,
	// else SO_RCVBUF, which the kernel caps at net.core.rmem_max).
	sockRcvBuf = 4 << 20
)

// Conn is a netlink socket to the conntrack subsystem of the network
// namespace it was opened in (that of the calling thread). A Conn is not
// safe for concurrent use.
type Conn struct {
	nlSocket
	port uint32 // our netlink port id
	seq  uint32

	req []byte // request buffer, reused

	// pending is the sequence number of a dump that was abandoned (the
	// callback failed, the context ended, a message did not parse) while
	// the kernel still had entries queued for it; they are drained before
	// the next request.
	pending    uint32
	hasPending bool

	// ahead are the receive buffers of a dump (c.buf the first of them).
	ahead [][]byte
}

// Open opens a netlink socket to the conntrack subsystem (NETLINK_NETFILTER)
// in the calling thread's network namespace. It needs CAP_NET_ADMIN only to
// use the socket, not to open it. A kernel without nfnetlink gives an error
// wrapping source.ErrUnsupported.
func Open() (*Conn, error) {
	sock, err := openSocket("conntrack", readBufSize)
	if err != nil {
		return nil, err
	}
	c := &Conn{nlSocket: sock, req: make([]byte, 0, 512)}
	if err := c.bind(); err != nil {
		c.close()
		return nil, fmt.Errorf("conntrack: netlink bind: %w", err)
	}
	if c.port, err = c.localPort(); err != nil {
		c.close()
		return nil, fmt.Errorf("conntrack: netlink getsockname: %w", err)
	}
	// A large receive buffer only matters when the kernel may queue more
	// than one datagram; SO_RCVBUFFORCE needs CAP_NET_ADMIN, which the
	// dump needs anyway.
	c.setRcvBuf(sockRcvBuf)
	// Errors carry the kernel's explanation and not the whole request.
	_ = unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	_ = unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	return c, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.close() }

func (c *Conn) nextSeq() uint32 {
	c.seq++
	if c.seq == 0 {
		c.seq++
	}
	return c.seq
}

func (c *Conn) send(b []byte) error {
	if c.fd < 0 {
		return errors.New("conntrack: connection closed")
	}
	for {
		err := unix.Sendto(c.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// recv reads one datagram from the kernel into c.buf, waiting for it. A
// datagram larger than the buffer is an error: its tail is lost.
func (c *Conn) recv() ([]byte, error) { return c.receive(0) }

// drain reads and discards what remains of an abandoned dump.
func (c *Conn) drain() error {
	for c.hasPending {
		b, err := c.recv()
		if err != nil {
			return fmt.Errorf("conntrack: draining an abandoned dump: %w", err)
		}
		for len(b) > 0 {
			m, rest, err := nextMessage(b)
			if err != nil {
				return fmt.Errorf("conntrack: draining an abandoned dump: %w", err)
			}
			b = rest
			if m.seq == c.pending && (m.typ == nlmsgDone || m.typ == nlmsgError) {
				c.hasPending = false
				break
			}
		}
	}
	return nil
}

// Dump streams every entry of the table, IPv4 and IPv6, to fn, and returns
// how many entries were seen. fn is called with one Flow that is reused for
// every entry: it must copy what it keeps (a nil fn only counts). An error
// from fn, the end of ctx, lost messages (ENOBUFS) or a message that does
// not parse end the dump with an error, and the entries passed to fn so far
// must then be discarded: they are not the whole table. Without
// CAP_NET_ADMIN the error wraps ErrPermission; in a kernel without
// nf_conntrack_netlink it wraps source.ErrUnsupported.
//
// The context is checked between datagrams (a few hundred entries each):
// the kernel produces the next one as soon as it is asked for, so the
// socket never blocks for long during a dump. The rest of an abandoned dump
// is read and discarded before the Conn's next request.
func (c *Conn) Dump(ctx context.Context, fn func(*snapshot.Flow) error) (seen int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if fn == nil {
		fn = func(*snapshot.Flow) error { return nil }
	}
	if err := c.drain(); err != nil {
		return 0, err
	}
	seq := c.nextSeq()
	c.req = appendDumpRequest(c.req[:0], seq)
	if err := c.send(c.req); err != nil {
		return 0, dumpError(err, 0)
	}
	c.pending, c.hasPending = seq, true
	d := dumper{seq: seq, pid: c.port, fn: fn}
	rx := c.receiveAhead(seq)
	defer func() {
		if rx.stop() {
			c.hasPending = false
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return d.seen, err
		}
		b, err := rx.next()
		if err != nil {
			if errors.Is(err, errMalformed) {
				return d.seen, fmt.Errorf("conntrack dump: %w", err)
			}
			return d.seen, dumpError(err, d.seen)
		}
		over, err := d.feed(b)
		rx.release(b)
		if over {
			c.hasPending = false
		}
		if err != nil {
			var ke *kernelError
			if errors.As(err, &ke) {
				return d.seen, dumpError(err, d.seen)
			}
			return d.seen, fmt.Errorf("conntrack dump: %w", err)
		}
		if over {
			return d.seen, nil
		}
	}
}

// aheadBuffers is how many datagrams a dump receives ahead of the one
// being decoded.
const aheadBuffers = 4

// ahead receives a dump's datagrams on a goroutine of its own while the
// caller decodes the ones before: the kernel fills the next datagram in
// that goroutine's recvmsg, on another core when there is one, so that a
// dump takes about as long as the kernel's part alone rather than the sum
// of the kernel's part and the decoding.
type ahead struct {
	full chan received
	free chan []byte
	quit chan struct{}
	done chan struct{}
	// end is set once the dump's last datagram was received: nothing more
	// will come for it, whether or not it was decoded.
	end bool
}

type received struct {
	b   []byte
	err error
}

// receiveAhead starts receiving the datagrams answering dump seq.
func (c *Conn) receiveAhead(seq uint32) *ahead {
	a := &ahead{full: make(chan received, aheadBuffers), free: make(chan []byte, aheadBuffers),
		quit: make(chan struct{}), done: make(chan struct{})}
	if c.ahead == nil {
		c.ahead = make([][]byte, aheadBuffers)
		c.ahead[0] = c.buf
		for i := 1; i < aheadBuffers; i++ {
			c.ahead[i] = make([]byte, len(c.buf))
		}
	}
	for _, b := range c.ahead {
		a.free <- b
	}
	go func() {
		defer close(a.done)
		var rx rxArgs
		for {
			var buf []byte
			select {
			case buf = <-a.free:
			case <-a.quit:
				return
			}
			b, err := c.receiveInto(buf, &rx, 0)
			if err == nil && lastOfDump(b, seq) {
				a.end = true
			}
			select {
			case a.full <- received{b, err}:
			case <-a.quit:
				return
			}
			// The last datagram of the dump, or a failure: nothing more
			// will come for it. (The socket never blocks while a dump
			// runs: the kernel fills the next datagram as soon as one is
			// read.)
			if err != nil || a.end {
				return
			}
		}
	}()
	return a
}

// next returns the next datagram received.
func (a *ahead) next() ([]byte, error) {
	r := <-a.full
	return r.b, r.err
}

// release gives a datagram's buffer back for the next.
func (a *ahead) release(b []byte) {
	if cap(b) > 0 {
		a.free <- b[:cap(b)]
	}
}

// stop ends the receiving and waits for it: a receive under way ends with
// the datagram it is waiting for, which the dump's kernel side sends. It
// reports whether the dump's last datagram was received, decoded or not:
// then nothing of the dump is left to drain.
func (a *ahead) stop() bool {
	close(a.quit)
	<-a.done
	return a.end
}

// lastOfDump reports whether datagram b holds the end of dump seq
// (NLMSG_DONE or NLMSG_ERROR), or does not parse (the decoder says why).
func lastOfDump(b []byte, seq uint32) bool {
	for len(b) > 0 {
		m, rest, err := nextMessage(b)
		if err != nil {
			return true
		}
		if m.seq == seq && (m.typ == nlmsgDone || m.typ == nlmsgError) {
			return true
		}
		b = rest
	}
	return false
}

// request sends one message that asks for an acknowledgement and waits for
// it.
func (c *Conn) request(b []byte, seq uint32) error { return c.exchange(b, seq, nil) }

// exchange sends one message that asks for an acknowledgement, passes the
// messages that answer it before the acknowledgement to fn (with a nil fn,
// they are an error) and returns the acknowledgement's error. After fn
// fails, the rest of the answer is left queued; the next request skips it
// (its sequence number is not the next request's).
func (c *Conn) exchange(b []byte, seq uint32, fn func(message) error) error {
	if err := c.drain(); err != nil {
		return err
	}
	if err := c.send(b); err != nil {
		return err
	}
	for {
		buf, err := c.recv()
		if err != nil {
			return err
		}
		for len(buf) > 0 {
			m, rest, err := nextMessage(buf)
			if err != nil {
				return err
			}
			buf = rest
			if m.seq != seq {
				continue // a late answer to an abandoned request
			}
			if m.typ == nlmsgError {
				return parseErrorMsg(m)
			}
			if fn == nil {
				return fmt.Errorf("%w: message type %#x instead of an acknowledgement", errMalformed, m.typ)
			}
			if err := fn(m); err != nil {
				return err
			}
		}
	}
}

// Create inserts an entry with f's original and reply tuples (a reply
// source other than the original destination makes it a DNAT entry),
// protocol, TCP or SCTP state, status, timeout (required), mark and zone.
// Of the status, the bits userspace may set are sent (SEEN_REPLY, ASSURED,
// ...): EXPECTED, CONFIRMED and DYING are the kernel's, and it ignores the
// NAT bits. An existing entry with the same tuple gives an error wrapping
// syscall.EEXIST. It is meant for tests, benchmarks and the lab.
func (c *Conn) Create(f *snapshot.Flow) error {
	err := c.create(f, true)
	if errors.Is(err, unix.EBUSY) {
		if _, sent := createStatus(f.Status, false); sent {
			// A kernel that has not marked the new entry confirmed yet
			// when it applies the status (see createStatus).
			err = c.create(f, false)
		}
	}
	if err != nil {
		return fmt.Errorf("conntrack: create %v: %w", f, err)
	}
	return nil
}

func (c *Conn) create(f *snapshot.Flow, confirmed bool) error {
	seq := c.nextSeq()
	req, err := appendCreateRequest(c.req[:0], seq, f, confirmed)
	c.req = req[:0]
	if err != nil {
		return err
	}
	return c.request(req, seq)
}

// Delete removes the one entry whose original tuple (in f's zone) is f's.
// When f.ID is not 0 the kernel deletes the entry only if it still has that
// ID, so an entry that was replaced since it was read is left alone, unless
// the new entry reused the old one's memory: the kernel derives the ID from
// the entry's address and original tuple, so the two then have the same ID
// (Get shows the reply tuple, which tells them apart). An entry that is
// gone (or has another ID) gives an error wrapping syscall.ENOENT.
func (c *Conn) Delete(f *snapshot.Flow) error {
	seq := c.nextSeq()
	req, err := appendDeleteRequest(c.req[:0], seq, f)
	c.req = req[:0]
	if err == nil {
		err = c.request(req, seq)
	}
	if err != nil {
		return fmt.Errorf("conntrack: delete %v: %w", f, err)
	}
	return nil
}

// DeleteJudged removes the entry f was read as, and no other: the one
// whose reply tuple (in f's zone) is f's, and only if it still has f's ID.
// The kernel looks the tuple up among the tuples of both directions and
// refuses a delete whose ID is not the entry's (ctnetlink_del_conntrack).
// An entry that replaced f since it was read (a client that reconnected
// from the same port, translated to another backend) has another reply
// tuple, so it is not found, even when it has f's ID: the kernel derives
// the ID from the entry's address and original tuple, both of which a
// replacement may share (Delete, which names the original tuple, relies
// on a read-back to tell them apart). f.ID must not be 0. An entry that
// is gone, or replaced, gives an error wrapping syscall.ENOENT.
func (c *Conn) DeleteJudged(f *snapshot.Flow) error {
	seq := c.nextSeq()
	req, err := appendDeleteJudgedRequest(c.req[:0], seq, f)
	c.req = req[:0]
	if err == nil {
		err = c.request(req, seq)
	}
	if err != nil {
		return fmt.Errorf("conntrack: delete as judged %v: %w", f, err)
	}
	return nil
}

// Get asks the kernel for the one entry whose original tuple (in f's zone)
// is f's, as `conntrack -G` does, and returns it as it is now, decoded as a
// dumped entry is. Only f's protocol, original tuple and zone are read. It
// is the last look before acting on an entry read earlier: whether the
// kernel still has it, with the same ID and reply tuple (the ID alone does
// not tell an entry from one that replaced it; see Delete).
//
// When there is no such entry the error wraps syscall.ENOENT; without
// CAP_NET_ADMIN it wraps ErrPermission.
func (c *Conn) Get(f *snapshot.Flow) (snapshot.Flow, error) {
	var got snapshot.Flow
	found := false
	seq := c.nextSeq()
	req, err := appendGetRequest(c.req[:0], seq, f)
	c.req = req[:0]
	if err == nil {
		err = c.exchange(req, seq, func(m message) error {
			switch {
			case m.typ != ctMsgTypeNew:
				return malformed("message type %#x in answer to a get", m.typ)
			case found:
				return malformed("more than one entry in answer to a get")
			}
			found = true
			return parseFlow(m.payload, &got)
		})
	}
	switch {
	case err != nil:
	case !found:
		err = malformed("acknowledgement without the entry asked for")
	case got.Key() != f.Key():
		err = onlyReplyMatches(&got)
	}
	if err != nil {
		return snapshot.Flow{}, getError(f, err)
	}
	return got, nil
}

// onlyReplyMatches is the error of a get answered with an entry whose
// original tuple is not the one asked for. The kernel looks the tuple up
// among the tuples of both directions: it found an entry whose reply tuple
// is the one asked for. No entry has it as its original tuple then, since
// no two entries share a tuple in either direction.
func onlyReplyMatches(got *snapshot.Flow) error {
	return fmt.Errorf("only the reply tuple of %v matches: %w", got, unix.ENOENT)
}

// getError is the error of reading f back: without CAP_NET_ADMIN it wraps
// ErrPermission.
func getError(f *snapshot.Flow, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("conntrack: get %v: %w: %w", f, ErrPermission, err)
	}
	return fmt.Errorf("conntrack: get %v: %w", f, err)
}
