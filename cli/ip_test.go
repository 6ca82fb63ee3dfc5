package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

var ipT0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// What two replicas remember of an address, merged with the pod the API
// server lists there now: one tenure a pod, the earliest start any saw,
// ended when any saw it end, oldest first.
func TestIPMergesTheReplicasAndTheAPIServer(t *testing.T) {
	ip := netip.MustParseAddr("10.244.3.47")
	ten := func(pod, uid string, from time.Duration, ended string, until time.Duration) history.Tenure {
		t := history.Tenure{IP: ip, Namespace: "shop", Pod: pod, UID: uid, Node: "node-1", From: ipT0.Add(from), Ended: ended}
		if ended != "" {
			t.Until = ipT0.Add(until)
		}
		return t
	}
	answers := []history.Answer{
		{Replica: "a", Tenures: []history.Tenure{ten("web-a", "uid-a", 0, "deleted", 5*time.Minute), ten("web-b", "uid-b", 10*time.Minute, "", 0)}},
		// Started later: it saw web-b end, and a later start of it.
		{Replica: "b", Tenures: []history.Tenure{ten("web-b", "uid-b", 12*time.Minute, "failed", 15*time.Minute)}},
	}
	start := ipT0.Add(20 * time.Minute)
	now := []snapshot.Pod{{Namespace: "shop", Name: "web-c", UID: "uid-c", Node: "node-2", Phase: snapshot.PodRunning,
		Created: start, StartTime: start, IPs: []netip.Addr{ip}}}
	var got []string
	for _, t := range mergeTenures(ip, answers, now) {
		got = append(got, fmt.Sprintf("%s %s %s-%s %s", t.Pod, t.Node, t.From.Format("15:04"), t.Until.Format("15:04"), t.Ended))
	}
	want := []string{"web-a node-1 10:00-10:05 deleted", "web-b node-1 10:10-10:15 failed", "web-c node-2 10:20-00:00 "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged:\n got %q\nwant %q", got, want)
	}
}

// The table is a timeline a person reads top to bottom, and says which
// history answered, which did not, and what ip does not read.
func TestIPTimelineTable(t *testing.T) {
	ip := netip.MustParseAddr("10.244.3.47")
	rep := ipReport{IP: ip, NotRead: ipNotRead,
		Tenures: []history.Tenure{
			{IP: ip, Namespace: "shop", Pod: "web-a", UID: "uid-a", Node: "node-1", From: ipT0, Until: ipT0.Add(5 * time.Minute), Ended: "failed", Reason: "Evicted"},
			{IP: ip, Namespace: "shop", Pod: "web-b", UID: "uid-b", Node: "node-2", From: ipT0.Add(10 * time.Minute)},
		},
		Flows: []nodeFlows{
			{Agent: "gw-agent-x7k2p", AtAddress: conntrack.AtAddress{Node: "node-1", CapturedAt: ipT0.Add(30 * time.Minute), Read: 1234, Total: 1, Flows: []conntrack.AddressFlow{{
				Role: "backend", Flow: "tcp 10.244.1.5:40000 -> 10.96.0.10:80", Backend: "10.244.3.47:8080", State: "ESTABLISHED", Timeout: 431990,
				Remove: "conntrack -D -p tcp -s 10.244.1.5 -d 10.96.0.10 --sport 40000 --dport 80 -r 10.244.3.47"}}}},
			{Agent: "gw-agent-q2w9z", AtAddress: conntrack.AtAddress{Node: "node-2", CapturedAt: ipT0.Add(30 * time.Minute), Read: 87},
				HostLocal: []hostlocal.NetworkAddress{{Network: "kindnet", Dir: "/run/cni-ipam-state/kindnet", Reserved: true, ContainerID: "c0ffee", IfName: "eth0", Since: ipT0.Add(10 * time.Minute)}}},
		},
		IPAM: &ipamRecord{Ledger: "calico", Block: "10-244-3-0-26", CIDR: "10.244.3.0/26", Affinity: "node-2", Allocated: true, Ordinal: 47,
			Handle: "k8s-pod-network.c0ffee", BookedNode: "node-9", BookedPod: "shop/web-b", BookedAt: ipT0.Add(10 * time.Minute),
			Verdict: "booked under node node-9, but pod shop/web-b runs on node-2: Calico's leak collector will free it while the pod runs (ipam-misbooked)"},
		Judged: true,
		Findings: []reportFinding{
			{From: "gw-controller-0", FindingAt: sink.FindingAt{Rule: "ipam-misbooked", Severity: "critical", Message: "pod shop/web-b runs on node node-2 and holds 10.244.3.47, but Calico booked it under node node-9",
				Runbook: "https://github.com/ghostwatch/ghostwatch/blob/main/docs/runbooks/ipam-misbooked.md"}},
			{From: "node-1", FindingAt: sink.FindingAt{Rule: "misdelivered-flow", Severity: "critical", Message: "a flow to shop/web-a reaches shop/web-b"}},
		},
		Members:    []sink.MemberAt{{System: "consul", Cluster: "shop/consul", Name: "web-a", Port: 8301, Status: "failed", Since: ipT0.Add(5 * time.Minute)}},
		Histories:  []historySource{{Replica: "gw-controller-0", Since: ipT0.Add(-time.Hour)}},
		Unanswered: []unanswered{{Replica: "gw-controller-1", Error: "port-forward to ghostwatch/gw-controller-1: context deadline exceeded"}},
	}
	var b bytes.Buffer
	if err := printIP(&b, "table", rep); err != nil {
		t.Fatal(err)
	}
	want := `10.244.3.47: 2 pods, oldest first

FROM                      UNTIL                     POD         UID    NODE    ENDED
2026-11-26T10:00:00.000Z  2026-11-26T10:05:00.000Z  shop/web-a  uid-a  node-1  failed (Evicted)
2026-11-26T10:10:00.000Z  -                         shop/web-b  uid-b  node-2  holds it now

Conntrack flows at 10.244.3.47:
  node-1 (1234 entries read at 2026-11-26T10:30:00.000Z): 1 flow
    backend     tcp 10.244.1.5:40000 -> 10.96.0.10:80  backend 10.244.3.47:8080  ESTABLISHED, expires in 119h59m50s
                to remove exactly it: conntrack -D -p tcp -s 10.244.1.5 -d 10.96.0.10 --sport 40000 --dport 80 -r 10.244.3.47
  node-2 (87 entries read at 2026-11-26T10:30:00.000Z): none

host-local:
  node-2: network kindnet (/run/cni-ipam-state/kindnet): reserved for container c0ffee (eth0) since 2026-11-26T10:10:00.000Z

IPAM record:
  calico: block 10-244-3-0-26 (10.244.3.0/26, affinity node-2), ordinal 47, handle k8s-pod-network.c0ffee, booked under node node-9 for shop/web-b at 2026-11-26T10:10:00.000Z
  booked under node node-9, but pod shop/web-b runs on node-2: Calico's leak collector will free it while the pod runs (ipam-misbooked)

Gossip members at 10.244.3.47:
  consul shop/consul: web-a (port 8301) failed since 2026-11-26T10:05:00.000Z

Findings naming 10.244.3.47:
  [gw-controller-0] critical ipam-misbooked: pod shop/web-b runs on node node-2 and holds 10.244.3.47, but Calico booked it under node node-9
    runbook: https://github.com/ghostwatch/ghostwatch/blob/main/docs/runbooks/ipam-misbooked.md
  [node-1] critical misdelivered-flow: a flow to shop/web-a reaches shop/web-b

Address histories:
  gw-controller-0: since 2026-11-26T09:00:00Z

Did not answer (what they hold is not above):
  gw-controller-1: port-forward to ghostwatch/gw-controller-1: context deadline exceeded
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Bad input is refused before anything is asked.
func TestIPRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ip", "10.244.3"}, `"10.244.3": not an IP address`},
		{[]string{"ip", "10.244.3.47", "-o", "xml"}, `-o "xml": want table, json or yaml`},
		{[]string{"ip", "10.244.3.47", "--history-url", "127.0.0.1:10282"}, `--history-url "127.0.0.1:10282": want http://HOST:PORT`},
		{[]string{"ip", "10.244.3.47", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"ip", "10.244.3.47", "--concurrency", "0"}, "--concurrency 0: must be at least 1"},
		{[]string{"ip", "10.244.3.47", "--flows-url", "user:pw@10.0.0.1:10283"}, `--flows-url "xxxxx@10.0.0.1:10283": want http://HOST:PORT`},
		{[]string{"ip"}, "accepts 1 arg(s), received 0"},
	} {
		code, _, errOut := run(t, "", append(tc.args, "--server=https://127.0.0.1:1")...)
		if code != ExitError || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// Calico's booking of an address, judged against the pods that hold it.
func TestIPJudgesCalicosRecord(t *testing.T) {
	ip := netip.MustParseAddr("10.244.3.47")
	block := func(allocs ...snapshot.Allocation) []snapshot.IPAMBlock {
		return []snapshot.IPAMBlock{{Name: "10-244-3-0-26", CIDR: netip.MustParsePrefix("10.244.3.0/26"), Affinity: "node-2", Allocations: allocs}}
	}
	booked := func(node, pod string) snapshot.Allocation {
		return snapshot.Allocation{Ordinal: 47, IP: ip, HandleID: "k8s-pod-network.c0ffee", Node: node, Namespace: "shop", Pod: pod}
	}
	holder := func(name, node string) snapshot.Pod {
		return snapshot.Pod{Namespace: "shop", Name: name, Node: node, Phase: snapshot.PodRunning, IPs: []netip.Addr{ip}}
	}
	for _, tc := range []struct {
		name    string
		blocks  []snapshot.IPAMBlock
		holders []snapshot.Pod
		want    string
	}{
		{"booked for its holder", block(booked("node-2", "web-b")), []snapshot.Pod{holder("web-b", "node-2")}, "matches the pod that holds it"},
		{"free, held by none", block(), nil, "matches: free, and no pod holds it"},
		{"booked under another node", block(booked("node-9", "web-b")), []snapshot.Pod{holder("web-b", "node-2")}, "booked under node node-9, but pod shop/web-b runs on node-2"},
		{"booked for another pod", block(booked("node-2", "web-a")), []snapshot.Pod{holder("web-b", "node-2")}, "booked for shop/web-a, but pod shop/web-b holds it"},
		{"free under a running pod", block(), []snapshot.Pod{holder("web-b", "node-2")}, "free in block 10-244-3-0-26 while pod shop/web-b holds it"},
		{"booked for a pod gone", block(booked("node-2", "web-a")), nil, "booked for shop/web-a, but no running pod holds it"},
		{"two holders", block(booked("node-2", "web-b")), []snapshot.Pod{holder("web-b", "node-2"), holder("web-c", "node-2")}, "held by 2 pods at once"},
		{"no block", nil, []snapshot.Pod{holder("web-b", "node-2")}, "no Calico block holds it"},
	} {
		if got := judgeCalico(tc.blocks, ip, tc.holders).Verdict; !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A user and password in an address given are never sent, and a redirect
// is not followed.
func TestGetJSONSendsNoCredential(t *testing.T) {
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/x", http.StatusFound)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	base := strings.Replace(srv.URL, "http://", "http://operator:pw-5e3cr3t@", 1)
	var v struct{ OK bool }
	if err := getJSON(context.Background(), base+"/x", &v); err != nil || !v.OK {
		t.Fatalf("%v %+v", err, v)
	}
	err := getJSON(context.Background(), base+"/moved", &v)
	if err == nil || !strings.Contains(err.Error(), "302") || strings.Contains(err.Error(), "pw-5e3cr3t") {
		t.Errorf("a redirect: %v", err)
	}
	if len(auth) != 2 || auth[0] != "" || auth[1] != "" {
		t.Errorf("Authorization sent: %q", auth)
	}
}
