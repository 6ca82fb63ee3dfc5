// Package gossiptest holds the gossip agents tests stand in for a real
// one where the member list is the point, not the agent.
package gossiptest

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Fixed answers a fixed view, a copy each time.
type Fixed struct{ View snapshot.GossipView }

// Members returns a copy of the view.
func (a Fixed) Members(context.Context) (*snapshot.GossipView, error) {
	v := a.View
	v.Members = slices.Clone(a.View.Members)
	return &v, nil
}

// Switch answers a fixed view, or fails while Down.
type Switch struct {
	View snapshot.GossipView
	Down *atomic.Bool
}

// Members returns a copy of the view, or "connection refused" while Down.
func (a Switch) Members(ctx context.Context) (*snapshot.GossipView, error) {
	if a.Down.Load() {
		return nil, errors.New("connection refused")
	}
	return Fixed{a.View}.Members(ctx)
}
