package rule

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// kindNet is kindnet's host-local network on kind-worker3: 10.244.2.0/24,
// addresses .1 (gateway) to .254, holding a reservation for each address
// given.
func kindNet(last string, reserved ...string) snapshot.HostLocalNetwork {
	n := snapshot.HostLocalNetwork{Name: "kindnet", Dir: "/run/cni-ipam-state/kindnet", Config: "/etc/cni/net.d/10-kindnet.conflist",
		RangeSets: []snapshot.RangeSet{{{Subnet: netip.MustParsePrefix("10.244.2.0/24"), Start: ip("10.244.2.1"), End: ip("10.244.2.254"), Gateway: ip("10.244.2.1")}}}}
	if last != "" {
		n.LastReserved = map[int]netip.Addr{0: ip(last)}
	}
	for _, r := range reserved {
		n.Reservations = append(n.Reservations, snapshot.Reservation{IP: ip(r), ContainerID: "ctr-" + r, IfName: "eth0", Modified: t0})
	}
	return n
}

// worker3 is a snapshot of kind-worker3 with the given pods (on it unless
// they say otherwise) and host-local networks.
func worker3(pods []snapshot.Pod, nets ...snapshot.HostLocalNetwork) *snapshot.Snapshot {
	for i := range pods {
		if pods[i].Node == "node-a" {
			pods[i].Node = "kind-worker3"
		}
	}
	return &snapshot.Snapshot{
		Taken:     t0.Add(time.Hour),
		NodeName:  "kind-worker3",
		Kube:      &snapshot.Kube{Pods: pods, Nodes: []snapshot.Node{{Name: "kind-worker3", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}, {Name: "kind-worker2"}}},
		HostLocal: &snapshot.HostLocal{Networks: nets},
		Sources:   []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "hostlocal", Status: snapshot.StatusOK}},
	}
}

func debugPods(ips ...string) []snapshot.Pod {
	var out []snapshot.Pod
	for _, a := range ips {
		out = append(out, pod("default", "debug-"+a, "uid-"+a, a, t0))
	}
	return out
}

type hlWant struct {
	ip   string
	sev  finding.Severity
	next string
}

func TestIPAMUnbookedIP(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *snapshot.Snapshot
		want []hlWant
	}{
		{
			name: "seed 003: the store was wiped; the next ADD returns .2, the first pod's IP, and the others follow",
			s:    worker3(debugPods("10.244.2.2", "10.244.2.3", "10.244.2.10"), kindNet("")),
			want: []hlWant{{"10.244.2.2", finding.Critical, "10.244.2.2"}, {"10.244.2.3", finding.Warning, "10.244.2.2"}, {"10.244.2.10", finding.Warning, "10.244.2.2"}},
		},
		{
			name: "the store is whole: nothing to report",
			s:    worker3(debugPods("10.244.2.2", "10.244.2.3"), kindNet("10.244.2.3", "10.244.2.2", "10.244.2.3")),
		},
		{
			name: "one file lost behind last_reserved_ip: the walk reaches it only after wrapping",
			s:    worker3(debugPods("10.244.2.2", "10.244.2.3", "10.244.2.4"), kindNet("10.244.2.4", "10.244.2.2", "10.244.2.4")),
			want: []hlWant{{"10.244.2.3", finding.Warning, "10.244.2.5"}},
		},
		{
			name: "a wipe that kept last_reserved_ip: the next ADD goes on after it, and the lost addresses come when it wraps",
			s:    worker3(debugPods("10.244.2.2", "10.244.2.253"), kindNet("10.244.2.252")),
			want: []hlWant{{"10.244.2.2", finding.Warning, "10.244.2.253"}, {"10.244.2.253", finding.Critical, "10.244.2.253"}},
		},
		{
			name: "not reported: a terminating pod (its DEL may have run), a pod of another node, a hostNetwork pod, an IP of another IPAM",
			s: worker3([]snapshot.Pod{
				deleting(pod("default", "leaving", "u1", "10.244.2.7", t0)),
				on(pod("default", "elsewhere", "u2", "10.244.2.8", t0), "kind-worker2"),
				hostNet(pod("kube-system", "kube-proxy", "u3", "10.244.2.9", t0)),
				pod("default", "multus-second-net", "u4", "192.168.77.5", t0),
				phase(pod("default", "done", "u5", "10.244.2.11", t0), snapshot.PodSucceeded),
			}, kindNet("")),
		},
		{
			name: "no configuration names the network (flannel keeps its own): the Node's pod CIDR is the range",
			s: func() *snapshot.Snapshot {
				n := kindNet("10.244.2.2", "10.244.2.2")
				n.RangeSets, n.Config, n.Name, n.Dir = nil, "", "cbr0", "/var/lib/cni/networks/cbr0"
				return worker3(debugPods("10.244.2.2", "10.244.2.3"), n)
			}(),
			want: []hlWant{{"10.244.2.3", finding.Critical, "10.244.2.3"}},
		},
		{
			name: "no Node given (a dump of pods alone): the pods bound to the node tie it to its store",
			s: func() *snapshot.Snapshot {
				s := worker3(debugPods("10.244.2.2", "10.244.2.3"), kindNet("10.244.2.2", "10.244.2.2"))
				s.Kube.Nodes = nil
				return s
			}(),
			want: []hlWant{{"10.244.2.3", finding.Critical, "10.244.2.3"}},
		},
		{
			name: "no Node given: a store no configuration names has no ranges to judge",
			s: func() *snapshot.Snapshot {
				n := kindNet("10.244.2.2", "10.244.2.2")
				n.RangeSets, n.Config, n.Name, n.Dir = nil, "", "cbr0", "/var/lib/cni/networks/cbr0"
				s := worker3(debugPods("10.244.2.2", "10.244.2.3"), n)
				s.Kube.Nodes = nil
				return s
			}(),
		},
		{
			name: "a leftover store (no configuration names it, the node's network is not flannel's): nothing is judged",
			s: func() *snapshot.Snapshot {
				n := kindNet("10.244.2.2", "10.244.2.2")
				n.RangeSets, n.Config, n.Name, n.Dir = nil, "", "k8s-pod-network", "/var/lib/cni/networks/k8s-pod-network"
				n.Unjudged = "a leftover store"
				return worker3(debugPods("10.244.2.2", "10.244.2.3"), n)
			}(),
		},
		{
			name: "a node the cluster objects do not hold: no pod can be tied to it, nothing is judged",
			s: func() *snapshot.Snapshot {
				s := worker3(debugPods("10.244.2.2"), kindNet(""))
				s.NodeName = "kind-worker9"
				return s
			}(),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []hlWant
			for _, f := range (&IPAMUnbookedIP{}).Evaluate(c.s) {
				got = append(got, hlWant{f.Subject.IP, f.Severity, f.Evidence["next_allocation"].(string)})
				if f.Subject.Node != c.s.NodeName || f.Subject.Pod == "" || len(f.Concerns) != 2 {
					t.Errorf("finding %+v", f)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestIPAMUnbookedIPMessage(t *testing.T) {
	s := worker3(debugPods("10.244.2.2", "10.244.2.3"), kindNet(""))
	fs := (&IPAMUnbookedIP{}).Evaluate(s)
	if len(fs) != 2 {
		t.Fatalf("%d findings", len(fs))
	}
	want := "pod default/debug-10.244.2.3 holds 10.244.2.3, but host-local's network kindnet on node kind-worker3 has no reservation for it (/run/cni-ipam-state/kindnet): the next ADD returns 10.244.2.2, which pod default/debug-10.244.2.2 holds too; 10.244.2.3 follows when the walk reaches it (allocation starts from the range start)"
	if fs[1].Message != want {
		t.Errorf("message:\n got %s\nwant %s", fs[1].Message, want)
	}
	if fs[1].Evidence["next_allocation_holder"] != "default/debug-10.244.2.2" || fs[1].Evidence["config"] != "/etc/cni/net.d/10-kindnet.conflist" {
		t.Errorf("evidence %v", fs[1].Evidence)
	}
}

func TestIPAMLeakedIP(t *testing.T) {
	n := kindNet("10.244.2.5", "10.244.2.2", "10.244.2.3", "10.244.2.4", "10.244.2.5")
	n.Reservations[2].Modified = t0.Add(time.Hour - time.Minute) // .4: written a minute before the snapshot
	s := worker3(append(debugPods("10.244.2.2"), on(pod("default", "moved", "u9", "10.244.2.5", t0), "kind-worker2")), n)
	var got []string
	for _, f := range (&IPAMLeakedIP{}).Evaluate(s) {
		got = append(got, f.Subject.IP+" "+f.Severity.String())
		if f.Subject.IP == "10.244.2.5" && f.Evidence["held_elsewhere_by"] != "default/moved" {
			t.Errorf("evidence %v", f.Evidence)
		}
	}
	if want := []string{"10.244.2.3 info", "10.244.2.5 info"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v (.2 is held here, .4 too young)", got, want)
	}
}

// nextAllocation against host-local's order, as the plugin's own tests
// pin it (lab/cni), on cases written out by hand; the real plugin checks
// random ones (TestNextAllocationIsHostLocals).
func TestNextAllocation(t *testing.T) {
	r := func(subnet, start, end, gw string) snapshot.IPRange {
		return snapshot.IPRange{Subnet: netip.MustParsePrefix(subnet), Start: ip(start), End: ip(end), Gateway: ip(gw)}
	}
	res := func(addrs ...string) map[netip.Addr]*snapshot.Reservation {
		m := map[netip.Addr]*snapshot.Reservation{}
		for _, a := range addrs {
			m[ip(a)] = &snapshot.Reservation{IP: ip(a)}
		}
		return m
	}
	slash29 := snapshot.RangeSet{r("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.1")}
	for _, c := range []struct {
		name string
		rs   snapshot.RangeSet
		last string
		res  map[netip.Addr]*snapshot.Reservation
		want string
	}{
		{"empty store: the first address after the gateway", slash29, "", res(), "10.0.0.2"},
		{"after last_reserved_ip", slash29, "10.0.0.3", res("10.0.0.2", "10.0.0.3"), "10.0.0.4"},
		{"a freed address waits until the walk wraps", slash29, "10.0.0.4", res("10.0.0.2", "10.0.0.4"), "10.0.0.5"},
		{"wraps past the end, skipping the gateway", slash29, "10.0.0.6", res("10.0.0.2", "10.0.0.6"), "10.0.0.3"},
		{"last_reserved_ip outside the set: from the start", slash29, "192.0.2.1", res("10.0.0.2"), "10.0.0.3"},
		{"full", slash29, "10.0.0.3", res("10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"), ""},
		{"a gateway elsewhere makes .1 an address", snapshot.RangeSet{r("10.0.0.0/29", "10.0.0.1", "10.0.0.6", "10.0.0.5")}, "", res(), "10.0.0.1"},
		{"on to the next range of the set", snapshot.RangeSet{r("10.0.0.0/30", "10.0.0.1", "10.0.0.2", "10.0.0.1"), r("10.0.1.0/30", "10.0.1.1", "10.0.1.2", "10.0.1.1")}, "10.0.0.2", res("10.0.0.2"), "10.0.1.2"},
		{"IPv6: the last address is handed out", snapshot.RangeSet{r("fd00::/126", "fd00::1", "fd00::3", "fd00::1")}, "fd00::2", res("fd00::2"), "fd00::3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var last netip.Addr
			if c.last != "" {
				last = ip(c.last)
			}
			got := nextAllocation(c.rs, last, c.res)
			if (c.want == "" && got.IsValid()) || (c.want != "" && got != ip(c.want)) {
				t.Errorf("next = %v, want %q", got, c.want)
			}
		})
	}
}

// The re-check before a reservation is written reads the pods of the IP
// afresh: the very pod must still hold it, alone, on this node, running.
func TestIPAMUnbookedIPRecheck(t *testing.T) {
	tgt := &finding.ReservationTarget{Store: "/run/cni-ipam-state/kindnet", IP: ip("10.244.2.3"), ContainerID: "c", IfName: "eth0",
		Pod: snapshot.ObjectRef{Namespace: "default", Name: "debug-10.244.2.3"}, PodUID: "uid-10.244.2.3"}
	f := finding.Finding{Rule: IPAMUnbookedIPID, Target: tgt}
	r := &IPAMUnbookedIP{}
	if q := r.RecheckQuery(&snapshot.Snapshot{NodeName: "kind-worker3"}, f); len(q.PodIPs) != 1 || q.PodIPs[0] != tgt.IP || len(q.Nodes) != 1 {
		t.Errorf("query %+v", q)
	}
	for _, c := range []struct {
		name string
		pods []snapshot.Pod
		want string
	}{
		{"the same pod, running here", debugPods("10.244.2.3"), ""},
		{"gone", nil, "no pod holds 10.244.2.3 any more"},
		{"another pod now", []snapshot.Pod{pod("default", "other", "uid-x", "10.244.2.3", t0)}, "not by the pod the reservation was for"},
		{"two pods: a duplicate already", append(debugPods("10.244.2.3"), pod("default", "other", "uid-x", "10.244.2.3", t0)), "2 pods hold 10.244.2.3"},
		{"terminating", []snapshot.Pod{deleting(pod("default", "debug-10.244.2.3", "uid-10.244.2.3", "10.244.2.3", t0))}, "is terminating"},
		{"moved to another node", []snapshot.Pod{on(pod("default", "debug-10.244.2.3", "uid-10.244.2.3", "10.244.2.3", t0), "kind-worker2")}, "runs on node kind-worker2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fresh := worker3(c.pods)
			err := r.Recheck(fresh, []finding.Finding{f})[0]
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("Recheck = %v, want %q", err, c.want)
			}
		})
	}
}
