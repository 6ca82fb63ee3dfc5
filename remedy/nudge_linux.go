package remedy

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// sendSYN connects from local to client without waiting, then closes the
// socket: one SYN on the wire, no retransmission, no reset.
func sendSYN(local netip.AddrPort, client netip.Addr, port uint16) error {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	client = client.Unmap()
	if local.Addr().Is4() != client.Is4() || !client.IsValid() || port == 0 {
		return fmt.Errorf("%w: %s and %s are not of one family", ErrNotNudged, local, client)
	}
	family := unix.AF_INET6
	if local.Addr().Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return fmt.Errorf("a socket to nudge %s: %w", client, err)
	}
	defer unix.Close(fd)
	// Another socket may have used the port and be in TIME_WAIT.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("a socket to nudge %s: %w", client, err)
	}
	switch err := unix.Bind(fd, sockaddr(local)); {
	case errors.Is(err, unix.EADDRNOTAVAIL):
		return fmt.Errorf("%w: %s is not an address of this node", ErrNotNudged, local.Addr())
	case errors.Is(err, unix.EADDRINUSE):
		return fmt.Errorf("%w: a socket on this node holds %s", ErrNotNudged, local)
	case errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %s is a privileged port", ErrNotNudged, local)
	case err != nil:
		return fmt.Errorf("binding to %s to nudge %s: %w", local, client, err)
	}
	peer := netip.AddrPortFrom(client, port)
	switch err := unix.Connect(fd, sockaddr(peer)); {
	case errors.Is(err, unix.EINPROGRESS):
		return nil
	case errors.Is(err, unix.EADDRNOTAVAIL):
		// Another connection holds the very four-tuple.
		return fmt.Errorf("%w: a connection from %s to %s exists on this node", ErrNotNudged, local, peer)
	case err != nil:
		return fmt.Errorf("a SYN from %s to %s: %w", local, peer, err)
	}
	return nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}
