package remedy

import (
	"errors"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A Nudger tells the client of a deleted flow at once that its connection
// is gone. Without it the client learns only at its next retransmission,
// and a connection whose segments have vanished for a while retransmits
// seconds apart (0.2, 0.4, 0.8, 1.6, 3.2, 6.4 s...): that gap, not the
// grace period, is what a client pinned to a dead pod waits longest for.
type Nudger interface {
	// Nudge acts on a flow just deleted; ErrNotNudged when the flow is
	// not one it can act on, and nothing was sent.
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
// Only flows in conntrack's ESTABLISHED state, of the default zone, and
// addressed to an address of the node (a NodePort, an external IP the node
// holds) are nudged: the node must be where the acknowledgment is
// delivered. A ClusterIP is not the node's: the acknowledgment would be
// routed past it, and the SYN's own entry in the table would hold the
// client's later segments away from the live backend, so nothing is sent
// (ErrNotNudged). Nor when the port is held by a socket on the node, or
// is privileged (the agent has no CAP_NET_BIND_SERVICE). A client that
// does not answer the SYN is no worse off: its next retransmission, also
// addressed to the node, is reset the same way.
type SYNNudge struct{}

// Nudge sends the SYN; see SYNNudge.
func (SYNNudge) Nudge(f *snapshot.Flow) error {
	if f.Proto != snapshot.ProtoTCP || f.State != "ESTABLISHED" || f.Zone != 0 {
		return ErrNotNudged
	}
	return sendSYN(f.Frontend(), f.Orig.Src, f.Orig.SrcPort)
}
