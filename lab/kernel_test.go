package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/fresh"
)

// The rules on the real kernel: real flows through real DNAT, read back over
// netlink, judged against the API. For TCP and UDP, three backends each get
// a flow through every frontend (ClusterIP and NodePort, IPv4 and IPv6):
// one stays live, one is draining (terminating, pod still there), one is
// deleted. Only the deleted one's flows are stale.
func TestRulesOnTheKernel(t *testing.T) {
	requireRoot(t)
	for _, proto := range []snapshot.Proto{snapshot.ProtoTCP, snapshot.ProtoUDP} {
		t.Run(proto.String(), func(t *testing.T) { testRulesOnTheKernel(t, proto) })
	}
}

var (
	nodeV6 = netip.MustParseAddr("fd00:50::1")
	cipV4  = netip.MustParseAddr("10.96.0.10")
	cipV6  = netip.MustParseAddr("fd00:96::10")
)

func hostPfx(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func testRulesOnTheKernel(t *testing.T, proto snapshot.Proto) {
	ctx := context.Background()
	bed := newBed(t)
	node, err := bed.AddNode("node", netbed.NodeOptions{Addrs: []netip.Prefix{hostPfx(nodeIP), hostPfx(nodeV6)}})
	if err != nil {
		t.Fatal(err)
	}
	cl := NewCluster(time.Now)
	if err := cl.AddNode(ctx, labNode, nodeIP, nodeV6); err != nil {
		t.Fatal(err)
	}
	if err := cl.AddService(ctx, "ns", "svc", "svc", []netip.Addr{cipV4, cipV6},
		LabPort{Protocol: corev1.Protocol(strings.ToUpper(proto.String())), Port: 80, TargetPort: 8080, NodePort: 30080}); err != nil {
		t.Fatal(err)
	}
	client, err := bed.AddHost("client", node, hostPfx(externalIP), hostPfx(netip.MustParseAddr("2001:db8::10")))
	if err != nil {
		t.Fatal(err)
	}
	type backend struct {
		name   string
		v4, v6 netip.Addr
		host   *netbed.Host
	}
	backends := []*backend{
		{name: "live", v4: netip.MustParseAddr("10.244.1.10"), v6: netip.MustParseAddr("fd00:244::10")},
		{name: "draining", v4: netip.MustParseAddr("10.244.1.11"), v6: netip.MustParseAddr("fd00:244::11")},
		{name: "gone", v4: netip.MustParseAddr("10.244.1.12"), v6: netip.MustParseAddr("fd00:244::12")},
	}
	frontends := []netip.AddrPort{
		netip.AddrPortFrom(cipV4, 80), netip.AddrPortFrom(cipV6, 80),
		netip.AddrPortFrom(nodeIP, 30080), netip.AddrPortFrom(nodeV6, 30080),
	}
	var conns []net.Conn
	for _, b := range backends {
		if b.host, err = bed.AddHost(b.name, node, hostPfx(b.v4), hostPfx(b.v6)); err != nil {
			t.Fatal(err)
		}
		serveBoth(t, b.host, b.name)
		if _, err := cl.AddPod(ctx, "ns", b.name, "svc", labNode, b.v4, b.v6); err != nil {
			t.Fatal(err)
		}
		// Route the service to this backend only, and open one flow
		// through every frontend.
		if err := node.SetServices([]netbed.Service{{Proto: proto, Frontends: frontends,
			Backends: []netip.AddrPort{netip.AddrPortFrom(b.v4, 8080), netip.AddrPortFrom(b.v6, 8080)}}}); err != nil {
			t.Fatal(err)
		}
		for _, fe := range frontends {
			c, err := client.Dial(ctx, proto.String(), "", fe.String())
			if err != nil {
				t.Fatalf("dial %s %s: %v", proto, fe, err)
			}
			if got, err := roundTrip(c); got != b.name {
				t.Fatalf("%s via %s answered %q (%v), want %s", proto, fe, got, err, b.name)
			}
			conns = append(conns, c)
		}
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})

	scan := func() *audit.Result {
		t.Helper()
		res := scanNode(ctx, cl.Client, node)
		if err := res.Incomplete(); err != nil {
			t.Fatal(err)
		}
		if st, _ := res.Snapshot.Source(conntrack.Name); !strings.Contains(st.Detail, "(12 to a Service frontend of node "+labNode+")") {
			t.Fatalf("conntrack read %q, want 12 flows to the service's frontends (3 backends x 4 frontends)", st.Detail)
		}
		return res
	}
	if res := scan(); len(res.Findings) != 0 {
		t.Fatalf("findings with every backend live: %v", describe(res))
	}

	// The rollout: one backend terminating but still there, one deleted.
	if err := cl.TerminatePod(ctx, "ns", "draining"); err != nil {
		t.Fatal(err)
	}
	if err := bed.RemoveHost(backends[2].host); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeletePod(ctx, "ns", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := node.SetServices([]netbed.Service{{Proto: proto, Frontends: frontends,
		Backends: []netip.AddrPort{netip.AddrPortFrom(backends[0].v4, 8080), netip.AddrPortFrom(backends[0].v6, 8080)}}}); err != nil {
		t.Fatal(err)
	}
	res := scan()
	var got []string
	for _, f := range res.Findings {
		if f.Rule != rule.StaleNATFlowID || f.Subject.Service != "ns/svc" || f.Subject.Node != labNode {
			t.Errorf("unexpected finding: %+v", f)
		}
		for fl := range f.Target.(*finding.FlowTarget).Flows.All() {
			got = append(got, fmt.Sprintf("%s via %s", f.Subject.IP, fl.Frontend()))
		}
	}
	sort.Strings(got)
	want := []string{
		"10.244.1.12 via 10.96.0.10:80",
		"10.244.1.12 via 192.168.50.1:30080",
		"fd00:244::12 via [fd00:50::1]:30080",
		"fd00:244::12 via [fd00:96::10]:80",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stale flows found:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// The remedy deletes exactly the four reported flows, nothing else:
	// each read back from the kernel by its tuple, re-checked against the
	// API, deleted by tuple and ID.
	c, err := openIn(node)()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rules := rule.All(rule.Config{})
	rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID}, remedy.Settings{Budget: 10, BudgetInterval: time.Minute}, &remedy.Flows{Table: c})
	if err != nil {
		t.Fatal(err)
	}
	rems[0].Recheck = quorumRecheck(t, cl, rules, rems[0].Rule.ID, res.Snapshot)
	actions, err := rems[0].Apply(ctx, res.Snapshot, res.Findings)
	if err != nil {
		t.Fatal(err)
	}
	acted := 0
	for _, a := range actions {
		if a.Result != remedy.Done {
			t.Errorf("action %s: %s", a.Result, a.Reason)
		}
		acted += a.Acted
	}
	if len(actions) != len(res.Findings) || acted != 4 {
		t.Errorf("%d actions for %d findings deleted %d flows, want 4", len(actions), len(res.Findings), acted)
	}
	after := scanNode(ctx, cl.Client, node)
	if st, _ := after.Snapshot.Source(conntrack.Name); len(after.Findings) != 0 || !strings.Contains(st.Detail, "(8 to a Service frontend") {
		t.Errorf("after the remedy: %d findings, conntrack read %q; want 0 and the 8 live and draining flows to frontends%s",
			len(after.Findings), st.Detail, describe(after))
	}
	for _, f := range after.Snapshot.Conntrack.Flows() {
		if b := f.Reply.Src; b == backends[2].v4 || b == backends[2].v6 {
			t.Errorf("a flow to the deleted pod survived: %s", f.String())
		}
	}
}

// quorumRecheck is the agent's last re-check for the remedy of rule id:
// a quorum read of what the rule names, judged again.
func quorumRecheck(t *testing.T, cl *Cluster, rules []rule.Rule, id string, s *snapshot.Snapshot) remedy.Recheck {
	r, _ := rule.Find(rules, id)
	rc := r.(rule.Rechecker)
	return func(ctx context.Context, fs []finding.Finding) []error {
		var q snapshot.Query
		for _, f := range fs {
			q.Add(rc.RecheckQuery(s, f))
		}
		k, err := fresh.Quorum(ctx, cl.Client, q)
		if err != nil {
			t.Error(err)
			errs := make([]error, len(fs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		return rc.Recheck(&snapshot.Snapshot{NodeName: labNode, Kube: k}, fs)
	}
}

func describe(r *audit.Result) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString("\n  " + f.Rule + ": " + f.Message)
	}
	return b.String()
}

// serveBoth answers TCP lines and UDP datagrams on :8080 with name.
func serveBoth(t *testing.T, h *netbed.Host, name string) {
	t.Helper()
	ln, err := h.Listen("tcp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	go serve(ln, name)
	pc, err := h.ListenPacket("udp", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	go serveDatagrams(pc, name)
}

func roundTrip(c net.Conn) (string, error) {
	c.SetDeadline(time.Now().Add(poll.Patience))
	if _, err := c.Write([]byte("GET\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}
