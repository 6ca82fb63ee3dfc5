package rule

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// calicoAtScale is a cluster of 2,500 nodes, each with one /26 block of
// pool 10.0.0.0/12, and 150,000 pods, 60 per node, each booked in its
// node's block; plus a few ghosts of every kind the Calico rules report:
// 10 pods with no allocation, 10 allocations of pods that are gone, 10
// misbookings, 10 leaked handles.
func calicoAtScale() *snapshot.Snapshot {
	const nodes, perNode = 2500, 60
	taken := t0.Add(24 * time.Hour)
	booked := taken.Add(-time.Hour)
	s := &snapshot.Snapshot{
		Taken: taken,
		Kube:  &snapshot.Kube{Pods: make([]snapshot.Pod, 0, nodes*perNode), Nodes: make([]snapshot.Node, nodes)},
		Calico: &snapshot.Calico{
			Blocks: make([]snapshot.IPAMBlock, nodes),
			Pools:  []snapshot.IPPool{{Name: "default", CIDR: netip.MustParsePrefix("10.0.0.0/12"), BlockSize: 26}},
		},
		// No gossip cluster: its rules run on an empty member list.
		Gossip: &snapshot.Gossip{},
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "calico", Status: snapshot.StatusOK},
			{Name: "gossip", Status: snapshot.StatusOK}},
	}
	s.Calico.Handles = make([]snapshot.IPAMHandle, 0, nodes*perNode+10)
	for n := range nodes {
		node := fmt.Sprintf("node-%04d", n)
		s.Kube.Nodes[n] = snapshot.Node{Name: node}
		base := netip.AddrFrom4([4]byte{10, byte(n >> 10), byte(n >> 2), byte(n&3) << 6})
		b := &s.Calico.Blocks[n]
		*b = snapshot.IPAMBlock{Name: fmt.Sprintf("block-%04d", n), CIDR: netip.PrefixFrom(base, 26), Affinity: node,
			Allocations: make([]snapshot.Allocation, 0, perNode)}
		for i := range perNode {
			ip := snapshot.BlockAddr(b.CIDR, i)
			name := fmt.Sprintf("pod-%04d-%02d", n, i)
			handle := "k8s-pod-network." + name
			s.Kube.Pods = append(s.Kube.Pods, snapshot.Pod{UID: "u-" + name, Namespace: "ns", Name: name, Node: node,
				Phase: snapshot.PodRunning, IPs: []netip.Addr{ip}, Created: booked, StartTime: booked})
			b.Allocations = append(b.Allocations, snapshot.Allocation{Ordinal: i, IP: ip, HandleID: handle, Node: node,
				Pod: name, Namespace: "ns", Timestamp: booked})
			s.Calico.Handles = append(s.Calico.Handles, snapshot.IPAMHandle{Name: handle, ID: handle})
		}
		b.Free = []int{60, 61, 62, 63}
	}
	for k := range 10 {
		b := &s.Calico.Blocks[k*200]
		// Lost its allocation: free again, first in line.
		a := b.Allocations[0]
		b.Allocations = b.Allocations[1:]
		b.Free = append([]int{a.Ordinal}, b.Free...)
		// Booked for a pod that is gone.
		b.Allocations = append(b.Allocations, snapshot.Allocation{Ordinal: 60, IP: snapshot.BlockAddr(b.CIDR, 60), HandleID: "gone",
			Pod: "gone", Namespace: "ns", Node: b.Affinity, Timestamp: booked})
		b.Free = b.Free[:len(b.Free)-4]
		b.Free = append(b.Free, 61, 62, 63)
		// Booked under another node.
		b.Allocations[5].Node = s.Kube.Nodes[k*200+1].Name
		s.Calico.Handles = append(s.Calico.Handles, snapshot.IPAMHandle{Name: fmt.Sprintf("lost-%d", k), ID: fmt.Sprintf("lost-%d", k)})
	}
	return s
}

// BenchmarkCalicoRules is a full pass of the cluster rules over 150,000
// pods and 2,500 blocks, as the controller makes after a burst of changes
// ("pass": every cluster rule, sharing one index of pods and allocations),
// and each Calico rule run alone, building that index itself.
func BenchmarkCalicoRules(b *testing.B) {
	s := calicoAtScale()
	b.Run("pass", func(b *testing.B) {
		rules := InScope(All(Config{}), ScopeCluster)
		b.ReportAllocs()
		for b.Loop() {
			fresh := *s
			if fs, skipped := Run(&fresh, rules); len(fs) != 60 || len(skipped) != 0 {
				b.Fatalf("%d findings, skipped %+v", len(fs), skipped)
			}
		}
	})
	for _, c := range []struct {
		r    Rule
		want int
	}{
		{&IPAMUnbookedIP{}, 10},
		{&IPAMLeakedIP{}, 30}, // the gone pods' allocations, the lost handles, the handles of the lost allocations
		{&IPAMMisbooked{}, 10},
		{&IPAMLedgerCorrupt{}, 10}, // the "gone" handle does not exist
	} {
		b.Run(c.r.Info().ID, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if fs, _ := Run(s, []Rule{c.r}); len(fs) != c.want {
					b.Fatalf("%d findings, want %d", len(fs), c.want)
				}
			}
		})
	}
}

// gossipAtScale adds to s a Consul cluster of 5,000 members, one per pod
// of the first 5,000, and 10 ghosts: failed members at the addresses of
// pods that started after they went, beside the live members there.
func gossipAtScale(s *snapshot.Snapshot) {
	v := snapshot.GossipView{System: "consul", Cluster: "ns/consul", From: "pod ns/pod-0000-00", Local: "pod-0000-00"}
	for i := range 5000 {
		p := &s.Kube.Pods[i]
		v.Members = append(v.Members, snapshot.GossipMember{Name: p.Name, Addr: p.IPs[0], Port: 8301, Status: snapshot.MemberAlive})
	}
	for k := range 10 {
		p := &s.Kube.Pods[k*400]
		v.Members = append(v.Members, snapshot.GossipMember{Name: fmt.Sprintf("ghost-%d", k), Addr: p.IPs[0], Port: 8301,
			Status: snapshot.MemberFailed, Listed: p.StartTime.Add(-time.Hour)})
	}
	s.Gossip = &snapshot.Gossip{Views: []snapshot.GossipView{v}}
}

// BenchmarkGossipRules is the gossip rules over a Consul cluster of 5,000
// members in a cluster of 150,000 pods.
func BenchmarkGossipRules(b *testing.B) {
	s := calicoAtScale()
	gossipAtScale(s)
	for _, c := range []struct {
		r    Rule
		want int
	}{
		{&GossipGhostMember{}, 10},
		{&GossipIPIdentity{}, 0},
	} {
		b.Run(c.r.Info().ID, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if fs, _ := Run(s, []Rule{c.r}); len(fs) != c.want {
					b.Fatalf("%d findings, want %d", len(fs), c.want)
				}
			}
		})
	}
}
