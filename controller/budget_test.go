package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// consulCluster is one Consul cluster's member list, as every agent of it
// answers, shared by the replicas: a member forced out leaves it.
type consulCluster struct {
	mu      sync.Mutex
	members []snapshot.GossipMember
	left    []string
}

func (c *consulCluster) Members(context.Context) (*snapshot.GossipView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &snapshot.GossipView{System: "consul", Local: "consul-0", From: "agent", Members: slices.Clone(c.members)}, nil
}

func (c *consulCluster) ForceLeave(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = slices.DeleteFunc(c.members, func(m snapshot.GossipMember) bool { return m.Name == name })
	c.left = append(c.left, name)
	return nil
}

// ghosts adds, for each n, a failed member ghost-n and an alive member
// new-n on 10.244.2.n: a pod's member died, and another's joined on its
// address.
func (c *consulCluster) ghosts(ns ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range ns {
		a := netip.MustParseAddr(fmt.Sprintf("10.244.2.%d", n))
		c.members = append(c.members,
			snapshot.GossipMember{Name: fmt.Sprintf("ghost-%d", n), Addr: a, Port: 8301, Status: snapshot.MemberFailed},
			snapshot.GossipMember{Name: fmt.Sprintf("new-%d", n), Addr: a, Port: 8301, Status: snapshot.MemberAlive})
	}
}

func (c *consulCluster) forcedOut() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.left)
}

func (r *replica) forceLeaves(res remedy.Result) float64 {
	return testutil.ToFloat64(r.m.RemedyActions.WithLabelValues(rule.GossipGhostMemberID, string(res)))
}

// The cluster-wide budget outlives its leader: a leader that spent two of
// its three force-leaves an hour is killed, and the replica that takes
// over finds one left, so it refuses the next two ghosts whole. (The
// budget lived in the leader's memory: the new leader forced both out.)
func TestBudgetSurvivesFailover(t *testing.T) {
	cluster := &consulCluster{members: []snapshot.GossipMember{
		{Name: "consul-0", Addr: netip.MustParseAddr("10.244.1.5"), Port: 8301, Status: snapshot.MemberAlive}}}
	client := fake.NewClientset(node("node-a"), gossipPodObj("consul-0", "u0", "10.244.1.5", "consul", 0, time.Now().Add(-time.Hour)))
	st := remedy.Settings{Grace: 300 * time.Millisecond, Budget: 3, BudgetInterval: time.Hour,
		BudgetStore: &LeaseBudget{Client: client, Namespace: "ghostwatch", Name: "ghostwatch-controller-budget", APIClock: inProcess}}
	start := func(id string) *replica {
		return startReplicaWith(t, client, id, setup{gossipInterval: 50 * time.Millisecond, remedies: []string{rule.GossipForceLeaveID}, settings: st,
			agent: func(sourcegossip.Member) (sourcegossip.Agent, error) { return cluster, nil }})
	}
	ctx := context.Background()
	// wave makes ghosts of ns, and once every replica has read them
	// listed, gives their addresses to new pods: created after, they are
	// proven another identity than the ghosts.
	wave := func(read func() bool, ns ...int) {
		cluster.ghosts(ns...)
		poll.Until(t, poll.Patience, "the ghosts read listed", read)
		for _, n := range ns {
			p := appPod("shop", fmt.Sprintf("new-%d", n), fmt.Sprintf("n%d", n), fmt.Sprintf("10.244.2.%d", n), time.Now().Add(time.Second), time.Now().Add(time.Second))
			if _, err := client.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ghostsFound := func(r *replica, n float64) func() bool {
		return func() bool {
			return testutil.ToFloat64(r.m.Findings.WithLabelValues(rule.GossipGhostMemberID, "critical")) >= n
		}
	}

	a := start("replica-a")
	poll.Until(t, poll.Patience, "replica-a to lead", func() bool { return a.c.Status().Leading && !a.c.Status().LastPass.IsZero() })
	b := start("replica-b")
	poll.Until(t, poll.Patience, "replica-b to stand by", func() bool { return b.c.Status().Leader == "replica-a" })
	wave(ghostsFound(a, 2), 1, 2)
	poll.Until(t, poll.Patience, "two ghosts forced out", func() bool { return a.forceLeaves(remedy.Done) == 2 })

	// The leader is killed mid-budget; the standby takes over.
	a.cancel()
	poll.Until(t, poll.Patience, "replica-b to lead", func() bool { return b.c.Status().Leading && !b.c.Status().LastPass.IsZero() })
	wave(ghostsFound(b, 2), 3, 4)
	poll.Until(t, poll.Patience, "the next two refused", func() bool { return b.forceLeaves(remedy.Refused) >= 2 })
	if n := b.forceLeaves(remedy.Done); n != 0 {
		t.Errorf("the new leader forced %v more out, beyond the budget its predecessor had spent", n)
	}
	if left := cluster.forcedOut(); !slices.Equal(left, []string{"ghost-1", "ghost-2"}) && !slices.Equal(left, []string{"ghost-2", "ghost-1"}) {
		t.Errorf("forced out %v, want ghost-1 and ghost-2 alone", left)
	}
	if evs := b.ev.With("RemedyBudgetExceeded"); len(evs) == 0 || !strings.Contains(evs[0], "2 ghost IPs due but only 1 of 3 per 1h0m0s left in the budget") {
		t.Errorf("Events of the refusal: %q (all: %q)", evs, b.ev.All())
	}
}

// The times are kept on the API server's clock: a replica whose clock
// runs two minutes behind another's reads what the other spent as the
// latest it may have been on its own, never earlier; with the API
// server's clock not measured, nothing is read or written.
func TestLeaseBudgetAcrossSkewedReplicas(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	clock := func(offset, bound time.Duration) func() snapshot.Clock {
		return func() snapshot.Clock {
			return snapshot.Clock{Name: "the API server's", Measured: true, Offset: offset, Bound: bound, By: "the test"}
		}
	}
	// The API server runs 2 min ahead of replica a, and with replica b.
	a := &LeaseBudget{Client: client, Namespace: "ghostwatch", Name: "b", APIClock: clock(2*time.Minute, time.Second)}
	b := &LeaseBudget{Client: client, Namespace: "ghostwatch", Name: "b", APIClock: clock(0, 500*time.Millisecond)}
	spentA := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC) // on a's clock
	_, v, err := a.Spent(ctx, "gossip-force-leave")
	if err != nil || v != "" {
		t.Fatalf("Spent before any: %q, %v", v, err)
	}
	if err := a.Spend(ctx, "gossip-force-leave", []time.Time{spentA}, v); err != nil {
		t.Fatal(err)
	}
	got, v, err := b.Spent(ctx, "gossip-force-leave")
	onB := spentA.Add(2 * time.Minute) // the same moment on b's clock
	if err != nil || len(got) != 1 || got[0].Before(onB) || got[0].After(onB.Add(2*time.Second)) {
		t.Fatalf("b reads %v (%v), want %s or at most 1.5 s later", got, err, onB)
	}
	if err := b.Spend(ctx, "gossip-force-leave", got, "42"); !errors.Is(err, remedy.ErrBudgetChanged) {
		t.Errorf("Spend at a stale version = %v, want ErrBudgetChanged", err)
	}
	if err := b.Spend(ctx, "other", nil, ""); !errors.Is(err, remedy.ErrBudgetChanged) {
		t.Errorf("Spend creating a Lease that exists = %v, want ErrBudgetChanged", err)
	}
	unmeasured := &LeaseBudget{Client: client, Namespace: "ghostwatch", Name: "b", APIClock: func() snapshot.Clock { return snapshot.Clock{Name: "the API server's"} }}
	if _, _, err := unmeasured.Spent(ctx, "gossip-force-leave"); err == nil || !strings.Contains(err.Error(), "the API server's clock is not measured") {
		t.Errorf("Spent with the clock not measured = %v", err)
	}
	if err := unmeasured.Spend(ctx, "gossip-force-leave", nil, v); err == nil {
		t.Error("Spend with the clock not measured passed")
	}
}
