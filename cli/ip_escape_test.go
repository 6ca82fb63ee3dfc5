package cli

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

// hostileIP is an ip report whose every string an agent, a replica, the
// API server or a gossip member could fill is filled with s.
func hostileIP(s string) ipReport {
	ip := netip.MustParseAddr("10.244.3.47")
	return ipReport{IP: ip, NotRead: []string{"not read " + s},
		Tenures: []history.Tenure{{IP: ip, Namespace: "shop", Pod: "web-" + s, UID: "uid-" + s, Node: "node-" + s, From: ipT0,
			Until: ipT0.Add(time.Minute), Ended: "failed", Reason: s}},
		Flows: []nodeFlows{{Agent: "gw-agent", AtAddress: conntrack.AtAddress{Node: "node-" + s, CapturedAt: ipT0, Read: 1, Total: 1,
			Flows: []conntrack.AddressFlow{{Role: "backend", Flow: "tcp " + s, Backend: "b " + s, State: s, Timeout: 10, Remove: "conntrack -D " + s}}},
			HostLocal: []hostlocal.NetworkAddress{{Network: "net-" + s, Dir: "/dir/" + s, Reserved: true, ContainerID: s, IfName: s, Since: ipT0}}}},
		IPAM: &ipamRecord{Ledger: "calico", Block: "b-" + s, CIDR: "10.244.3.0/26", Affinity: s, Allocated: true, Handle: "h-" + s,
			BookedNode: s, BookedPod: s, Verdict: "booked for " + s},
		Judged:     true,
		Findings:   []reportFinding{{From: "node-" + s, FindingAt: sink.FindingAt{Rule: "gossip-ghost-member", Severity: "critical", Message: "member " + s + " is failed"}}},
		Members:    []sink.MemberAt{{System: "consul", Cluster: "shop/" + s, Name: s, Port: 8301, Status: s}},
		Histories:  []historySource{{Replica: "gw-" + s, Since: ipT0, NotReady: s}},
		Unanswered: []unanswered{{Replica: "gw-" + s, Error: "answered " + s}},
	}
}

// A gossip member, a pod, a flow, a finding and an error named to forge
// lines: ghostwatch ip prints each on its own line, escaped, and the
// report has the lines it has for harmless names.
func TestIPTableEscapesWhatItDidNotWrite(t *testing.T) {
	const forged = "x\x1b[31m\ncritical  forged\u202e\t\r"
	var plain, b bytes.Buffer
	if err := printIP(&plain, "table", hostileIP("x")); err != nil {
		t.Fatal(err)
	}
	if err := printIP(&b, "table", hostileIP(forged)); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, r := range got {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Fatalf("the report holds %q:\n%s", r, got)
		}
	}
	if n, want := strings.Count(got, "\n"), strings.Count(plain.String(), "\n"); n != want {
		t.Errorf("%d lines, %d for harmless names:\n%s", n, want, got)
	}
	if want := `  consul shop/x\x1b[31m\ncritical  forged\u202e\t\r: x\x1b[31m\ncritical  forged\u202e\t\r (port 8301)`; !strings.Contains(got, want) {
		t.Errorf("the member's line is not\n%s\nin:\n%s", want, got)
	}
}
