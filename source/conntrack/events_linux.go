//go:build linux

package conntrack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// The ctnetlink multicast groups (enum nfnetlink_groups in
	// linux/netfilter/nfnetlink.h). NFNLGRP_CONNTRACK_UPDATE (2) is not
	// joined: every state change of every connection would be an event.
	nfnlgrpConntrackNew     = 1
	nfnlgrpConntrackDestroy = 3

	// eventRcvBuf is the socket receive buffer asked for (SO_RCVBUFFORCE,
	// else SO_RCVBUF, which the kernel caps at net.core.rmem_max); the
	// kernel doubles it. It charges each queued event at the size of its
	// buffer, over 1 KiB, so the 16 MiB granted hold some 12,000 events
	// (measured on Linux 6.18): a burst of new connections, or a flush of
	// the table, while the reader is busy. Without CAP_NET_ADMIN the
	// usual rmem_max of 208 KiB holds a few hundred.
	eventRcvBuf = 8 << 20
	// eventBufSize holds the largest event: the kernel sends each in a
	// datagram of its own, well under 4 KiB even with helpers and labels.
	eventBufSize = 16 << 10
	// pollInterval bounds how long Run waits in poll(2) before it looks at
	// its context again.
	pollInterval = 200 * time.Millisecond

	// eventsSysctl is net.netfilter.nf_conntrack_events, per network
	// namespace.
	eventsSysctl = "/proc/sys/net/netfilter/nf_conntrack_events"
)

// Subscription is a netlink socket joined to the conntrack event groups of
// the network namespace it was opened in (that of the thread that called
// Subscribe); it keeps receiving that namespace's events whatever thread
// reads it. A Subscription is not safe for concurrent use: Close it after
// Run has returned (end Run's context to make it return).
type Subscription struct {
	nlSocket

	// pending holds the messages of the last datagram (in buf) not yet
	// handled: Run returned before them, when fn failed or an event did
	// not parse, and the next Run starts with them.
	pending []byte
	// overflowed is set when the kernel reported lost events and the
	// events queued before the loss have not all been discarded yet (the
	// context ended first): the next Run finishes that and returns
	// ErrOverflow.
	overflowed bool

	ev  Event
	pfd [1]unix.PollFd
}

// Subscribe opens a netlink socket in the calling thread's network
// namespace joined to the NFNLGRP_CONNTRACK_NEW and
// NFNLGRP_CONNTRACK_DESTROY groups. Events are queued from the moment
// Subscribe returns, so a caller can Subscribe, then Dump the table, then
// Run, and miss nothing in between (events for entries the dump also
// returned are duplicates the caller must tolerate: a new event for an
// entry it already has, a destroy event for one it never saw). One
// exception is the kernel's: with nf_conntrack_events at 2, entries created
// before any event listener existed send no destroy event (see
// EventsEnabled).
//
// Joining the groups needs CAP_NET_ADMIN: without it the error wraps
// ErrPermission. A kernel without nfnetlink gives an error wrapping
// source.ErrUnsupported. The kernel sends nothing when
// net.netfilter.nf_conntrack_events is 0 in the namespace; see
// EventsEnabled.
func Subscribe() (*Subscription, error) {
	return subscribe(0)
}

// subscribe is Subscribe with, when rcvBuf is not 0, that SO_RCVBUF instead
// of the large buffer (for tests of overflow).
func subscribe(rcvBuf int) (*Subscription, error) {
	sock, err := openSocket("conntrack events", eventBufSize)
	if err != nil {
		return nil, err
	}
	s := &Subscription{nlSocket: sock}
	fd := s.fd
	// The buffer is sized before joining, so that no event is queued
	// against a small one.
	if rcvBuf != 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	} else {
		s.setRcvBuf(eventRcvBuf)
	}
	if err := s.bind(); err != nil {
		s.close()
		return nil, fmt.Errorf("conntrack events: netlink bind: %w", err)
	}
	// It sends no requests, so neither NETLINK_EXT_ACK nor NETLINK_CAP_ACK
	// (see Open): they only shape the kernel's answers to requests.
	//
	// Not NETLINK_BROADCAST_ERROR: with it the kernel treats an event it
	// could not queue here as undelivered and keeps destroyed entries
	// around (on the dying list) until it can deliver them, so a slow
	// reader would hold back the node's conntrack table. Losses are
	// reported by ENOBUFS on the next recv instead, which Run turns into
	// ErrOverflow.
	for _, g := range [...]int{nfnlgrpConntrackNew, nfnlgrpConntrackDestroy} {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, g); err != nil {
			s.close()
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return nil, fmt.Errorf("conntrack events: joining multicast group %d: %w: %w", g, ErrPermission, err)
			}
			return nil, fmt.Errorf("conntrack events: joining multicast group %d: %w", g, err)
		}
	}
	s.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	return s, nil
}

// Close closes the socket; the kernel stops queuing events for it.
func (s *Subscription) Close() error {
	s.pending = nil
	return s.close()
}

// Run delivers events to fn, in the order the kernel queued them, until ctx
// ends (it returns ctx.Err()), fn returns an error (Run returns it as it
// is), an event does not parse (an error wrapping the message's fault), the
// socket fails, or the kernel reports that it dropped events (ErrOverflow).
// After any of these Run can be called again: it continues with the next
// event, and after ErrOverflow with the first event queued after the loss.
//
// fn receives each event by value; the Flow's fields hold no references to
// Run's buffers, so fn may keep it. A nil fn discards events. Apart from
// what fn does, receiving and decoding do not allocate.
//
// Run notices the end of ctx within about 200ms even when no events come:
// it waits for them in poll(2) with that timeout rather than in a blocking
// recv.
func (s *Subscription) Run(ctx context.Context, fn func(Event) error) error {
	if s.fd < 0 {
		return errors.New("conntrack events: subscription closed")
	}
	if s.overflowed {
		if err := s.discard(ctx); err != nil {
			return err
		}
		return ErrOverflow
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(s.pending) == 0 {
			b, err := s.recv()
			switch err {
			case nil:
				s.pending = b
			case unix.EAGAIN:
				if err := s.wait(); err != nil {
					return err
				}
				continue
			case unix.ENOBUFS:
				s.overflowed = true
				if err := s.discard(ctx); err != nil {
					return err
				}
				return ErrOverflow
			default:
				if errors.Is(err, errMalformed) {
					return fmt.Errorf("conntrack events: %w", err)
				}
				return fmt.Errorf("conntrack events: recvmsg: %w", err)
			}
		}
		m, rest, err := nextMessage(s.pending)
		if err != nil {
			s.pending = nil // the rest of the datagram cannot be framed
			return fmt.Errorf("conntrack events: %w", err)
		}
		s.pending = rest
		ok, err := decodeEvent(m, &s.ev)
		if err != nil {
			return err
		}
		if !ok || fn == nil {
			continue
		}
		if err := fn(s.ev); err != nil {
			return err
		}
	}
}

// recv reads one datagram from the kernel into s.buf without blocking:
// EAGAIN when none is queued, ENOBUFS (once) when the kernel has dropped
// events since the last recv.
func (s *Subscription) recv() ([]byte, error) { return s.receive(unix.MSG_DONTWAIT) }

// wait blocks until a datagram or an error is queued, or pollInterval has
// passed.
func (s *Subscription) wait() error {
	_, err := unix.Poll(s.pfd[:], int(pollInterval/time.Millisecond))
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("conntrack events: poll: %w", err)
	}
	return nil
}

// discard reads and drops every queued datagram. They were queued before
// events were lost, so delivering them after the caller has re-read the
// table would be wrong (a new event for an entry whose destroy event was
// dropped would bring it back). Emptying the queue also re-arms the
// kernel's loss report: it sets ENOBUFS only on the first drop after the
// queue was last empty.
func (s *Subscription) discard(ctx context.Context) error {
	s.pending = nil
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := s.recv()
		switch {
		case err == nil, errors.Is(err, errMalformed), err == unix.ENOBUFS:
		case err == unix.EAGAIN:
			s.overflowed = false
			return nil
		default:
			return fmt.Errorf("conntrack events: discarding events queued before a loss: %w", err)
		}
	}
}

// EventsEnabled reports whether the kernel sends conntrack events in the
// calling thread's network namespace, from net.netfilter.nf_conntrack_events
// there: 0 is off (Subscribe succeeds, but no event ever comes, so the
// caller must keep reading the whole table); 1 is on; 2, the default since
// Linux 5.19, is on for the entries created while some event listener
// existed (in any network namespace of the host on current kernels). With
// 2, an entry created while there was none never gets event state: its
// destroy event is not sent even to a later subscriber, and only a re-read
// of the table shows that it went.
//
// A kernel without conntrack events (CONFIG_NF_CONNTRACK_EVENTS) or without
// nf_conntrack loaded has no such sysctl: the error then wraps
// os.ErrNotExist.
func EventsEnabled() (bool, error) {
	return readEventsSysctl(eventsSysctl)
}

func readEventsSysctl(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("conntrack events: %s does not exist: nf_conntrack is not loaded or the kernel was built without conntrack events: %w", path, err)
		}
		return false, fmt.Errorf("conntrack events: %w", err)
	}
	switch v := string(bytes.TrimSpace(b)); v {
	case "0":
		return false, nil
	case "1", "2":
		return true, nil
	default:
		return false, fmt.Errorf("conntrack events: %s is %q, not 0, 1 or 2", path, v)
	}
}
