package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The end-to-end tests run ghostwatch against the Kubernetes users run: a
// real kube-apiserver and EndpointSlice controller, a real kube-proxy in a
// node network namespace, the real conntrack table. They need the binaries
// scripts/kube-binaries.sh builds ($GHOSTWATCH_KUBE_BIN) and skip without
// (fail under CI).

// realEnv is one control plane, one node with kube-proxy and the kubelet
// stand-in, and the agent's RBAC from deploy/agent.
type realEnv struct {
	cp      *controlplane.ControlPlane
	bed     *netbed.Bed
	node    *controlplane.Node
	kubelet *controlplane.Kubelet
	api     kubernetes.Interface
}

var (
	realNodeIP   = netip.MustParseAddr("192.168.60.1")
	realPodCIDR  = netip.MustParsePrefix("10.244.7.0/24")
	realClientIP = netip.MustParseAddr("203.0.113.20")
)

// proxyModes are the kube-proxy modes the end-to-end tests of the flow
// rules run in: every one this kernel runs (IPVS needs the ip_vs module,
// which the kernel the suite runs on lacks; docs/agent.md says what
// ghostwatch sees under it).
var proxyModes = []controlplane.ProxyMode{controlplane.ProxyIPTables, controlplane.ProxyNFTables}

// realBinaries is the control plane's binaries directory; the test is
// root-only, and skips (fails under CI) when they are not built.
func realBinaries(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	bin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func newRealEnv(t *testing.T, mode controlplane.ProxyMode) *realEnv {
	t.Helper()
	return newRealEnvWith(t, mode, controlplane.Options{}, netbed.NodeOptions{ConntrackTimestamp: true})
}

// startControlPlane starts a control plane with o (Bin is set here) until
// the test ends, its logs' tails printed when the test fails; ctx ends
// with the test.
func startControlPlane(t *testing.T, o controlplane.Options) (context.Context, *controlplane.ControlPlane) {
	t.Helper()
	o.Bin = realBinaries(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range cp.Logs() {
				logTail(t, l)
			}
		}
		cp.Stop()
	})
	return ctx, cp
}

// newRealEnvWith is newRealEnv with control-plane options (Bin is set
// here) and the node's network options.
func newRealEnvWith(t *testing.T, mode controlplane.ProxyMode, o controlplane.Options, nodeNet netbed.NodeOptions) *realEnv {
	t.Helper()
	e := newRealNode(t, mode, o, nodeNet)
	ms, err := deploy.AgentInstall()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := createObject(context.Background(), e.cp.Admin, m.Object); err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
	}
	return e
}

// newRealNode is newRealEnvWith without ghostwatch installed.
func newRealNode(t *testing.T, mode controlplane.ProxyMode, o controlplane.Options, nodeNet netbed.NodeOptions) *realEnv {
	t.Helper()
	ctx, cp := startControlPlane(t, o)
	bed, err := netbed.New(prefix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	node, err := cp.AddNode(ctx, bed, "node-1", controlplane.NodeOptions{
		IP: realNodeIP, PodCIDR: realPodCIDR, Mode: mode, NetOptions: nodeNet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, node.ProxyLog())
		}
		node.Stop()
	})
	kctx, kcancel := context.WithCancel(ctx)
	e := &realEnv{cp: cp, bed: bed, node: node, api: cp.Admin}
	e.kubelet = node.RunKubelet(kctx, bed, serveWorkload)
	t.Cleanup(func() {
		kcancel()
		for _, err := range e.kubelet.Errors() {
			t.Errorf("kubelet stand-in: %v", err)
		}
	})
	return e
}

// addNode adds a second node with its kube-proxy and kubelet stand-in,
// joined to the first by an uplink that routes each node's pods and
// address to the other (the network between two machines).
func (e *realEnv) addNode(t *testing.T, name string, ip netip.Addr, podCIDR netip.Prefix) *controlplane.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n, err := e.cp.AddNode(ctx, e.bed, name, controlplane.NodeOptions{
		IP: ip, PodCIDR: podCIDR, NetOptions: netbed.NodeOptions{ConntrackTimestamp: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, n.ProxyLog())
		}
		n.Stop()
	})
	if _, err := e.bed.ConnectNodes(
		e.node.Net, netbed.Uplink{Addr: netip.MustParsePrefix("172.30.0.1/30"), Routes: []netip.Prefix{podCIDR, hostPfx(ip)}},
		n.Net, netbed.Uplink{Addr: netip.MustParsePrefix("172.30.0.2/30"), Routes: []netip.Prefix{realPodCIDR, hostPfx(realNodeIP)}},
	); err != nil {
		t.Fatal(err)
	}
	k := n.RunKubelet(ctx, e.bed, serveWorkload)
	t.Cleanup(func() {
		for _, err := range k.Errors() {
			t.Errorf("kubelet stand-in on %s: %v", name, err)
		}
	})
	return n
}

func logTail(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("%s ends:\n%s", path, strings.Join(lines, "\n"))
}

// serveWorkload answers the lab's request protocol with the pod's name on
// TCP 8080, and echoes the pod's name to every UDP datagram on 8053.
func serveWorkload(h *netbed.Host, pod *corev1.Pod) (func(), error) {
	ip := h.Addrs[0]
	ln, err := h.Listen("tcp", netip.AddrPortFrom(ip, 8080).String())
	if err != nil {
		return nil, err
	}
	go serve(ln, pod.Name)
	pc, err := h.ListenPacket("udp", netip.AddrPortFrom(ip, 8053).String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	go serveDatagrams(pc, pod.Name)
	return func() { ln.Close(); pc.Close() }, nil
}

// service creates ns/name selecting app=name on port 80 (TCP to 8080,
// and UDP 53 to 8053), a NodePort when nodePort is set. A NodePort keeps
// the client's address (externalTrafficPolicy Local): with the default
// policy kube-proxy masquerades the flow out of the backend's veth, and the
// kernel deletes masqueraded entries when that device goes away, so a pod
// on the same node leaves no ghost. In production the backend sits behind
// another node's uplink, which stays up; Local reproduces that on one node.
func (e *realEnv) service(t *testing.T, ns, name string, nodePort int32) *corev1.Service {
	t.Helper()
	return e.serviceWith(t, ns, name, nodePort, corev1.ServiceExternalTrafficPolicyLocal)
}

// serviceWith is service with the given externalTrafficPolicy for a
// NodePort.
func (e *realEnv) serviceWith(t *testing.T, ns, name string, nodePort int32, policy corev1.ServiceExternalTrafficPolicy) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: nodePort},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(8053)},
		}},
	}
	if nodePort != 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = policy
	}
	out, err := e.api.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pod creates ns/name labelled app=app on the node and waits until the
// Service's EndpointSlice lists it ready. ip, when valid, asks the kubelet
// stand-in for that address.
func (e *realEnv) pod(t *testing.T, ns, name, app string, ip netip.Addr, grace int64) netip.Addr {
	t.Helper()
	return e.podOn(t, e.node.Name, ns, name, app, ip, grace)
}

// podOn is pod on the named node.
func (e *realEnv) podOn(t *testing.T, node, ns, name, app string, ip netip.Addr, grace int64) netip.Addr {
	t.Helper()
	e.createPod(t, node, ns, name, map[string]string{"app": app}, ip, grace)
	var got netip.Addr
	e.eventually(t, time.Minute, fmt.Sprintf("pod %s/%s ready in an EndpointSlice of %s", ns, name, app), func() bool {
		got = e.endpoint(t, ns, app, name, func(ep discoveryv1.Endpoint) bool {
			return ep.Conditions.Ready != nil && *ep.Conditions.Ready
		})
		return got.IsValid()
	})
	return got
}

// createPod creates ns/name on node with labels; ip, when valid, asks the
// kubelet stand-in for that address.
func (e *realEnv) createPod(t *testing.T, node, ns, name string, labels map[string]string, ip netip.Addr, grace int64) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "workload", Image: "lab"}}},
	}
	if ip.IsValid() {
		p.Annotations = map[string]string{controlplane.IPAnnotation: ip.String()}
	}
	if _, err := e.api.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// endpoint is the address of pod in the EndpointSlices of ns/svc for which
// cond holds, or the zero Addr.
func (e *realEnv) endpoint(t *testing.T, ns, svc, pod string, cond func(discoveryv1.Endpoint) bool) netip.Addr {
	t.Helper()
	slices, err := e.api.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Name == pod && cond(ep) && len(ep.Addresses) > 0 {
				return netip.MustParseAddr(ep.Addresses[0])
			}
		}
	}
	return netip.Addr{}
}

// gone waits until the pod object no longer exists.
func (e *realEnv) gone(t *testing.T, ns, name string) {
	t.Helper()
	e.eventually(t, time.Minute, fmt.Sprintf("pod %s/%s gone", ns, name), func() bool {
		_, err := e.api.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// eventually waits with poll.Until for cond to hold, and fails fast when a
// control-plane or node process dies meanwhile. It waits poll.Patience, or
// deadline when that is longer: deadline is how long the condition may
// take by design on an idle machine (a grace period and more), never a
// bound a busy one would have to keep.
func (e *realEnv) eventually(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, max(deadline, poll.Patience), what, func() bool {
		if cond() {
			return true
		}
		if err := errors.Join(e.cp.Check(), e.node.Check()); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return false
	})
}

// flowsTo returns the node's conntrack entries translated to backend.
func (e *realEnv) flowsTo(t *testing.T, backend netip.Addr) []snapshot.Flow {
	t.Helper()
	var out []snapshot.Flow
	for _, f := range e.dnatFlows(t) {
		if f.Reply.Src == backend {
			out = append(out, f)
		}
	}
	return out
}

var (
	ghostwatchOnce sync.Once
	ghostwatchBin  string
	ghostwatchErr  error
)

// ghostwatchBinary builds the ghostwatch command once per test run.
func ghostwatchBinary(t *testing.T) string {
	t.Helper()
	ghostwatchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ghostwatch-bin-")
		if err != nil {
			ghostwatchErr = err
			return
		}
		ghostwatchBin = filepath.Join(dir, "ghostwatch")
		_, file, _, _ := goruntime.Caller(0)
		cmd := exec.Command("go", "build", "-o", ghostwatchBin, "./cmd/ghostwatch")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			ghostwatchErr = fmt.Errorf("go build ./cmd/ghostwatch: %v\n%s", err, out)
		}
	})
	if ghostwatchErr != nil {
		t.Fatal(ghostwatchErr)
	}
	return ghostwatchBin
}

// runUntilCleanup starts cmd, one of ghostwatch's long-running commands
// (named what in messages), with its output in logs, and stops it with
// SIGINT when the test ends: it must then exit 0 within 30 seconds. done
// receives its exit.
func runUntilCleanup(t *testing.T, what string, cmd *exec.Cmd) (logs *bytes.Buffer, done chan error) {
	t.Helper()
	return startUntilCleanup(t, what, cmd, cmd.Start)
}

// startUntilCleanup is runUntilCleanup with cmd started by start (in a
// network namespace, say).
func startUntilCleanup(t *testing.T, what string, cmd *exec.Cmd, start func() error) (logs *bytes.Buffer, done chan error) {
	t.Helper()
	logs = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", what, logs.String())
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGINT; its log:\n%s", what, err, logs.String())
			}
		case <-time.After(poll.Patience):
			cmd.Process.Kill()
			t.Errorf("%s did not stop within %v of SIGINT", what, poll.Patience)
		}
	})
	return logs, done
}

// realAgent runs `ghostwatch agent` in the node's namespace, as the
// DaemonSet would: the agent's own RBAC identity, CAP_NET_ADMIN, the
// stale-nat-flow remedy with the given grace. It returns once /readyz
// answers 200; the agent is stopped with SIGTERM at cleanup, and must exit 0.
func (e *realEnv) realAgent(t *testing.T, extra ...string) *bytes.Buffer {
	t.Helper()
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserAgent)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"netns", "exec", e.node.Net.Name(), ghostwatchBinary(t), "agent",
		"--kubeconfig=" + kubeconfig, "--node-name=" + e.node.Name, "--listen=127.0.0.1:9808",
		"--log-format=text", "--log-level=debug", "--audit-interval=10s"}, extra...)
	logs, done := runUntilCleanup(t, "agent", exec.Command("ip", args...))
	hc := e.node.Net.HTTPClient(time.Second)
	e.eventually(t, time.Minute, "agent ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("agent exited: %v; its log:\n%s", err, logs.String())
		default:
		}
		resp, err := hc.Get("http://127.0.0.1:9808/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return logs
}
