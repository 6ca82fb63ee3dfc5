//go:build linux

package conntrack

import (
	"fmt"
	"math"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// maxBatch is how many requests GetEach and DeleteEach send in one system
// call: about 25 KiB of requests, and for GetEach about 80 KiB of answers
// queued on the socket, far below its receive buffer.
const maxBatch = 256

// GetEach reads back every entry of fs as Get does, and calls fn with each
// answer, in the order of fs. The requests go to the kernel maxBatch at a
// time in one system call, and the kernel answers each on its own: one
// entry's error (ENOENT) is that entry's alone. An error of the socket
// itself is passed to fn for every entry it left unanswered, and returned.
// fn must not use c: the answers still to come are queued on its socket.
func (c *Conn) GetEach(fs []snapshot.Flow, fn func(i int, got snapshot.Flow, err error)) error {
	return c.each(fs, opGet, fn)
}

// DeleteEach deletes every entry of fs as Delete does (by original tuple
// and zone, and only with its ID when that is not 0), maxBatch a system
// call, and calls fn with each outcome, in the order of fs. An error of the
// socket itself is passed to fn for every entry it left unanswered, and
// returned: such an entry may or may not have been deleted. fn must not
// use c.
func (c *Conn) DeleteEach(fs []snapshot.Flow, fn func(i int, err error)) error {
	return c.each(fs, opDelete, func(i int, _ snapshot.Flow, err error) { fn(i, err) })
}

// DeleteJudgedEach deletes every entry of fs as DeleteJudged does (by
// reply tuple, zone and ID), maxBatch a system call, and calls fn with
// each outcome, in the order of fs, as DeleteEach does.
func (c *Conn) DeleteJudgedEach(fs []snapshot.Flow, fn func(i int, err error)) error {
	return c.each(fs, opDeleteJudged, func(i int, _ snapshot.Flow, err error) { fn(i, err) })
}

// entryOp is what each asks of each entry.
type entryOp int

const (
	opGet entryOp = iota
	opDelete
	opDeleteJudged
)

func (op entryOp) String() string {
	switch op {
	case opGet:
		return "get"
	case opDelete:
		return "delete"
	}
	return "delete as judged"
}

func (c *Conn) each(fs []snapshot.Flow, op entryOp, fn func(int, snapshot.Flow, error)) error {
	if len(fs) == 0 {
		return nil
	}
	get := op == opGet
	what := op.String()
	wrap := func(i int, err error) error {
		if get {
			return getError(&fs[i], err)
		}
		return fmt.Errorf("conntrack: %s %v: %w", what, &fs[i], err)
	}
	if err := c.drain(); err != nil {
		for i := range fs {
			fn(i, snapshot.Flow{}, wrap(i, err))
		}
		return err
	}
	var got [maxBatch]snapshot.Flow
	var found, done [maxBatch]bool
	for base := 0; base < len(fs); base += maxBatch {
		chunk := fs[base:min(len(fs), base+maxBatch)]
		// The chunk's sequence numbers are consecutive: first+j is the
		// request for chunk[j].
		if c.seq > math.MaxUint32-maxBatch-1 {
			c.seq = 0
		}
		first := c.seq + 1
		buf := c.req[:0]
		waiting := 0
		for j := range chunk {
			found[j], done[j] = false, false
			seq := c.nextSeq()
			var err error
			switch op {
			case opGet:
				buf, err = appendGetRequest(buf, seq, &chunk[j])
			case opDelete:
				buf, err = appendDeleteRequest(buf, seq, &chunk[j])
			default:
				buf, err = appendDeleteJudgedRequest(buf, seq, &chunk[j])
			}
			if err != nil {
				done[j] = true
				fn(base+j, snapshot.Flow{}, wrap(base+j, err))
				continue
			}
			waiting++
		}
		c.req = buf[:0]
		fail := func(err error) error {
			for j := range chunk {
				if !done[j] {
					fn(base+j, snapshot.Flow{}, wrap(base+j, err))
				}
			}
			for i := base + len(chunk); i < len(fs); i++ {
				fn(i, snapshot.Flow{}, wrap(i, err))
			}
			return err
		}
		if waiting == 0 {
			continue
		}
		if err := c.send(buf); err != nil {
			return fail(err)
		}
		for waiting > 0 {
			b, err := c.recv()
			if err != nil {
				return fail(err)
			}
			for len(b) > 0 {
				m, rest, err := nextMessage(b)
				if err != nil {
					return fail(err)
				}
				b = rest
				j := int(m.seq - first)
				if m.seq < first || j >= len(chunk) || done[j] {
					continue // a late answer to an abandoned request
				}
				switch {
				case m.typ == nlmsgError:
					err := parseErrorMsg(m)
					if get && err == nil {
						switch {
						case !found[j]:
							err = malformed("acknowledgement without the entry asked for")
						case got[j].Key() != chunk[j].Key():
							err = onlyReplyMatches(&got[j])
						}
					}
					done[j] = true
					waiting--
					if err != nil {
						fn(base+j, snapshot.Flow{}, wrap(base+j, err))
					} else {
						fn(base+j, got[j], nil)
					}
				case get && m.typ == ctMsgTypeNew && !found[j]:
					if err := parseFlow(m.payload, &got[j]); err != nil {
						return fail(err)
					}
					found[j] = true
				default:
					return fail(malformed("message type %#x in answer to a %s", m.typ, what))
				}
			}
		}
	}
	return nil
}
