package lab

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
)

// A blue/green switch by selector on the real control plane, on a node
// without conntrack timestamps (the kernel's default): a client holds a
// connection to blue when shop/web's selector moves to green, and blue
// keeps running. The connection still reaches the very pod it was opened
// to: `ghostwatch scan` reports nothing critical, and the agent, remedy
// on, leaves it alone through its grace period and a full audit. Then blue
// is deleted: the flow is a stale-nat-flow, and the agent deletes it.
func TestRealBlueGreenSwitchIsNoGhost(t *testing.T) {
	e := newRealEnvWith(t, controlplane.ProxyIPTables, controlplane.Options{}, netbed.NodeOptions{})
	ctx := context.Background()
	const ns = "shop"
	e.service(t, ns, "web", 30080) // creates the namespace; its selector is replaced below
	svc, err := e.api.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "web", "version": "blue"}
	svc.Spec.Ports = []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}}
	if _, err := e.api.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	blueIP := e.versionPod(t, ns, "web-blue", "blue")
	e.versionPod(t, ns, "web-green", "green")
	e.eventually(t, time.Minute, "blue, and only blue, ready in web's slices", func() bool {
		return e.inSlices(t, ns, "web", "web-blue") && !e.inSlices(t, ns, "web", "web-green")
	})
	logs := e.realAgent(t, "--remedy=stale-nat-flow", minGraceFlag)

	client, err := e.bed.AddHost("client", e.node.Net, hostPfx(realClientIP))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := keepAlive(cctx, client, netip.AddrPortFrom(realNodeIP, 30080))
	answeredBy(t, c, "web-blue", 3)
	flows := e.flowsTo(t, blueIP)
	if len(flows) != 1 || !flows[0].Start.IsZero() {
		t.Fatalf("want one flow to blue without a start time (timestamps off), have %v", flows)
	}

	// The switch.
	if svc, err = e.api.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector["version"] = "green"
	if _, err := e.api.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(t, time.Minute, "green, and only green, in web's slices", func() bool {
		return e.inSlices(t, ns, "web", "web-green") && !e.inSlices(t, ns, "web", "web-blue")
	})
	switched := time.Now()
	for _, f := range e.scan(t).Findings {
		if f.Severity == "critical" || f.Subject.IP == blueIP.String() {
			t.Errorf("after the switch: %s %s on %s", f.Severity, f.Rule, f.Subject.IP)
		}
	}
	// Long enough for the agent to have acted: its grace period has passed
	// since the switch and a full audit (every 10s here) ran after that.
	audits := e.agentMetric(t, `ghostwatch_audits_total{outcome="complete",trigger="timer"}`)
	e.eventually(t, time.Minute, "a full audit more than the grace period after the switch", func() bool {
		return time.Since(switched) > remedy.MinGrace && e.agentMetric(t, `ghostwatch_audits_total{outcome="complete",trigger="timer"}`) > audits+1
	})
	if got := e.flowsTo(t, blueIP); len(got) != 1 || got[0].ID != flows[0].ID {
		t.Errorf("the agent touched the connection to the running blue pod: before %v, now %v; agent log:\n%s", flows, got, logs)
	}
	from := len(c.since(0))
	answeredBy(t, c, "web-blue", 3)
	if _, failed := count(c.since(from)); failed != 0 {
		t.Errorf("the client of the running blue pod saw %d failures", failed)
	}

	// Blue goes: now the flow is a ghost.
	if err := e.api.CoreV1().Pods(ns).Delete(ctx, "web-blue", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.gone(t, ns, "web-blue")
	e.eventually(t, 30*time.Second, "the agent deleting the flow to the deleted blue pod", func() bool {
		return len(e.flowsTo(t, blueIP)) == 0
	})
	e.eventually(t, 10*time.Second, "a StaleFlowDeleted Event on shop/web", func() bool {
		return e.hasEvent(t, ns, "Service", "web", "StaleFlowDeleted")
	})
	answeredBy(t, c, "web-green", 3)
}

// inSlices reports whether pod is in an EndpointSlice of ns/svc, in any
// state.
func (e *realEnv) inSlices(t *testing.T, ns, svc, pod string) bool {
	t.Helper()
	return e.endpoint(t, ns, svc, pod, func(discoveryv1.Endpoint) bool { return true }).IsValid()
}

// versionPod creates ns/name labelled app=web, version=version, and
// returns its IP once the kubelet stand-in runs it.
func (e *realEnv) versionPod(t *testing.T, ns, name, version string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	e.createPod(t, e.node.Name, ns, name, map[string]string{"app": "web", "version": version}, netip.Addr{}, 0)
	var ip netip.Addr
	e.eventually(t, time.Minute, fmt.Sprintf("pod %s/%s running", ns, name), func() bool {
		got, err := e.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
			return false
		}
		ip = netip.MustParseAddr(got.Status.PodIP)
		return true
	})
	return ip
}
