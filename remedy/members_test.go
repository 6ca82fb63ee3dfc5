package remedy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// clusterReader answers one view (then the views of later, one a read,
// the last one repeated), and records who was forced out.
type clusterReader struct {
	view   *snapshot.GossipView
	later  []*snapshot.GossipView
	err    error
	noKick bool
	asked  []snapshot.GossipCluster
	left   []string
}

func (r *clusterReader) ReadCluster(_ context.Context, c snapshot.GossipCluster) (*snapshot.GossipView, func(context.Context, string) error, error) {
	r.asked = append(r.asked, c)
	if r.err != nil {
		return nil, nil, r.err
	}
	v := r.view
	if n := len(r.asked) - 2; n >= 0 && len(r.later) > 0 {
		v = r.later[min(n, len(r.later)-1)]
	}
	if r.noKick {
		return v, nil, nil
	}
	return v, func(_ context.Context, m string) error { r.left = append(r.left, m); return nil }, nil
}

// A gone member is forced out only while its cluster, read again, lists
// it gone at the address and port judged.
func TestMembersVerifyAndAct(t *testing.T) {
	addr := netip.MustParseAddr("10.244.1.5")
	target := &finding.MemberTarget{System: "consul", Cluster: "ns/consul", Name: "consul-0", Addr: addr, Port: 8301, Status: "failed"}
	view := func(status string, a netip.Addr, port uint16) *snapshot.GossipView {
		return &snapshot.GossipView{System: "consul", Cluster: "ns/consul", From: "pod ns/consul-1",
			Members: []snapshot.GossipMember{{Name: "consul-0", Addr: a, Port: port, Status: status}}}
	}
	for _, c := range []struct {
		name string
		r    *clusterReader
		want string // "" when Verify passes; "gone" when it wraps ErrGone
	}{
		{"still gone", &clusterReader{view: view("failed", addr, 8301)}, ""},
		{"alive again", &clusterReader{view: view("alive", addr, 8301)}, "lists consul-0 alive again"},
		{"moved", &clusterReader{view: view("failed", netip.MustParseAddr("10.244.1.6"), 8301)}, "at another address now"},
		{"another port", &clusterReader{view: view("failed", addr, 8302)}, "at another address now"},
		{"no longer listed", &clusterReader{view: &snapshot.GossipView{System: "consul", From: "pod ns/consul-1"}}, "gone"},
		{"unreadable", &clusterReader{err: errors.New("gossip cluster ns/consul (consul): no pod to ask")}, "no pod to ask"},
	} {
		m := &Members{Clusters: c.r}
		err := m.Verify(context.Background(), target)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Verify = %v", c.name, err)
		case c.want == "gone" && !errors.Is(err, ErrGone):
			t.Errorf("%s: Verify = %v, want ErrGone", c.name, err)
		case c.want != "" && c.want != "gone" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Verify = %v, want %q", c.name, err, c.want)
		}
		if len(c.r.asked) != 1 || c.r.asked[0] != (snapshot.GossipCluster{System: "consul", Cluster: "ns/consul"}) {
			t.Errorf("%s: asked %v", c.name, c.r.asked)
		}
	}
	r := &clusterReader{view: view("failed", addr, 8301)}
	if err := (&Members{Clusters: r}).Act(context.Background(), target); err != nil || len(r.left) != 1 || r.left[0] != "consul-0" {
		t.Errorf("Act = %v, forced out %v", err, r.left)
	}
	r = &clusterReader{view: view("failed", addr, 8301), noKick: true}
	if err := (&Members{Clusters: r}).Act(context.Background(), target); err == nil || !strings.Contains(err.Error(), "consul has no force-leave") {
		t.Errorf("Act through an agent without force-leave = %v", err)
	}
	if err := (&Members{Clusters: r}).Verify(context.Background(), &finding.ReservationTarget{}); err == nil {
		t.Error("Verify of a reservation passed")
	}
	if err := (&Members{}).Act(context.Background(), target); err == nil {
		t.Error("Act without a reader passed")
	}
}

// Act holds the member against the very list it reads before forcing it
// out: a member that rejoined under its name after Verify (a
// StatefulSet's pod, a Consul server back in the Raft peers), or came
// back at another address, is not pruned.
func TestMembersActRechecksTheListItRead(t *testing.T) {
	addr := netip.MustParseAddr("10.244.1.5")
	target := &finding.MemberTarget{System: "consul", Cluster: "ns/consul", Name: "consul-0", Addr: addr, Port: 8301, Status: "failed"}
	view := func(status string, a netip.Addr) *snapshot.GossipView {
		return &snapshot.GossipView{System: "consul", Cluster: "ns/consul", From: "pod ns/consul-1",
			Members: []snapshot.GossipMember{{Name: "consul-0", Addr: a, Port: 8301, Status: status}}}
	}
	for _, c := range []struct {
		name  string
		later *snapshot.GossipView
		want  string
	}{
		{"rejoined", view("alive", addr), "lists consul-0 alive again"},
		{"rejoined elsewhere", view("alive", netip.MustParseAddr("10.244.3.9")), "lists consul-0 alive again"},
		{"failed elsewhere", view("failed", netip.MustParseAddr("10.244.3.9")), "at another address now"},
	} {
		r := &clusterReader{view: view("failed", addr), later: []*snapshot.GossipView{c.later}}
		m := &Members{Clusters: r}
		if err := m.Verify(context.Background(), target); err != nil {
			t.Fatalf("%s: Verify = %v", c.name, err)
		}
		err := m.Act(context.Background(), target)
		if err == nil || !strings.Contains(err.Error(), c.want) || len(r.left) != 0 {
			t.Errorf("%s: Act = %v, forced out %v; want %q and no one forced out", c.name, err, r.left, c.want)
		}
	}
}

// notSentErr is a force-leave the reader withheld before sending it.
type notSentErr struct{}

func (notSentErr) Error() string { return "not sent: 2 pods report 10.244.1.7" }
func (notSentErr) NotSent() bool { return true }

// What stops a force-leave before it is sent is a refusal, counted as one:
// the list read right before acting shows the member alive again, cannot
// be read again, or the agent's address is no longer its pod's alone.
// Only the agent's own answer to a force-leave sent is a failure.
func TestMembersRefusalIsNotAFailure(t *testing.T) {
	addr := netip.MustParseAddr("10.244.1.5")
	target := &finding.MemberTarget{System: "consul", Cluster: "ns/consul", Name: "consul-0", Addr: addr, Port: 8301, Status: "failed"}
	f := finding.Finding{Rule: rule.GossipGhostMemberID, Severity: finding.Critical, Target: target}
	view := func(status string) *snapshot.GossipView {
		return &snapshot.GossipView{System: "consul", Cluster: "ns/consul", From: "pod ns/consul-1",
			Members: []snapshot.GossipMember{{Name: "consul-0", Addr: addr, Port: 8301, Status: status}}}
	}
	for _, c := range []struct {
		name   string
		reader ClusterReader
		want   Result
	}{
		{"alive again when acting", &clusterReader{view: view("failed"), later: []*snapshot.GossipView{view("alive")}}, Refused},
		{"unreadable when acting", &failingOnSecondRead{clusterReader{view: view("failed")}}, Refused},
		{"address shared when sending", &leaveErr{clusterReader{view: view("failed")}, notSentErr{}}, Refused},
		{"the agent refuses", &leaveErr{clusterReader{view: view("failed")}, errors.New("consul PUT /v1/agent/force-leave/consul-0: 403 Forbidden")}, Failed},
		{"forced out", &clusterReader{view: view("failed")}, Done},
	} {
		r := &Remedy{Rule: (&rule.GossipGhostMember{}).Info(), Budget: &Budget{Max: 5, Interval: time.Minute},
			Actuator: &Members{Clusters: c.reader}, Now: t0().Now,
			Recheck: func(context.Context, []finding.Finding) []error { return []error{nil} }}
		s := &snapshot.Snapshot{Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "gossip", Status: snapshot.StatusOK}}}
		acts, err := r.Apply(context.Background(), s, []finding.Finding{f})
		if err != nil || len(acts) != 1 || acts[0].Result != c.want {
			t.Errorf("%s: %v, %+v; want %s", c.name, err, acts, c.want)
		}
	}
}

// failingOnSecondRead answers its first read and fails the next.
type failingOnSecondRead struct{ clusterReader }

func (r *failingOnSecondRead) ReadCluster(ctx context.Context, c snapshot.GossipCluster) (*snapshot.GossipView, func(context.Context, string) error, error) {
	if len(r.asked) > 0 {
		r.asked = append(r.asked, c)
		return nil, nil, errors.New("gossip cluster ns/consul (consul): pod ns/consul-1: connection refused")
	}
	return r.clusterReader.ReadCluster(ctx, c)
}

// leaveErr answers its view, and its force-leave fails with err.
type leaveErr struct {
	clusterReader
	err error
}

func (r *leaveErr) ReadCluster(ctx context.Context, c snapshot.GossipCluster) (*snapshot.GossipView, func(context.Context, string) error, error) {
	v, _, err := r.clusterReader.ReadCluster(ctx, c)
	return v, func(context.Context, string) error { return r.err }, err
}
