package lab

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// kube-proxy, without --nodeport-addresses, accepts NodePorts on every
// local address of the node, not only the InternalIP the Node object
// lists. A client that enters through a second address leaves the same
// ghost when its pod dies; the live scan, run in the node with the
// shipped defaults, reads the host's addresses and reports it. So does the
// agent, started before the address was added: it reads them at every
// audit.
func TestRealNodePortOnASecondAddress(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	e.realAgent(t)
	e.eventually(t, time.Minute, "the agent's first audit", func() bool { return e.agentAudits(t) > 0 })
	second := netip.MustParseAddr("198.51.100.7")
	if err := e.node.Net.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: second.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	}); err != nil {
		t.Fatal(err)
	}
	n, err := e.api.CoreV1().Nodes().Get(context.Background(), e.node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Address == second.String() {
			t.Fatalf("the Node lists %s: the test needs an address only the host knows", second)
		}
	}
	e.service(t, "web", "api", 30080)
	backend := e.pod(t, "web", "api-v1", "api", netip.Addr{}, 0)
	client, err := e.bed.AddHost("client", e.node.Net, hostPfx(realClientIP))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := keepAlive(ctx, client, netip.AddrPortFrom(second, 30080))
	answeredBy(t, c, "api-v1", 3)
	if err := e.api.CoreV1().Pods("web").Delete(context.Background(), "api-v1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "web", "api-v1")
	// Judged once the EndpointSlice controller has dropped it: until then
	// a listed, ready endpoint is a live backend.
	e.eventually(t, time.Minute, "api-v1 gone from web/api's slices", func() bool { return !e.inSlices(t, "web", "api", "api-v1") })
	e.eventually(t, time.Minute, "the client's flow still translated to the dead pod", func() bool {
		for _, f := range e.flowsTo(t, backend) {
			if f.Orig.Dst == second {
				return true
			}
		}
		return false
	})
	out := e.scan(t)
	found := false
	for _, f := range out.Findings {
		found = found || (f.Rule == "stale-nat-flow" && f.Subject.IP == backend.String() &&
			f.Evidence["frontend"] == netip.AddrPortFrom(second, 30080).String() && f.Evidence["frontend_kind"] == "NodePort")
	}
	if !found {
		t.Fatalf("the live scan missed the ghost behind the NodePort on %s:\n%s", second, out.Raw)
	}
	e.eventually(t, time.Minute, "the agent reporting the ghost behind the new address", func() bool {
		return e.agentMetric(t, `ghostwatch_findings{rule="stale-nat-flow"`) > 0
	})
}
