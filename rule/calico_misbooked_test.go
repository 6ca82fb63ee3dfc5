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

// calicoSeed002 is the ledger of seed 002: a block of node 10-199-0-105
// where csi-node-driver-rlfpx was booked under the stale name 10-199-0-21,
// node-problem-detector correctly, and a tunnel address.
func calicoSeed002(booked time.Time) *snapshot.Calico {
	return &snapshot.Calico{
		Blocks: []snapshot.IPAMBlock{{Name: "10-200-129-192-26", CIDR: netip.MustParsePrefix("10.200.129.192/26"), Affinity: "10-199-0-105",
			Allocations: []snapshot.Allocation{
				{Ordinal: 0, IP: ip("10.200.129.192"), HandleID: "ipip-tunnel-addr-10-199-0-105", Node: "10-199-0-105", Type: "ipipTunnelAddress"},
				{Ordinal: 6, IP: ip("10.200.129.198"), HandleID: "k8s-pod-network.fc3a04", Node: "10-199-0-21", Pod: "csi-node-driver-rlfpx", Namespace: "calico-system", Timestamp: booked},
				{Ordinal: 7, IP: ip("10.200.129.199"), HandleID: "k8s-pod-network.970628", Node: "10-199-0-105", Pod: "node-problem-detector-774b4", Namespace: "kube-system", Timestamp: booked},
			}}},
	}
}

func TestIPAMMisbooked(t *testing.T) {
	booked := t0
	pods := []snapshot.Pod{
		on(pod("calico-system", "csi-node-driver-rlfpx", "u1", "10.200.129.198", t0), "10-199-0-105"),
		on(pod("kube-system", "node-problem-detector-774b4", "u2", "10.200.129.199", t0), "10-199-0-105"),
	}
	nodes := []snapshot.Node{{Name: "10-199-0-105"}, {Name: "10-199-0-21"}}
	type got struct {
		ip   string
		sev  finding.Severity
		from string
	}
	for _, c := range []struct {
		name  string
		taken time.Time
		mod   func(*snapshot.Snapshot)
		want  []got
	}{
		{"seed 002: booked under an existing node, the default grace", t0.Add(5 * time.Minute), nil,
			[]got{{"10.200.129.198", finding.Critical, "2026-11-01T12:15:00Z"}}},
		{"a configured grace", t0.Add(time.Minute), func(s *snapshot.Snapshot) {
			s.Calico.LeakGC = &snapshot.LeakGC{GracePeriod: time.Hour, From: "spec"}
		}, []got{{"10.200.129.198", finding.Critical, "2026-11-01T13:00:00Z"}}},
		{"the stale name is no node's: the collector keeps it", t0, func(s *snapshot.Snapshot) {
			s.Kube.Nodes = s.Kube.Nodes[:1]
		}, []got{{"10.200.129.198", finding.Warning, ""}}},
		{"leakGracePeriod 0: nothing is freed", t0, func(s *snapshot.Snapshot) {
			s.Calico.LeakGC = &snapshot.LeakGC{From: "spec: leakGracePeriod 0s"}
		}, []got{{"10.200.129.198", finding.Warning, ""}}},
		{"the pod is gone: not a misbooking (a leak, another rule's)", t0, func(s *snapshot.Snapshot) {
			s.Kube.Pods = s.Kube.Pods[1:]
		}, nil},
		{"another pod holds the address now: not this allocation's pod", t0, func(s *snapshot.Snapshot) {
			s.Kube.Pods[0].Name = "other"
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &snapshot.Snapshot{Taken: c.taken, Calico: calicoSeed002(booked),
				Kube: &snapshot.Kube{Pods: append([]snapshot.Pod(nil), pods...), Nodes: append([]snapshot.Node(nil), nodes...)}}
			if c.mod != nil {
				c.mod(s)
			}
			var have []got
			for _, f := range (&IPAMMisbooked{}).Evaluate(s) {
				from, _ := f.Evidence["freed_from"].(string)
				have = append(have, got{f.Subject.IP, f.Severity, from})
				if f.Subject.Node != "10-199-0-105" || f.Evidence["booked_node"] != "10-199-0-21" || !strings.Contains(f.Message, "booked it under node 10-199-0-21") {
					t.Errorf("finding %+v", f)
				}
			}
			if !reflect.DeepEqual(have, c.want) {
				t.Errorf("got %+v, want %+v", have, c.want)
			}
		})
	}
}
