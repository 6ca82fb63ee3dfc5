//go:build linux

package conntrack

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/source"
)

// nlSocket is a NETLINK_NETFILTER socket and what receiving from it needs.
// Conn (requests and dumps) and Subscription (events) each embed one and
// set it up as their use wants: which options, in which order, and whether
// a receive may block.
type nlSocket struct {
	fd  int
	buf []byte // receive buffer, reused
	rx  rxArgs
}

// rxArgs are recvmsg's arguments, kept so that receiving does not
// allocate: one set for each goroutine that receives.
type rxArgs struct {
	msg  unix.Msghdr
	iov  unix.Iovec
	from unix.RawSockaddrNetlink
}

// openSocket opens a NETLINK_NETFILTER socket in the calling thread's
// network namespace, with a receive buffer of bufSize bytes. Errors begin
// with what ("conntrack", "conntrack events"); a kernel without nfnetlink
// gives one wrapping source.ErrUnsupported.
func openSocket(what string, bufSize int) (nlSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		switch {
		case errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.EAFNOSUPPORT):
			return nlSocket{fd: -1}, fmt.Errorf("%s: %w: nfnetlink (and so nf_conntrack_netlink) is not available in this kernel (%w)", what, source.ErrUnsupported, err)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return nlSocket{fd: -1}, fmt.Errorf("%s: %w: %w", what, ErrPermission, err)
		}
		return nlSocket{fd: -1}, fmt.Errorf("%s: netlink socket: %w", what, err)
	}
	return nlSocket{fd: fd, buf: make([]byte, bufSize)}, nil
}

// bind binds the socket to a port id the kernel chooses.
func (s *nlSocket) bind() error {
	return unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// localPort is the port id the kernel gave the bound socket; 0 when it cannot
// tell.
func (s *nlSocket) localPort() (uint32, error) {
	sa, err := unix.Getsockname(s.fd)
	if err != nil {
		return 0, err
	}
	if nl, ok := sa.(*unix.SockaddrNetlink); ok {
		return nl.Pid, nil
	}
	return 0, nil
}

// setRcvBuf asks for a socket receive buffer of n bytes: SO_RCVBUFFORCE,
// which needs CAP_NET_ADMIN, else SO_RCVBUF, which the kernel caps at
// net.core.rmem_max. Failing both leaves the default.
func (s *nlSocket) setRcvBuf(n int) {
	if unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
		_ = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
	}
}

// receive reads one datagram from the kernel into s.buf; flags are
// recvmsg's (MSG_DONTWAIT: EAGAIN when none is queued). An errno is
// returned as it is (ENOBUFS: the kernel dropped messages for this socket).
// A datagram larger than the buffer is an error wrapping errMalformed: its
// tail is lost. Datagrams from other sockets are skipped.
func (s *nlSocket) receive(flags int) ([]byte, error) { return s.receiveInto(s.buf, &s.rx, flags) }

// receiveInto is receive into buf, with rx's arguments.
func (s *nlSocket) receiveInto(buf []byte, rx *rxArgs, flags int) ([]byte, error) {
	for {
		rx.iov.Base = &buf[0]
		rx.iov.SetLen(len(buf))
		rx.msg = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&rx.from)),
			Namelen: unix.SizeofSockaddrNetlink,
			Iov:     &rx.iov,
		}
		rx.msg.SetIovlen(1)
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&rx.msg)), uintptr(flags))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return nil, errno
		}
		if rx.msg.Flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("%w: datagram larger than the %d-byte read buffer", errMalformed, len(buf))
		}
		if rx.from.Pid != 0 {
			continue // not from the kernel
		}
		return buf[:n], nil
	}
}

// close closes the socket; closing it again does nothing.
func (s *nlSocket) close() error {
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}
