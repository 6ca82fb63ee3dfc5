package netbed

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Uplink is one end of a link between two nodes.
type Uplink struct {
	// Addr is this node's address on the link (a /30 or /126 shared with
	// the peer).
	Addr netip.Prefix
	// Routes are the prefixes reached through the peer: its pod CIDR and
	// node addresses.
	Routes []netip.Prefix
}

// Link is the network between two nodes (ConnectNodes).
type Link struct {
	ends [2]struct {
		n    *Node
		name string
	}
}

// ConnectNodes joins two nodes with a veth pair, as the network between
// two machines: each end gets its address, and each node routes the
// other's prefixes through it. The link stays up when pods come and go,
// like a node's uplink.
func (b *Bed) ConnectNodes(a *Node, aEnd Uplink, z *Node, zEnd Uplink) (*Link, error) {
	a.mu.Lock()
	a.links++
	aName := "up" + strconv.Itoa(a.links)
	a.mu.Unlock()
	z.mu.Lock()
	z.links++
	zName := "up" + strconv.Itoa(z.links)
	z.mu.Unlock()
	if err := a.do(func() error {
		return netlink.LinkAdd(&netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: aName},
			PeerName:      zName,
			PeerNamespace: netlink.NsFd(z.handle),
		})
	}); err != nil {
		return nil, fmt.Errorf("linking %s and %s: %w", a.name, z.name, err)
	}
	for _, end := range []struct {
		n    *Node
		name string
		up   Uplink
		peer netip.Addr
	}{{a, aName, aEnd, zEnd.Addr.Addr()}, {z, zName, zEnd, aEnd.Addr.Addr()}} {
		if err := end.n.do(func() error {
			link, err := netlink.LinkByName(end.name)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(end.up.Addr), Flags: unix.IFA_F_NODAD}); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
			for _, r := range end.up.Routes {
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(r), Gw: end.peer.AsSlice()}); err != nil {
					return fmt.Errorf("route %s via %s: %w", r, end.peer, err)
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("node %s, link %s: %w", end.n.name, end.name, err)
		}
	}
	// A packet sent before both ends are operationally up is dropped.
	deadline := time.Now().Add(5 * time.Second)
	for _, end := range []struct {
		n    *Node
		name string
	}{{a, aName}, {z, zName}} {
		for {
			var state netlink.LinkOperState
			if err := end.n.do(func() error {
				l, err := netlink.LinkByName(end.name)
				if err == nil {
					state = l.Attrs().OperState
				}
				return err
			}); err != nil {
				return nil, err
			}
			if state == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("link %s of %s is not up after 5s (%s)", end.name, end.n.name, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	l := &Link{}
	l.ends[0].n, l.ends[0].name = a, aName
	l.ends[1].n, l.ends[1].name = z, zName
	return l, nil
}

// End is the name of the link's end in node n ("" when n is not an end):
// `ip link set NAME down` in n's namespace is Cut by hand.
func (l *Link) End(n *Node) string {
	for _, end := range l.ends {
		if end.n == n {
			return end.name
		}
	}
	return ""
}

// Cut takes n's end of the link down, as when machine n loses its
// network: the other node keeps its end and its routes through the link,
// and what it sends across is dropped without a word, as to a machine
// that lost power. Packets from n's side go nowhere either.
func (l *Link) Cut(n *Node) error {
	for _, end := range l.ends {
		if end.n != n {
			continue
		}
		return n.do(func() error {
			link, err := netlink.LinkByName(end.name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetDown(link); err != nil {
				return fmt.Errorf("node %s: taking link %s down: %w", n.name, end.name, err)
			}
			return nil
		})
	}
	return fmt.Errorf("node %s is not an end of the link", n.name)
}
