package netbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces are bound, as `ip netns` does.
var netnsDir = "/var/run/netns"

// Gateways the node answers on every veth, as Calico does: hosts route
// everything through them.
var (
	gatewayV4 = netip.MustParseAddr("169.254.1.1")
	gatewayV6 = netip.MustParseAddr("fe80::1")
)

// ErrNotRoot is returned when the bed cannot create namespaces.
var ErrNotRoot = errors.New("the lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN): it creates network namespaces")

// Bed is a set of named network namespaces sharing a prefix. Close removes
// all of them.
type Bed struct {
	prefix string
	// claim, when the bed took it itself (New), is released by Close.
	claim *Claim

	mu     sync.Mutex
	ns     []*namespace
	closed bool
}

// namespace is one named network namespace and the sockets opened in it.
type namespace struct {
	name    string
	handle  netns.NsHandle
	mu      sync.Mutex
	closers []func() error
}

// New claims the prefix (see ClaimPrefix) and starts an empty bed on it;
// Close releases the claim. It refuses when not root, while another lab
// runs with the prefix, and when namespaces with the prefix were left by
// a lab that is no longer running.
func New(prefix string) (*Bed, error) {
	c, err := ClaimPrefix(prefix)
	if err != nil {
		return nil, err
	}
	b := c.Bed()
	b.claim = c
	return b, nil
}

// newNamespace creates prefix-name and applies base sysctls in it.
func (b *Bed) newNamespace(name string, sysctls map[string]string) (*namespace, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("the lab is closed")
	}
	full := b.prefix + "-" + name
	if len(full) > 64 {
		return nil, fmt.Errorf("namespace name %q is too long", full)
	}
	var h netns.NsHandle
	err := onThread(func() error {
		var err error
		h, err = netns.NewNamed(full)
		if err != nil {
			if errors.Is(err, syscall.EPERM) {
				return ErrNotRoot
			}
			return fmt.Errorf("creating network namespace %s: %w", full, err)
		}
		// NewNamed switched this thread into it: configure it here.
		for k, v := range sysctls {
			if err := writeSysctl(k, v); err != nil {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if h.IsOpen() {
		b.ns = append(b.ns, &namespace{name: full, handle: h})
	}
	if err != nil {
		return nil, err
	}
	return b.ns[len(b.ns)-1], nil
}

// baseSysctls make IPv6 usable at once in a new namespace.
var baseSysctls = map[string]string{
	"net/ipv6/conf/all/accept_dad":     "0",
	"net/ipv6/conf/default/accept_dad": "0",
	"net/ipv6/conf/all/disable_ipv6":   "0",
}

// onThread runs fn on a locked OS thread and restores the thread's network
// namespace afterwards; if it cannot, the thread is left locked so the Go
// runtime retires it rather than reuse it in the wrong namespace.
func onThread(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("restoring the thread's network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// do runs fn on a thread inside the namespace.
func (n *namespace) do(fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(n.handle); err != nil {
			return fmt.Errorf("entering %s: %w", n.name, err)
		}
		return fn()
	})
}

// track remembers a socket so that removing the namespace closes it first:
// an open socket keeps its namespace, and so its links, alive.
func (n *namespace) track(c func() error) {
	n.mu.Lock()
	n.closers = append(n.closers, c)
	n.mu.Unlock()
}

func (n *namespace) closeSockets() {
	n.mu.Lock()
	cs := n.closers
	n.closers = nil
	n.mu.Unlock()
	for _, c := range cs {
		c()
	}
}

func (n *namespace) remove() error {
	n.closeSockets()
	err := n.handle.Close()
	if derr := DeleteNamespace(n.name); derr != nil && !errors.Is(derr, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("removing network namespace %s: %w", n.name, derr))
	}
	return err
}

// Close removes every namespace of the bed, and with them their links,
// routes, rules, sockets and conntrack entries. It is safe to call more than
// once and after a failed setup.
func (b *Bed) Close() error {
	b.mu.Lock()
	ns := b.ns
	b.ns = nil
	b.closed = true
	claim := b.claim
	b.claim = nil
	b.mu.Unlock()
	var errs []error
	for i := len(ns) - 1; i >= 0; i-- {
		if err := ns[i].remove(); err != nil {
			errs = append(errs, err)
		}
	}
	// Released also when a namespace could not be removed: it is then a
	// leftover, for `ghostwatch-lab cleanup`.
	if err := claim.Release(); err != nil {
		errs = append(errs, fmt.Errorf("releasing the prefix: %w", err))
	}
	return errors.Join(errs...)
}

// Names lists the namespaces the bed holds now.
func (b *Bed) Names() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, n := range b.ns {
		out = append(out, n.name)
	}
	return out
}

func (b *Bed) forget(n *namespace) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.ns {
		if x == n {
			b.ns = append(b.ns[:i], b.ns[i+1:]...)
			return
		}
	}
}

// writeSysctl writes /proc/sys/<key> for the calling thread's namespace.
func writeSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", key)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s: %w", strings.ReplaceAll(key, "/", "."), err)
	}
	return nil
}

// Listen opens a listener inside the namespace; it is closed when the
// namespace is removed.
func (n *namespace) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.track(ln.Close)
	return trackedListener{ln, n}, nil
}

// trackedListener tracks accepted connections too.
type trackedListener struct {
	net.Listener
	n *namespace
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.track(c.Close)
	}
	return c, err
}

// ListenPacket opens a packet socket inside the namespace.
func (n *namespace) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.do(func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.track(pc.Close)
	return pc, nil
}

// Dial connects from inside the namespace. laddr may be empty; with a fixed
// port, SO_REUSEADDR lets a client reconnect from the same source port.
func (n *namespace) Dial(ctx context.Context, network, laddr, raddr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		})
		return errors.Join(err, serr)
	}}
	if laddr != "" {
		var err error
		switch {
		case strings.HasPrefix(network, "tcp"):
			d.LocalAddr, err = net.ResolveTCPAddr(network, laddr)
		case strings.HasPrefix(network, "udp"):
			d.LocalAddr, err = net.ResolveUDPAddr(network, laddr)
		}
		if err != nil {
			return nil, err
		}
	}
	var c net.Conn
	err := n.do(func() error {
		// The socket is created here, on the namespace's thread; connect
		// completes through the poller and stays in this namespace.
		var err error
		c, err = d.DialContext(ctx, network, raddr)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.track(c.Close)
	return c, nil
}

// HTTPClient is an HTTP client whose connections are made from inside the
// namespace: 127.0.0.1 is the namespace's own loopback.
func (n *namespace) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return n.Dial(ctx, network, "", addr)
		}}}
}

// DeleteNamespace removes the named network namespace's mount point in
// /var/run/netns. Another process making or entering namespaces at the
// same moment (ip netns, a second lab, a parallel test) can leave the bind
// mount stacked twice, or stack /var/run/netns again between the unmount
// and the remove, which then fails with EBUSY: every layer is unmounted,
// and the whole is tried again while the remove finds the file busy.
func DeleteNamespace(name string) error {
	path := filepath.Join(netnsDir, name)
	var err error
	for range 8 {
		if err = unmountAll(path); err != nil {
			return err
		}
		if err = os.Remove(path); !errors.Is(err, unix.EBUSY) {
			return err
		}
	}
	return err
}

// unmountAll unmounts every mount stacked on path.
func unmountAll(path string) error {
	for range 16 {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return nil // no longer a mount point
			}
			if errors.Is(err, unix.ENOENT) {
				return os.ErrNotExist
			}
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return nil
}
