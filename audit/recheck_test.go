package audit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// memberRule reads kube and gossip, names a gossip cluster to read again,
// and holds its finding while the fresh view lists the member.
type memberRule struct{}

func (memberRule) Info() rule.Info {
	return rule.Info{ID: "member", Sources: []string{"kube", "gossip"}}
}
func (memberRule) Evaluate(*snapshot.Snapshot) []finding.Finding { return nil }
func (memberRule) RecheckQuery(*snapshot.Snapshot, finding.Finding) snapshot.Query {
	return snapshot.Query{Gossip: []snapshot.GossipCluster{{System: "consul", Cluster: "ns/consul"}}}
}
func (memberRule) Recheck(fresh *snapshot.Snapshot, fs []finding.Finding) []error {
	errs := make([]error, len(fs))
	for i := range fs {
		if fresh.Gossip == nil || len(fresh.Gossip.Views) == 0 {
			errs[i] = errors.New("the member list was not read again")
		}
	}
	return errs
}

// live is a live source that is ready or not, and reads a fresh view when
// asked for a gossip cluster.
type live struct {
	name  string
	ready error
	asked []snapshot.Query
}

func (l *live) Name() string                                      { return l.name }
func (l *live) Collect(context.Context, *snapshot.Snapshot) error { return nil }
func (l *live) Start(context.Context) error                       { return nil }
func (l *live) Ready(time.Time) error                             { return l.ready }
func (l *live) Changes() source.Changes                           { return source.Changes{} }
func (l *live) OnChange(func())                                   {}
func (l *live) Fresh(_ context.Context, q snapshot.Query, s *snapshot.Snapshot) error {
	l.asked = append(l.asked, q)
	if l.name == "gossip" && len(q.Gossip) > 0 {
		s.Gossip = &snapshot.Gossip{Views: []snapshot.GossipView{{System: "consul", Cluster: "ns/consul"}}}
	}
	return nil
}

// A re-check asks only the live sources its rule reads to be ready: a
// Calico watch that fails stops no gossip remedy, a pod watch that fails
// does. What it reads afresh is what the rule names, and an error says
// where it was read.
func TestRecheckAsksTheSourcesItsRuleReads(t *testing.T) {
	kube, calico, gossip := &live{name: "kube"}, &live{name: "calico"}, &live{name: "gossip"}
	last := &snapshot.Snapshot{}
	fs := []finding.Finding{{Rule: "member"}}
	recheck := Recheck(memberRule{}, []source.Source{kube, calico, gossip}, func() *snapshot.Snapshot { return last }, time.Now)
	calico.ready = errors.New("ipamblocks.crd.projectcalico.org: watch failed")
	if errs := recheck(context.Background(), fs); errs[0] != nil {
		t.Errorf("a source the rule does not read stopped it: %v", errs[0])
	}
	if len(gossip.asked) != 1 || len(gossip.asked[0].Gossip) != 1 {
		t.Errorf("gossip asked %+v", gossip.asked)
	}
	kube.ready = errors.New("pods: watch failed")
	if errs := recheck(context.Background(), fs); errs[0] == nil || errs[0].Error() != "pods: watch failed" {
		t.Errorf("a source the rule reads, not ready: %v", errs[0])
	}
	kube.ready = nil
	gossip.name = "gossip-elsewhere" // reads nothing the rule asks
	if errs := recheck(context.Background(), fs); errs[0] == nil || !strings.HasPrefix(errs[0].Error(), "in a new read of the member list: ") {
		t.Errorf("a re-check that fails: %v", errs[0])
	}
	if errs := Recheck(memberRule{}, nil, func() *snapshot.Snapshot { return nil }, time.Now)(context.Background(), fs); errs[0] == nil {
		t.Error("a re-check without a complete pass passed")
	}
}
