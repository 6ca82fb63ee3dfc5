package gossip

import (
	"context"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Agent is a gossip agent read live: a Consul agent over HTTP, a Serf agent
// over its RPC.
type Agent interface {
	// Members returns the agent's view of its cluster.
	Members(ctx context.Context) (*snapshot.GossipView, error)
}

// LiveSource reads the members of gossip agents live, one view each.
type LiveSource struct {
	Agents []Agent
}

// Name returns "gossip".
func (*LiveSource) Name() string { return Name }

// Collect asks every agent; one that cannot be read (unreachable, ACL or
// auth refused, TLS refused, no answer) fails the source: no view is
// judged on part of the evidence.
func (src *LiveSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	g := &snapshot.Gossip{}
	for _, a := range src.Agents {
		v, err := a.Members(ctx)
		if err != nil {
			return err
		}
		g.Views = append(g.Views, *v)
	}
	s.Gossip = g
	return nil
}

// Describe says what was read.
func (*LiveSource) Describe(s *snapshot.Snapshot) string { return describe(s.Gossip) }
