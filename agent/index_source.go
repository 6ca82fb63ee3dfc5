package agent

import (
	"context"
	"net/netip"
	"slices"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// indexSource is the conntrack source of an audit driven by a change: it
// reads no table, but the agent's index. It yields the flows that may have
// changed verdict since the last complete audit: those to the backends a
// changed Pod or EndpointSlice mentions, to the backends of that audit's
// findings, and to backends that got new flows since; every indexed flow
// when a Service or Node changed, when the host's addresses (NodePort
// frontends) changed, or when a rule does not promise that its verdicts
// depend only on the flow's backend. The flows then pass through
// the same filter a full audit uses.
type indexSource struct {
	a       *Agent
	all     bool
	changed []netip.Addr
	readers []any
	kept    int
}

func (s *indexSource) Name() string { return conntrack.Name }

// Narrow records the rules that read the flows (source.Narrower).
func (s *indexSource) Narrow(readers []any) { s.readers = readers }

// Describe says how many flows were judged.
func (s *indexSource) Describe(snap *snapshot.Snapshot) string {
	return describeIndex(s.a.index.len(), s.kept)
}

func (s *indexSource) Collect(_ context.Context, snap *snapshot.Snapshot) error {
	a := s.a
	keep, _ := conntrack.Filter(s.readers, snap)
	var flows []snapshot.Flow
	if a.last == nil || !slices.Equal(snap.LocalAddresses, a.last.LocalAddresses) {
		s.all = true
	}
	if s.all {
		a.index.takeDirty()
		flows = a.index.all()
	} else {
		cands := append(append(s.changed, a.suspects...), a.index.takeDirty()...)
		flows = a.index.flowsTo(cands)
	}
	kept := flows[:0]
	for i := range flows {
		if keep(&flows[i]) {
			kept = append(kept, flows[i])
		}
	}
	s.kept = len(kept)
	snap.Conntrack = &snapshot.Conntrack{Flows: kept, Seen: a.index.len()}
	return nil
}
