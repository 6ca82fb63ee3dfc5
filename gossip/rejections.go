package gossip

import (
	"bytes"
	"io"
	"maps"
	"os"
	"sync"

	"github.com/hashicorp/memberlist"
)

// The reasons a member refuses a message that pod IP reuse causes, as
// Rejections counts them. memberlist has no metric or callback for them:
// it logs them, and Rejections reads those lines (memberlist v0.5.4).
const (
	// RejectLabel: a packet or stream of another cluster's label, or of
	// none (net.go: "discarding packet with unacceptable label", and
	// "discarding stream ..."): a pod of another cluster was given an
	// address this cluster still gossips to.
	RejectLabel = "label"
	// RejectUnexpectedNode: a ping for another member's name reached this
	// one (net.go: "Got ping for unexpected node"): this member holds an
	// address the cluster still knows under another name, a dead one.
	RejectUnexpectedNode = "unexpected-node"
	// RejectConflictingAddress: a known member's name announced from
	// another address (state.go: "Conflicting address for"): two
	// processes claim one name, or a name moved before the dead one was
	// reclaimed (DeadNodeReclaimTime).
	RejectConflictingAddress = "conflicting-address"
	// RejectRefutedDeath: this member refuted a suspicion or a death of
	// its own name (state.go: "Refuting a suspect message", "Refuting a
	// dead message"): its name was given up for dead, which for a member
	// just started means it took a dead member's name.
	RejectRefutedDeath = "refuted-death"
	// RejectRefutedAlive: another process announced this member's name
	// (state.go: "Refuting an alive message"): two members share a name.
	RejectRefutedAlive = "refuted-alive"
)

// rejectionLines are the log lines of each reason.
var rejectionLines = []struct {
	text   []byte
	reason string
}{
	{[]byte("with unacceptable label"), RejectLabel},
	{[]byte("Got ping for unexpected node"), RejectUnexpectedNode},
	{[]byte("Conflicting address for"), RejectConflictingAddress},
	{[]byte("Refuting a suspect message"), RejectRefutedDeath},
	{[]byte("Refuting a dead message"), RejectRefutedDeath},
	{[]byte("Refuting an alive message"), RejectRefutedAlive},
}

// Rejections counts, by reason, the messages a member refused since it
// started, from memberlist's log, which it passes on unchanged.
type Rejections struct {
	out io.Writer

	mu     sync.Mutex
	counts map[string]uint64
}

// CountRejections makes c's member count its rejections: memberlist's log
// goes through the returned Rejections on its way to where c sent it
// (c.Logger's writer, else c.LogOutput, else os.Stderr, as memberlist
// does). Call it before memberlist.Create(c), after setting c.Logger or
// c.LogOutput. Watch calls it.
func CountRejections(c *memberlist.Config) *Rejections {
	if r, ok := c.LogOutput.(*Rejections); ok && c.Logger == nil {
		return r
	}
	r := &Rejections{counts: map[string]uint64{}}
	switch {
	case c.Logger != nil:
		if prev, ok := c.Logger.Writer().(*Rejections); ok {
			return prev
		}
		r.out = c.Logger.Writer()
		c.Logger.SetOutput(r)
	case c.LogOutput != nil:
		r.out = c.LogOutput
		c.LogOutput = r
	default:
		r.out = os.Stderr
		c.LogOutput = r
	}
	return r
}

// Write counts the rejections in p and passes p on. memberlist's logger
// writes one whole line per call.
func (r *Rejections) Write(p []byte) (int, error) {
	r.mu.Lock()
	for _, l := range rejectionLines {
		if bytes.Contains(p, l.text) {
			r.counts[l.reason]++
			break
		}
	}
	out := r.out
	r.mu.Unlock()
	return out.Write(p)
}

// SetOutput sends the lines on to w from now on.
func (r *Rejections) SetOutput(w io.Writer) {
	r.mu.Lock()
	r.out = w
	r.mu.Unlock()
}

// Counts returns the counts by reason; nil when none was counted.
func (r *Rejections) Counts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return nil
	}
	return maps.Clone(r.counts)
}

var _ io.Writer = (*Rejections)(nil)
