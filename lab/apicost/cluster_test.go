package apicost

import (
	"net/netip"
	"strings"
	"testing"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		sizes Sizes
		bits  int
		err   string
	}{
		{DefaultSizes(), 24, ""},
		{Sizes{Pods: 300, Nodes: 10, Services: 20, Replacements: 30, Rate: 20}, 26, ""},
		{Sizes{Pods: 1000, Nodes: 100, Services: 100, Replacements: 300, Rate: 20}, 27, ""},
		{Sizes{Pods: 100000, Nodes: 200, Services: 500, Replacements: 1000, Rate: 20}, 22, "do not fit"},
		{Sizes{Pods: 10, Nodes: 1, Services: 20, Rate: 1}, 0, "at least one pod per Service"},
		{Sizes{Pods: 10, Nodes: 1, Services: 2, Rate: 0}, 0, "rate"},
		{Sizes{Pods: 0, Nodes: 1, Services: 1, Rate: 1}, 0, "at least a pod"},
	} {
		l, err := newLayout(tc.sizes)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want an error saying %q", tc.sizes, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.sizes, err)
			continue
		}
		if l.bits != tc.bits {
			t.Errorf("%+v: pod CIDRs /%d, want /%d", tc.sizes, l.bits, tc.bits)
		}
		// Every pod CIDR in the cluster's, none overlapping; the pods
		// evenly over the nodes and the Services, each Service on more
		// than one node when it has more than one pod.
		cluster := netip.MustParsePrefix("10.244.0.0/16")
		seen := map[netip.Prefix]bool{}
		for i := range l.Nodes {
			p := l.podCIDR(i)
			if !cluster.Contains(p.Addr()) || !cluster.Contains(lastAddr(p)) || seen[p] {
				t.Fatalf("%+v: node %d's pod CIDR %s", tc.sizes, i, p)
			}
			seen[p] = true
		}
		perNode, perService, nodesOf := map[int]int{}, map[int]int{}, map[int]map[int]bool{}
		for j := range l.Pods {
			n, s := l.slotNode(j), l.slotService(j)
			perNode[n]++
			perService[s]++
			if nodesOf[s] == nil {
				nodesOf[s] = map[int]bool{}
			}
			nodesOf[s][n] = true
		}
		if spread(perNode, l.Nodes) > 1 || spread(perService, l.Services) > 1 {
			t.Errorf("%+v: pods per node %v, per Service %v: want even", tc.sizes, perNode, perService)
		}
		for s, ns := range nodesOf {
			if perService[s] > 1 && len(ns) < 2 {
				t.Errorf("%+v: Service %d has its %d pods on one node", tc.sizes, s, perService[s])
			}
		}
		// The replacements on the measured node: about their share.
		onFirst := 0
		for i := range l.Replacements {
			if l.slotNode(i%l.Pods) == 0 {
				onFirst++
			}
		}
		if share := l.Replacements / l.Nodes; onFirst < share || onFirst > share+1 {
			t.Errorf("%+v: %d replacements on node-0, want about %d", tc.sizes, onFirst, share)
		}
	}
}

// spread is the difference between the largest and smallest count of n
// keys (a key missing counts 0).
func spread(counts map[int]int, n int) int {
	lo, hi := counts[0], counts[0]
	for i := range n {
		lo, hi = min(lo, counts[i]), max(hi, counts[i])
	}
	return hi - lo
}

func TestIPAMWrapsAndSkipsWhatIsHeld(t *testing.T) {
	l, err := newLayout(Sizes{Pods: 20, Nodes: 1, Services: 1, Replacements: 0, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	k := newAPIKubelet(nil, l)
	cidr := l.podCIDR(0)
	size := 1<<(32-cidr.Bits()) - 2
	var got []netip.Addr
	for range size {
		ip, err := k.allocate(0)
		if err != nil {
			t.Fatal(err)
		}
		if !cidr.Contains(ip) || ip == cidr.Addr() || ip == lastAddr(cidr) {
			t.Fatalf("%s handed out of %s", ip, cidr)
		}
		got = append(got, ip)
	}
	if _, err := k.allocate(0); err == nil {
		t.Fatalf("a full %s handed out another address", cidr)
	}
	k.release(0, got[3].String())
	if ip, err := k.allocate(0); err != nil || ip != got[3] {
		t.Errorf("after releasing %s: %s, %v", got[3], ip, err)
	}
}

func TestPodIsTheSameEveryRun(t *testing.T) {
	l, err := newLayout(DefaultSizes())
	if err != nil {
		t.Fatal(err)
	}
	a, b := l.pod(7, 7), l.pod(7, 7)
	if a.Name != b.Name || a.OwnerReferences[0].UID != b.OwnerReferences[0].UID || a.Spec.NodeName != b.Spec.NodeName {
		t.Errorf("pod 7 differs between calls: %s %s", a.Name, b.Name)
	}
	if r := l.pod(7, l.Pods+3); r.Name == a.Name || r.Labels["app"] != a.Labels["app"] || r.Spec.NodeName != a.Spec.NodeName {
		t.Errorf("replacement %s of %s: want a new name, the same Service and node", r.Name, a.Name)
	}
	if a.Spec.NodeName != l.nodeName(l.slotNode(7)) || a.Namespace != l.serviceObject(l.slotService(7)).Namespace {
		t.Errorf("pod 7 on %s in %s", a.Spec.NodeName, a.Namespace)
	}
}
