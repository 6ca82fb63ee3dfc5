package remedy

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/host"
)

// A Nudger tells the client of a deleted flow at once that its connection
// is gone. Without it the client learns only at its next retransmission,
// and a connection whose segments have vanished for a while retransmits
// seconds apart (0.2, 0.4, 0.8, 1.6, 3.2, 6.4 s...): that gap, not the
// grace period, is what a client pinned to a dead pod waits longest for.
type Nudger interface {
	// Wants reports whether f is a flow whose client it could nudge, its
	// state aside: Flows reads the state of those back from the kernel
	// right before deleting them (an index kept from conntrack's events
	// knows a flow's state when it began, not now).
	Wants(f *snapshot.Flow) bool
	// Nudge acts on a flow just deleted, f.State as read back right
	// before; ErrNotNudged when the flow is not one it can act on, and
	// nothing was sent.
	Nudge(f *snapshot.Flow) error
}

// ErrNotNudged is wrapped by a Nudger's error when it sent nothing because
// the flow is not one it acts on (not an established TCP connection, or
// addressed to an address that is not the node's own).
var ErrNotNudged = errors.New("not nudged")

// SYNNudge sends the client of a deleted TCP flow a SYN from the address
// and port it connected to, from a socket bound there and closed at once
// (the kernel sends the SYN within connect). The client, still
// established, answers with an acknowledgment of what it has received
// (RFC 5961's challenge ACK); that acknowledgment reaches the node's own
// address, where no socket holds the port any more, and the node's kernel
// resets it with the sequence number the client itself named, the one
// reset a client must accept. Its application sees the connection reset
// and connects again, to a live backend, within a round trip of the
// delete.
//
// Only flows in conntrack's ESTABLISHED state (as read back right before
// the delete), of the default zone, and addressed to an address of the
// node (a NodePort, an external IP the node holds) are nudged: the node
// must be where the acknowledgment is delivered. A ClusterIP is not the
// node's: the acknowledgment would be routed past it, and the SYN's own
// entry in the table would hold the client's later segments away from the
// live backend, so nothing is sent (ErrNotNudged). A client still opening
// its connection (SYN_SENT) is not nudged either: a SYN would make it
// fail with "connection refused", where its own next SYN, once the flow
// is gone, reaches a live backend. Nor is a port a socket of the node
// holds, or a privileged one (the agent has no CAP_NET_BIND_SERVICE). A
// client that does not answer the SYN is no worse off: its next
// retransmission, also addressed to the node, is reset the same way.
//
// The zero value is ready to use; it learns the node's addresses from its
// interfaces, again at most once a second.
type SYNNudge struct {
	mu    sync.Mutex
	addrs map[netip.Addr]bool
	read  time.Time
}

// Wants reports whether f is a TCP flow of the default zone addressed to
// an address of this node.
func (n *SYNNudge) Wants(f *snapshot.Flow) bool {
	return f.Proto == snapshot.ProtoTCP && f.Zone == 0 && n.local(f.Orig.Dst)
}

// Nudge sends the SYN; see SYNNudge.
func (n *SYNNudge) Nudge(f *snapshot.Flow) error {
	if f.State != "ESTABLISHED" || !n.Wants(f) {
		return ErrNotNudged
	}
	return sendSYN(f.Frontend(), f.Orig.Src, f.Orig.SrcPort)
}

// local reports whether a is an address of one of this node's interfaces
// (host.Local), as read at most a second ago.
func (n *SYNNudge) local(a netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t := time.Now(); n.addrs == nil || t.Sub(n.read) >= time.Second || t.Before(n.read) {
		n.addrs, n.read = map[netip.Addr]bool{}, t
		addrs, err := host.Local()
		if err != nil {
			return false
		}
		for _, l := range addrs {
			n.addrs[l] = true
		}
	}
	return n.addrs[a.Unmap()]
}
