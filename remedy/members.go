package remedy

import (
	"context"
	"errors"
	"fmt"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ClusterReader reads a gossip cluster's member list afresh from one of
// its members' agents (the gossip source's watch does).
type ClusterReader interface {
	// ReadCluster returns the view read now, and how to force a member
	// out through the agent that gave it: nil when that agent cannot.
	// leave checks, right before sending, that the agent may still be
	// sent the credential; when not, its error has a NotSent method
	// that reports true.
	ReadCluster(ctx context.Context, c snapshot.GossipCluster) (v *snapshot.GossipView, leave func(ctx context.Context, member string) error, err error)
}

// Members forces gone members out of their gossip cluster: a
// finding.MemberTarget, read again from the cluster right before, forced
// out through the agent that answered.
type Members struct{ Clusters ClusterReader }

// Kind returns finding.MemberKind.
func (*Members) Kind() string { return finding.MemberKind }

// Verify reads the member's cluster again: the member must be listed,
// gone, at the same address and port.
func (a *Members) Verify(ctx context.Context, t finding.Target) error {
	mt, v, _, err := a.read(ctx, t)
	if err != nil {
		return err
	}
	return stillGone(mt, v)
}

// Act reads the member's cluster once more, and forces the member out
// through the agent that answered only when that very list still shows
// it gone at the same address and port: a member that rejoined under its
// name since Verify (a StatefulSet's pod, a Consul server) is not pruned.
// What stops it before the force-leave is sent is a refusal (ErrRefused,
// or ErrGone when the list no longer names the member); only the agent's
// own answer to the force-leave can be a failure.
func (a *Members) Act(ctx context.Context, t finding.Target) error {
	mt, v, leave, err := a.read(ctx, t)
	if err != nil {
		return Refusal(fmt.Errorf("reading the cluster again: %w", err))
	}
	if err := stillGone(mt, v); err != nil {
		if errors.Is(err, ErrGone) {
			return err
		}
		return Refusal(err)
	}
	if leave == nil {
		return Refusal(fmt.Errorf("%s has no force-leave", mt.System))
	}
	err = leave(ctx, mt.Name)
	// A force-leave the reader withheld (its agent's pod no longer holds
	// its address alone) reached no one: refused, not failed.
	var ns notSent
	if errors.As(err, &ns) && ns.NotSent() {
		return Refusal(err)
	}
	return err
}

// notSent is an error of a request withheld before it was sent, as a
// ClusterReader's leave says it (gossip.NotSentError).
type notSent interface {
	error
	NotSent() bool
}

// stillGone returns nil when v lists mt's member gone, at mt's address and
// port.
func stillGone(mt *finding.MemberTarget, v *snapshot.GossipView) error {
	for _, m := range v.Members {
		if m.Name != mt.Name {
			continue
		}
		switch {
		case !m.Gone():
			return fmt.Errorf("%s lists %s %s again", v.From, m.Name, m.Status)
		case m.Addr != mt.Addr || m.Port != mt.Port:
			return fmt.Errorf("%s lists %s at another address now", v.From, m.Name)
		}
		return nil
	}
	return fmt.Errorf("%w: %s no longer lists %s", ErrGone, v.From, mt.Name)
}

func (a *Members) read(ctx context.Context, t finding.Target) (*finding.MemberTarget, *snapshot.GossipView, func(context.Context, string) error, error) {
	mt, ok := t.(*finding.MemberTarget)
	if !ok {
		return nil, nil, nil, fmt.Errorf("not a gossip member: %v", t)
	}
	if a.Clusters == nil {
		return nil, nil, nil, fmt.Errorf("no reader of the %s cluster %s", mt.System, mt.Cluster)
	}
	v, leave, err := a.Clusters.ReadCluster(ctx, snapshot.GossipCluster{System: mt.System, Cluster: mt.Cluster})
	if err != nil {
		return nil, nil, nil, err
	}
	return mt, v, leave, nil
}
