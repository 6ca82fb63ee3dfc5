package conntrack

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// EventType is what happened to an entry.
type EventType uint8

const (
	// EventNew is an entry entering the table: the kernel confirmed it
	// (the connection's first packet got through netfilter) or it was
	// created over netlink.
	EventNew EventType = iota + 1
	// EventDestroy is an entry leaving the table: it timed out, was deleted
	// over netlink (conntrack -D or -F), or was dropped to make room in a
	// full table.
	EventDestroy
)

// String returns "new" or "destroy", the words `conntrack -E` prints.
func (t EventType) String() string {
	switch t {
	case EventNew:
		return "new"
	case EventDestroy:
		return "destroy"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one conntrack event. Flow is decoded from the kernel's message
// as a dumped entry is: the tuples, ID, status, mark and zone always; the
// TCP or SCTP state when the kernel includes it; Start only in destroy
// events, and only with nf_conntrack_timestamp enabled when the entry was
// created (new events carry no start time).
type Event struct {
	Type EventType
	Flow snapshot.Flow
}

// ErrOverflow is returned by Run when the kernel dropped events because the
// subscription's socket buffer was full (recv(2) failed with ENOBUFS). The
// caller's view of the table is then incomplete: it must read the table
// again (Dump) and call Run again. The subscription stays usable: Run has
// discarded the events queued before the loss, so every event it delivers
// afterwards happened after the point at which the table is to be re-read.
var ErrOverflow = errors.New("conntrack events: the kernel dropped events (socket buffer full); the table must be read again")

// decodeEvent decodes one message received on a subscription into ev. ok
// is false for a message that is not a conntrack event (it is skipped); a
// conntrack event that does not parse is an error wrapping errMalformed
// that names the event type. It does not allocate.
func decodeEvent(m message, ev *Event) (ok bool, err error) {
	var typ EventType
	switch m.typ {
	case ctMsgTypeNew:
		// With or without NLM_F_CREATE: the UPDATE group, whose messages
		// are also IPCTNL_MSG_CT_NEW, is not joined.
		typ = EventNew
	case ctMsgTypeDelete:
		typ = EventDestroy
	default:
		return false, nil
	}
	if err := parseFlow(m.payload, &ev.Flow); err != nil {
		return false, fmt.Errorf("conntrack %v event: %w", typ, err)
	}
	ev.Type = typ
	return true, nil
}
