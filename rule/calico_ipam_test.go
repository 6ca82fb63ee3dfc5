package rule

import (
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// calicoCluster is a Calico cluster of two nodes with pool 10.200.0.0/16
// (blocks of /29) and disabled pool 10.201.0.0/16: node-a's block
// 10.200.0.0/29 allocates .0 (node-a's IPIP tunnel), .1 (pod web, on
// node-a) and lists 3, 2, 4, 5, 6, 7 as free, in that order.
func calicoCluster(taken time.Time) *snapshot.Snapshot {
	booked := taken.Add(-time.Hour)
	block := snapshot.IPAMBlock{Name: "10-200-0-0-29", CIDR: netip.MustParsePrefix("10.200.0.0/29"), Affinity: "node-a",
		Allocations: []snapshot.Allocation{
			{Ordinal: 0, IP: ip("10.200.0.0"), HandleID: "ipip-tunnel-addr-node-a", Node: "node-a", Type: "ipipTunnelAddress"},
			{Ordinal: 1, IP: ip("10.200.0.1"), HandleID: "k8s-pod-network.web", Node: "node-a", Pod: "web", Namespace: "shop", Timestamp: booked},
		},
		Free: []int{3, 2, 4, 5, 6, 7},
	}
	return &snapshot.Snapshot{
		Taken: taken,
		Kube: &snapshot.Kube{
			Pods:  []snapshot.Pod{pod("shop", "web", "u-web", "10.200.0.1", booked)},
			Nodes: []snapshot.Node{{Name: "node-a"}, {Name: "node-b"}},
		},
		Calico: &snapshot.Calico{
			Blocks:  []snapshot.IPAMBlock{block},
			Handles: []snapshot.IPAMHandle{{Name: "ipip-tunnel-addr-node-a", ID: "ipip-tunnel-addr-node-a"}, {Name: "k8s-pod-network.web", ID: "k8s-pod-network.web"}},
			Pools: []snapshot.IPPool{{Name: "default", CIDR: netip.MustParsePrefix("10.200.0.0/16"), BlockSize: 29},
				{Name: "old", CIDR: netip.MustParsePrefix("10.201.0.0/16"), BlockSize: 29, Disabled: true}},
		},
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "calico", Status: snapshot.StatusOK}},
	}
}

// alloc adds an allocation to the cluster's block, taking its ordinal out
// of the free list.
func alloc(s *snapshot.Snapshot, a snapshot.Allocation) {
	b := &s.Calico.Blocks[0]
	a.Ordinal = snapshot.BlockOrdinal(b.CIDR, a.IP)
	b.Allocations = append(b.Allocations, a)
	for i, o := range b.Free {
		if o == a.Ordinal {
			b.Free = append(b.Free[:i:i], b.Free[i+1:]...)
		}
	}
	if a.HandleID != "" {
		s.Calico.Handles = append(s.Calico.Handles, snapshot.IPAMHandle{Name: a.HandleID, ID: a.HandleID})
	}
}

// pending is a pod whose sandbox is starting: no IP yet.
func pending(ns, name string, created time.Time) snapshot.Pod {
	return snapshot.Pod{UID: "u-" + name, Namespace: ns, Name: name, Node: "node-a", Phase: snapshot.PodPending, Created: created}
}

type calicoGot struct {
	IP   string
	Sev  finding.Severity
	Says string
}

func judge(t *testing.T, r Rule, s *snapshot.Snapshot) []calicoGot {
	t.Helper()
	fs, skipped := Run(s, []Rule{r})
	if len(skipped) > 0 {
		t.Fatalf("skipped: %+v", skipped)
	}
	var out []calicoGot
	for _, f := range fs {
		if f.Evidence["ledger"] != "calico" {
			t.Errorf("finding of ledger %v: %+v", f.Evidence["ledger"], f)
		}
		out = append(out, calicoGot{f.Subject.IP, f.Severity, f.Message})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP < out[j].IP })
	return out
}

// judgeCase changes s with mod, judges it with r, and compares each
// finding's IP, severity and a part of its message with want, in order.
func judgeCase(t *testing.T, r Rule, s *snapshot.Snapshot, mod func(*snapshot.Snapshot), want []calicoGot) {
	t.Helper()
	if mod != nil {
		mod(s)
	}
	got := judge(t, r, s)
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].IP != want[i].IP || got[i].Sev != want[i].Sev || !strings.Contains(got[i].Says, want[i].Says) {
			t.Errorf("got %+v, want %+v", got[i], want[i])
		}
	}
}

func TestCalicoUnbookedIP(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	running := func(ns, name, addr string) snapshot.Pod { return pod(ns, name, "u-"+name, addr, now.Add(-time.Hour)) }
	for _, tc := range []struct {
		name string
		mod  func(s *snapshot.Snapshot)
		// want is the IP, severity and a part of the message of each
		// finding; none when nil.
		want []calicoGot
	}{
		{"every pod booked", nil, nil},
		{"no allocation, first in the free list: the next pod gets it", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.3"))
		}, []calicoGot{{"10.200.0.3", finding.Critical, "lists it as free, first: the next address taken from node node-a's block"}}},
		{"no allocation, third in the free list", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.4"))
		}, []calicoGot{{"10.200.0.4", finding.Critical, "3rd in line"}}},
		{"released into cooldown", func(s *snapshot.Snapshot) {
			b := &s.Calico.Blocks[0]
			b.Free = b.Free[1:]
			b.Cooldown = []snapshot.Cooldown{{Ordinal: 3, IP: ip("10.200.0.3"), ReleasedAt: now}}
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.3"))
		}, []calicoGot{{"10.200.0.3", finding.Warning, "cooldown"}}},
		{"in the active pool, in no block yet", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.9.9"))
		}, []calicoGot{{"10.200.9.9", finding.Warning, "in no block yet"}}},
		{"in the disabled pool", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.201.0.9"))
		}, []calicoGot{{"10.201.0.9", finding.Info, "disabled"}}},
		{"in no pool: another IPAM's", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "192.168.7.7"))
		}, []calicoGot{{"192.168.7.7", finding.Info, "in no IP pool"}}},
		{"hostNetwork and finished pods hold no pod IP", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, hostNet(running("kube-system", "proxy", "10.200.0.3")),
				phase(running("shop", "job", "10.200.0.2"), snapshot.PodSucceeded))
		}, nil},
		{"booked for a pod that is gone: the collector frees it", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.old", Node: "node-a", Pod: "old", Namespace: "shop", Timestamp: now.Add(-2 * time.Hour)})
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.2"))
		}, []calicoGot{{"10.200.0.2", finding.Critical, "booked it for pod shop/old, which no longer exists: the leak collector frees it once it has held it for a leak for leakGracePeriod (15m0s)"}}},
		{"booked for a pod still starting", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.new", Node: "node-a", Pod: "new", Namespace: "shop", Timestamp: now})
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.2"), pending("shop", "new", now))
		}, []calicoGot{{"10.200.0.2", finding.Critical, "which has no IP yet"}}},
		{"booked for a pod that holds it too: duplicate-pod-ip's", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.1"))
		}, nil},
		{"booked as a node's tunnel address", func(s *snapshot.Snapshot) {
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.0"))
		}, []calicoGot{{"10.200.0.0", finding.Critical, "node node-a's ipipTunnelAddress"}}},
		{"booked with no pod attributes: kept for an owner nobody can check", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "manual"})
			s.Kube.Pods = append(s.Kube.Pods, running("shop", "api", "10.200.0.2"))
		}, nil},
		{"its own allocation under another node: ipam-misbooked's", func(s *snapshot.Snapshot) {
			s.Calico.Blocks[0].Allocations[1].Node = "node-b"
		}, nil},
		{"the block is marked deleted: its allocations are gone", func(s *snapshot.Snapshot) {
			s.Calico.Blocks[0].Deleted = true
		}, []calicoGot{{"10.200.0.1", finding.Warning, "in no block yet"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { judgeCase(t, &IPAMUnbookedIP{}, calicoCluster(now), tc.mod, tc.want) })
	}
}

func TestCalicoUnbookedIPEvidence(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	s := calicoCluster(now)
	s.Kube.Pods = append(s.Kube.Pods, on(pod("shop", "api", "u-api", "10.200.0.2", now), "node-b"))
	fs, _ := Run(s, []Rule{&IPAMUnbookedIP{}})
	if len(fs) != 1 {
		t.Fatalf("got %d findings", len(fs))
	}
	f := fs[0]
	want := map[string]any{"ledger": "calico", "block": "10-200-0-0-29", "block_node": "node-a", "ordinal": 2,
		"free_position": 2, "next_free": "10.200.0.3", "pool": "default", "pod_uid": "u-api", "pod_node": "node-b",
		"calicoctl": "in use in an active pool with no allocation"}
	for k, v := range want {
		if f.Evidence[k] != v {
			t.Errorf("evidence[%s] = %v (%T), want %v", k, f.Evidence[k], f.Evidence[k], v)
		}
	}
	if f.Subject != (finding.Subject{IP: "10.200.0.2", Namespace: "shop", Pod: "shop/api", Node: "node-b"}) {
		t.Errorf("subject %+v", f.Subject)
	}
	if d := (&IPAMUnbookedIP{}).Info().Detail(f); d != "no allocation; free in 10-200-0-0-29, 2nd in line" {
		t.Errorf("detail %q", d)
	}
}

func TestCalicoLeakedIP(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	old := now.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		mod  func(s *snapshot.Snapshot)
		want []calicoGot
	}{
		{"every allocation held", nil, nil},
		{"a pod that is gone, its node alive", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.gone", Node: "node-a", Pod: "gone", Namespace: "shop", Timestamp: old})
		}, []calicoGot{{"10.200.0.2", finding.Info, "for pod shop/gone, which no longer exists; no live pod holds it: the leak collector frees it once it has held it for a leak for leakGracePeriod (15m0s)"}}},
		{"a pod that is gone, and its node", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.gone", Node: "node-z", Pod: "gone", Namespace: "shop", Timestamp: old})
		}, []calicoGot{{"10.200.0.2", finding.Info, "its node is gone"}}},
		{"a pod that finished", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.job", Node: "node-a", Pod: "job", Namespace: "shop", Timestamp: old})
			s.Kube.Pods = append(s.Kube.Pods, phase(pod("shop", "job", "u-job", "10.200.0.2", old), snapshot.PodSucceeded))
		}, []calicoGot{{"10.200.0.2", finding.Info, "which has finished"}}},
		{"an earlier pod of a name that now holds another address", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.db0-old", Node: "node-a", Pod: "db-0", Namespace: "shop", Timestamp: old.Add(-time.Hour)})
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.3"), HandleID: "k8s-pod-network.db0", Node: "node-a", Pod: "db-0", Namespace: "shop", Timestamp: old})
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "db-0", "u-db0", "10.200.0.3", old))
		}, []calicoGot{{"10.200.0.2", finding.Info, "booked before the pod of that name was created"}}},
		// Where calicoctl ipam check counts a leak that is none.
		{"a Pending pod whose sandbox is starting", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.new", Node: "node-a", Pod: "new", Namespace: "shop", Timestamp: old})
			s.Kube.Pods = append(s.Kube.Pods, pending("shop", "new", old))
		}, nil},
		{"no pod attributes", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "manual", Timestamp: old})
		}, nil},
		{"tunnel addresses: IPv6 VXLAN, and a deleted node's", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "vxlan-v6-tunnel-addr-node-a", Node: "node-a", Type: "vxlanV6TunnelAddress"})
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.3"), HandleID: "ipip-tunnel-addr-node-z", Node: "node-z", Type: "ipipTunnelAddress"})
		}, nil},
		{"younger than the minimum age", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.gone", Node: "node-a", Pod: "gone", Namespace: "shop", Timestamp: now.Add(-time.Minute)})
		}, nil},
		{"held by a live pod of another name: ipam-unbooked-ip's", func(s *snapshot.Snapshot) {
			alloc(s, snapshot.Allocation{IP: ip("10.200.0.2"), HandleID: "k8s-pod-network.gone", Node: "node-a", Pod: "gone", Namespace: "shop", Timestamp: old})
			s.Kube.Pods = append(s.Kube.Pods, pod("shop", "api", "u-api", "10.200.0.2", old))
		}, nil},
		{"a handle no block allocates from", func(s *snapshot.Snapshot) {
			s.Calico.Handles = append(s.Calico.Handles, snapshot.IPAMHandle{Name: "k8s-pod-network.lost", ID: "k8s-pod-network.lost"})
		}, []calicoGot{{"", finding.Info, "handle k8s-pod-network.lost holds no address in any block"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { judgeCase(t, &IPAMLeakedIP{}, calicoCluster(now), tc.mod, tc.want) })
	}
}

func TestIPAMLedgerCorrupt(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	s := calicoCluster(now)
	b := &s.Calico.Blocks[0]
	b.Reissuable = []netip.Addr{ip("10.200.0.1")}
	b.Malformed = []string{"ordinal 1 (10.200.0.1) is both allocated and in unallocated"}
	s.Calico.Handles = append(s.Calico.Handles, snapshot.IPAMHandle{Name: "h", ID: "h",
		Blocks: []snapshot.HandleBlock{{CIDR: netip.MustParsePrefix("10.200.0.8/29"), Count: 1}}})
	s.Calico.Blocks = append(s.Calico.Blocks, snapshot.IPAMBlock{Name: "10-200-0-16-29", CIDR: netip.MustParsePrefix("10.200.0.16/29"), Affinity: "node-b",
		Allocations: []snapshot.Allocation{{Ordinal: 0, IP: ip("10.200.0.16"), HandleID: "k8s-pod-network.nohandle", Pod: "x", Namespace: "shop"}},
		Free:        []int{1, 2, 3, 4, 5, 6, 7}})
	fs, skipped := Run(s, []Rule{&IPAMLedgerCorrupt{}})
	if len(skipped) > 0 {
		t.Fatal(skipped)
	}
	var got []string
	for _, f := range fs {
		got = append(got, f.Severity.String()+" "+f.Evidence["object"].(string)+" "+f.Subject.Node)
	}
	want := []string{"critical IPAMBlock/10-200-0-0-29 node-a", "warning IPAMBlock/10-200-0-16-29 node-b", "warning IPAMHandle/h "}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i, part := range []string{"hand 10.200.0.1, allocated, to another pod", "names handle k8s-pod-network.nohandle, which does not exist", "block 10.200.0.8/29, which does not exist"} {
		if !strings.Contains(fs[i].Message, part) {
			t.Errorf("%s: %q lacks %q", got[i], fs[i].Message, part)
		}
	}
	if fs := (&IPAMLedgerCorrupt{}).Evaluate(calicoCluster(now)); len(fs) != 0 {
		t.Errorf("a sound ledger: %+v", fs)
	}
}

// The index the Calico rules share is built once in a pass, and belongs
// to the pass: once it ends, nothing of it is kept.
func TestTheCalicoIndexBelongsToThePass(t *testing.T) {
	s := calicoCluster(t0)
	s.Kube.Pods = append(s.Kube.Pods, pod("shop", "api", "u-api", "10.200.0.3", t0))
	s.BeginPass()
	if fs, _ := Run(s, []Rule{&IPAMUnbookedIP{}, &IPAMLeakedIP{}}); len(fs) != 1 {
		t.Fatalf("%d findings", len(fs))
	}
	v := calicoViewOf(s)
	if calicoViewOf(s) != v {
		t.Error("two rules of one pass built the index twice")
	}
	s.EndPass()
	if calicoViewOf(s) == v {
		t.Error("the pass's index outlives the pass")
	}
}
