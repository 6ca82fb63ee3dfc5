package netbed

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NodeOptions configures a node namespace.
type NodeOptions struct {
	// Addrs are the node's own addresses (its InternalIPs): NodePorts are
	// served on them. They sit on the loopback device.
	Addrs []netip.Prefix
	// ConntrackTimestamp sets net.netfilter.nf_conntrack_timestamp=1, so
	// every flow records when it started.
	ConntrackTimestamp bool
	// Sysctls are more settings to apply inside the node, keyed by their
	// /proc/sys path ("net/netfilter/nf_conntrack_tcp_timeout_fin_wait").
	Sysctls map[string]string
}

// Node is a router namespace standing for a Kubernetes node.
type Node struct {
	*namespace
	bed *Bed

	mu    sync.Mutex
	links int
}

// Name is the node namespace's name (for `ip netns exec`).
func (n *Node) Name() string { return n.name }

// Path is the node namespace's file, for nsenter --net= and setns: a
// program started there shares the node's network and nothing else.
func (n *Node) Path() string { return filepath.Join(netnsDir, n.name) }

// Do runs fn on a thread inside the node's namespace: sockets and netlink
// connections opened there belong to the node.
func (n *Node) Do(fn func() error) error { return n.do(fn) }

// AddNode creates a node namespace that forwards IPv4 and IPv6.
func (b *Bed) AddNode(name string, o NodeOptions) (*Node, error) {
	sysctls := map[string]string{
		"net/ipv4/ip_forward":                  "1",
		"net/ipv6/conf/all/forwarding":         "1",
		"net/netfilter/nf_conntrack_tcp_loose": "1",
	}
	for k, v := range baseSysctls {
		sysctls[k] = v
	}
	if o.ConntrackTimestamp {
		sysctls["net/netfilter/nf_conntrack_timestamp"] = "1"
	}
	for k, v := range o.Sysctls {
		sysctls[k] = v
	}
	ns, err := b.newNamespace(name, nil)
	if err != nil {
		return nil, err
	}
	n := &Node{namespace: ns, bed: b}
	err = n.do(func() error {
		// Conntrack sysctls exist only once the module is bound to the
		// namespace; the node's nftables table does that, so create it
		// before the sysctls.
		if err := n.setServices(nil); err != nil {
			return err
		}
		for k, v := range baseSysctls {
			if err := writeSysctl(k, v); err != nil {
				return err
			}
		}
		for k, v := range sysctls {
			if err := writeSysctl(k, v); err != nil {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, p := range o.Addrs {
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(p), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("adding %s to node %s: %w", p, n.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// Host is a pod or client namespace joined to a node by a veth pair.
type Host struct {
	*namespace
	node     *Node
	nodeLink string
	Addrs    []netip.Addr
}

// Name is the host namespace's name.
func (h *Host) Name() string { return h.name }

// Do runs fn on a thread inside the host's namespace.
func (h *Host) Do(fn func() error) error { return h.do(fn) }

// Listen, ListenPacket and Dial open sockets inside the host (see
// namespace); they are closed when the host is removed.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	return h.namespace.Listen(network, addr)
}

// ListenPacket opens a packet socket inside the host.
func (h *Host) ListenPacket(network, addr string) (net.PacketConn, error) {
	return h.namespace.ListenPacket(network, addr)
}

// Dial connects from inside the host.
func (h *Host) Dial(ctx context.Context, network, laddr, raddr string) (net.Conn, error) {
	return h.namespace.Dial(ctx, network, laddr, raddr)
}

// AddHost creates a namespace holding addrs on its eth0, joined to node by a
// veth pair. The host routes everything through the node (169.254.1.1 and
// fe80::1, which the node answers on every veth); the node routes each of
// the host's addresses to its veth end.
func (b *Bed) AddHost(name string, node *Node, addrs ...netip.Prefix) (*Host, error) {
	ns, err := b.newNamespace(name, baseSysctls)
	if err != nil {
		return nil, err
	}
	node.mu.Lock()
	node.links++
	nodeLink := "gw" + strconv.Itoa(node.links)
	node.mu.Unlock()
	h := &Host{namespace: ns, node: node, nodeLink: nodeLink}
	for _, p := range addrs {
		h.Addrs = append(h.Addrs, p.Addr())
	}
	err = node.do(func() error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: nodeLink},
			PeerName:      "eth0",
			PeerNamespace: netlink.NsFd(ns.handle),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth %s in %s: %w", nodeLink, node.name, err)
		}
		link, err := netlink.LinkByName(nodeLink)
		if err != nil {
			return err
		}
		if err := writeSysctl("net/ipv6/conf/"+nodeLink+"/accept_dad", "0"); err != nil {
			return err
		}
		for _, gw := range []netip.Addr{gatewayV4, gatewayV6} {
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(gw, gw.BitLen())), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("adding %s to %s: %w", gw, nodeLink, err)
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		for _, p := range addrs {
			a := p.Addr()
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK,
				Dst: ipNet(netip.PrefixFrom(a, a.BitLen()))}); err != nil {
				return fmt.Errorf("routing %s to %s: %w", a, nodeLink, err)
			}
		}
		return nil
	})
	if err == nil {
		err = h.do(func() error {
			link, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			for _, p := range addrs {
				if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(p), Flags: unix.IFA_F_NODAD}); err != nil {
					return fmt.Errorf("adding %s to %s: %w", p, h.name, err)
				}
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
			idx := link.Attrs().Index
			for _, gw := range []netip.Addr{gatewayV4, gatewayV6} {
				if gw.Is4() {
					if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Scope: netlink.SCOPE_LINK,
						Dst: ipNet(netip.PrefixFrom(gw, 32))}); err != nil {
						return err
					}
				}
				def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
				if gw.Is6() {
					def = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
				}
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: ipNet(def), Gw: gw.AsSlice()}); err != nil {
					return fmt.Errorf("default route via %s in %s: %w", gw, h.name, err)
				}
			}
			return nil
		})
	}
	if err == nil {
		err = h.waitUp()
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// waitUp waits until both ends of the host's veth are operationally up. The
// kernel activates a new link's queue only then (link events are batched,
// up to a second later); a packet sent before is dropped.
func (h *Host) waitUp() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var states [2]netlink.LinkOperState
		err := h.node.do(func() error {
			l, err := netlink.LinkByName(h.nodeLink)
			if err == nil {
				states[0] = l.Attrs().OperState
			}
			return err
		})
		if err == nil {
			err = h.do(func() error {
				l, err := netlink.LinkByName("eth0")
				if err == nil {
					states[1] = l.Attrs().OperState
				}
				return err
			})
		}
		if err != nil {
			return err
		}
		if states[0] == netlink.OperUp && states[1] == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("veth %s of %s is not up after 5s (node side %s, host side %s)", h.nodeLink, h.name, states[0], states[1])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Unplug deletes the host's veth pair and the node's routes to it: from
// then on nothing reaches the host and nothing it sends leaves, as when a
// pod's containers die; its sockets stay open until RemoveHost.
func (h *Host) Unplug() error {
	return h.node.do(func() error {
		link, err := netlink.LinkByName(h.nodeLink)
		if err != nil {
			return nil // already gone
		}
		return netlink.LinkDel(link)
	})
}

// RemoveHost deletes a host abruptly, as when a pod's sandbox or node dies:
// its veth pair and the node's routes to it disappear first, then its
// sockets close (so no FIN or RST reaches its peers), then its namespace.
func (b *Bed) RemoveHost(h *Host) error {
	err := h.Unplug()
	b.forget(h.namespace)
	if rerr := h.remove(); rerr != nil {
		err = rerr
	}
	return err
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
