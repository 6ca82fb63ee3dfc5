package lab

import (
	"context"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A Service uninstalled together with its pod while a client holds a TCP
// and a UDP flow to it: kube-proxy removes the rules, the kernel keeps
// translating the flows to an address nothing holds. The scan reports them
// as flows to a deleted Service, told by the cluster's ServiceCIDR and the
// absence of a Service at the address, and the agent, with the shipped
// settings but its grace at the floor, deletes them after a quorum read of
// the IPAddress that would book the address to a Service again.
func TestRealDeletedServiceLeavesGhosts(t *testing.T) {
	for _, mode := range proxyModes {
		t.Run(string(mode), func(t *testing.T) { testRealDeletedServiceLeavesGhosts(t, mode) })
	}
}

// testRealDeletedServiceLeavesGhosts is TestRealDeletedServiceLeavesGhosts in one kube-proxy mode.
func testRealDeletedServiceLeavesGhosts(t *testing.T, mode controlplane.ProxyMode) {
	e := newRealEnv(t, mode)
	ctx := context.Background()
	svc := e.service(t, "cache", "redis", 0)
	backend := e.pod(t, "cache", "redis-0", "redis", netip.Addr{}, 0)
	clusterIP := netip.MustParseAddr(svc.Spec.ClusterIP)

	// The assumptions the rule and its re-check rest on, on this API
	// server: the default ServiceCIDR holds the address, and the
	// allocator booked it as an IPAddress pointing to the Service.
	cidrs, err := e.api.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil || len(cidrs.Items) == 0 {
		t.Fatalf("ServiceCIDRs: %v, %d", err, len(cidrs.Items))
	}
	booked, err := e.api.NetworkingV1().IPAddresses().Get(ctx, clusterIP.String(), metav1.GetOptions{})
	if err != nil || booked.Spec.ParentRef == nil || booked.Spec.ParentRef.Resource != "services" || booked.Spec.ParentRef.Name != "redis" {
		t.Fatalf("IPAddress %s: %v %+v", clusterIP, err, booked)
	}

	app, err := e.bed.AddHost("app", e.node.Net, hostPfx(netip.MustParseAddr("10.244.7.250")))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tcpc := keepAlive(cctx, app, netip.AddrPortFrom(clusterIP, 80))
	udpc := udpClient(cctx, t, app, netip.AddrPortFrom(clusterIP, 53))
	answeredBy(t, tcpc, "redis-0", 3)
	answeredBy(t, udpc, "redis-0", 3)

	// helm uninstall: the Service and its pod go together.
	if err := e.api.CoreV1().Services("cache").Delete(ctx, "redis", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.api.CoreV1().Pods("cache").Delete(ctx, "redis-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "cache", "redis-0")
	e.eventually(t, time.Minute, "the IPAddress released", func() bool {
		_, err := e.api.NetworkingV1().IPAddresses().Get(ctx, clusterIP.String(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// The client keeps its connection: once kube-proxy has removed the
	// rules, every packet still goes to the dead backend.
	var tcpGhost snapshot.Flow
	e.eventually(t, time.Minute, "a TCP flow to the deleted Service still translated", func() bool {
		for _, f := range e.flowsTo(t, backend) {
			if f.Proto == snapshot.ProtoTCP && f.Orig.Dst == clusterIP {
				tcpGhost = f
				return true
			}
		}
		return false
	})
	udpLeft := 0
	for _, f := range e.flowsTo(t, backend) {
		if f.Proto == snapshot.ProtoUDP {
			udpLeft++
		}
	}
	t.Logf("after the uninstall: TCP ghost %s; %d UDP entries to %s left (kube-proxy clears UDP itself)", tcpGhost.String(), udpLeft, backend)

	out := e.scan(t)
	found := false
	for _, f := range out.Findings {
		if f.Rule == "stale-nat-flow" && f.Subject.IP == backend.String() && f.Evidence["service_gone"] == true {
			found = found || f.Subject.Flow == tcpGhost.String()
		}
	}
	if !found {
		t.Fatalf("the scan does not report the TCP flow to the deleted Service: %+v", out.Findings)
	}

	e.realAgent(t, "--remedy=stale-nat-flow", minGraceFlag)
	e.eventually(t, time.Minute, "the agent deleting every flow to the dead backend", func() bool {
		return len(e.flowsTo(t, backend)) == 0
	})
	if n := e.agentMetric(t, `ghostwatch_remedy_actions_total{result="done",rule="stale-nat-flow"`); n < 1 {
		t.Errorf("the agent counted %d deletions", n)
	}
	// With no Service left, the Event goes on the node.
	e.eventually(t, 30*time.Second, "an Event on the node", func() bool {
		return e.hasEvent(t, "default", "Node", e.node.Name, "StaleFlowDeleted")
	})
}
