package lab

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A resolver keeps one UDP socket to the DNS ClusterIP and starts asking
// before the node has a rule for the Service (kube-proxy not synced yet).
// Its first datagram makes an entry that the kernel never translates, and
// NAT is decided on the first packet only: once the rule exists, every
// later query still goes to the ClusterIP itself, unanswered. The scan
// reports that entry; deleting exactly it lets the next query take the
// rule, and the resolver gets its answers.
func TestUntranslatedUDPOnTheKernel(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	bed := newBed(t)
	node, err := bed.AddNode("node", netbed.NodeOptions{Addrs: []netip.Prefix{hostPfx(nodeIP)}})
	if err != nil {
		t.Fatal(err)
	}
	// The node's uplink: what is not translated leaves the node, as a
	// real node's default route sends it, and nothing answers.
	upstream := netip.MustParseAddr("10.0.0.254")
	if _, err := bed.AddHost("upstream", node, hostPfx(upstream)); err != nil {
		t.Fatal(err)
	}
	if err := node.Do(func() error {
		return netlink.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4(10, 96, 0, 0), Mask: net.CIDRMask(16, 32)}, Gw: upstream.AsSlice()})
	}); err != nil {
		t.Fatal(err)
	}
	cl := NewCluster(time.Now)
	if err := cl.AddNode(ctx, labNode, nodeIP); err != nil {
		t.Fatal(err)
	}
	if err := cl.AddService(ctx, "kube-system", "kube-dns", "kube-dns", []netip.Addr{cipV4},
		LabPort{Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: 8080}); err != nil {
		t.Fatal(err)
	}
	dnsIP := netip.MustParseAddr("10.244.1.53")
	dns, err := bed.AddHost("dns", node, hostPfx(dnsIP))
	if err != nil {
		t.Fatal(err)
	}
	serveBoth(t, dns, "coredns-0")
	if _, err := cl.AddPod(ctx, "kube-system", "coredns-0", "kube-dns", labNode, dnsIP); err != nil {
		t.Fatal(err)
	}
	resolver, err := bed.AddHost("resolver", node, hostPfx(netip.MustParseAddr("10.244.1.60")))
	if err != nil {
		t.Fatal(err)
	}
	fe := netip.AddrPortFrom(cipV4, 53)
	c, err := resolver.Dial(ctx, "udp", "", fe.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func() (string, error) {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("Q\n")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return strings.TrimSpace(string(buf[:n])), err
	}
	if got, err := ask(); err == nil {
		t.Fatalf("answered %q before the node had a rule", got)
	}
	// kube-proxy syncs: the rule exists now, and a new socket uses it.
	if err := node.SetServices([]netbed.Service{{Proto: snapshot.ProtoUDP, Frontends: []netip.AddrPort{fe},
		Backends: []netip.AddrPort{netip.AddrPortFrom(dnsIP, 8080)}}}); err != nil {
		t.Fatal(err)
	}
	fresh, err := resolver.Dial(ctx, "udp", "", fe.String())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := roundTrip(fresh); got != "coredns-0" {
		t.Fatalf("a new socket through the rule: %q, %v", got, err)
	}
	// The old socket stays stuck on its untranslated entry.
	for range 3 {
		if got, err := ask(); err == nil {
			t.Fatalf("the old socket was answered (%q): its entry was translated after all", got)
		}
	}

	res := scanNode(ctx, cl.Client, node)
	if err := res.Incomplete(); err != nil {
		t.Fatal(err)
	}
	var ghosts []finding.Finding
	for _, f := range res.Findings {
		if f.Evidence["never_translated"] == true {
			ghosts = append(ghosts, f)
		} else {
			t.Errorf("unexpected finding: %s: %s", f.Rule, f.Message)
		}
	}
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	if len(ghosts) != 1 || !strings.HasPrefix(ghosts[0].Subject.Flow, "udp "+netip.AddrPortFrom(local.Addr().Unmap(), local.Port()).String()+" -> "+fe.String()) ||
		ghosts[0].Subject.Service != "kube-system/kube-dns" {
		t.Fatalf("findings: %v", describe(res))
	}

	// The remedy deletes exactly that entry, after its re-check.
	conn, err := openIn(node)()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rules := rule.All(rule.Config{})
	rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID}, remedy.Settings{Budget: 10, BudgetInterval: time.Minute}, &remedy.Flows{Table: conn})
	if err != nil {
		t.Fatal(err)
	}
	rems[0].Recheck = quorumRecheck(t, cl, rules, rule.StaleNATFlowID, res.Snapshot)
	actions, err := rems[0].Apply(ctx, res.Snapshot, ghosts)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 || actions[0].Result != remedy.Done {
		t.Fatalf("actions %+v", actions)
	}
	if got, err := ask(); got != "coredns-0" {
		t.Errorf("after the delete the old socket got %q, %v; want the answer through the rule", got, err)
	}
	if after := scanNode(ctx, cl.Client, node); len(after.Findings) != 0 {
		t.Errorf("after the delete: %v", describe(after))
	}
}
