package remedy_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/serf/serf"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/gossip"
)

// serfReader reads the cluster through one real Serf agent's RPC, and
// forces members out through it, as the controller's gossip watch does.
type serfReader struct{ agent *gossip.Serf }

func (r serfReader) ReadCluster(ctx context.Context, _ snapshot.GossipCluster) (*snapshot.GossipView, func(context.Context, string) error, error) {
	v, err := r.agent.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	return v, r.agent.ForceLeave, nil
}

// Real Serf agents: a member dies without leaving, the remedy verifies it
// failed, and the member's pod (a StatefulSet's: the same name, the same
// address) comes back and rejoins before the remedy acts. The force-leave
// is refused on the list read right before it, and the member that
// rejoined stays in the cluster.
func TestMembersActRefusesAMemberThatRejoinedSerf(t *testing.T) {
	survivor := serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.45:0"), RPC: netip.MustParseAddrPort("127.0.0.45:0")})
	old := serftest.Start(t, serftest.Config{Name: "serf-1", Gossip: netip.MustParseAddrPort("127.0.0.46:0")})
	old.Join(t, survivor.Gossip)
	statusOf := func(name string) serf.MemberStatus {
		i := slices.IndexFunc(survivor.Members(), func(m serf.Member) bool { return m.Name == name })
		if i < 0 {
			return serf.StatusNone
		}
		return survivor.Members()[i].Status
	}
	poll.Until(t, poll.Patience, "serf-1 alive in the survivor's list", func() bool { return statusOf("serf-1") == serf.StatusAlive })
	old.Kill()
	poll.Until(t, poll.Patience, "serf-1 failed in the survivor's list", func() bool { return statusOf("serf-1") == serf.StatusFailed })

	m := &remedy.Members{Clusters: serfReader{&gossip.Serf{Addr: survivor.RPC}}}
	target := &finding.MemberTarget{System: "serf", Cluster: "shop/serf", Name: "serf-1", Addr: old.Gossip.Addr(), Port: old.Gossip.Port(), Status: "failed"}
	ctx := context.Background()
	if err := m.Verify(ctx, target); err != nil {
		t.Fatalf("Verify of the failed member: %v", err)
	}
	back := serftest.Start(t, serftest.Config{Name: "serf-1", Gossip: old.Gossip})
	back.Join(t, survivor.Gossip)
	// The rejoin settles: memberlist may mark the newcomer failed for a
	// moment (the old incarnation's death), and it refutes that. The
	// list the remedy reads, and the survivor's own, say alive a few
	// times running.
	rpc := &gossip.Serf{Addr: survivor.RPC}
	running := 0
	poll.Until(t, poll.Patience, "serf-1 alive again, settled", func() bool {
		v, err := rpc.Members(ctx)
		i := -1
		if err == nil {
			i = slices.IndexFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Name == "serf-1" })
		}
		if i >= 0 && v.Members[i].Status == snapshot.MemberAlive && statusOf("serf-1") == serf.StatusAlive {
			running++
		} else {
			running = 0
		}
		return running >= 5
	})
	err := m.Act(ctx, target)
	if err == nil || !strings.Contains(err.Error(), "lists serf-1 alive again") {
		t.Errorf("Act on the member that rejoined: %v; want it refused", err)
	}
	if s := statusOf("serf-1"); s != serf.StatusAlive {
		t.Errorf("serf-1 is %s in the survivor's list after Act; want alive", s)
	}
}
