package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Options tunes the conntrack scenarios. The zero value is usable.
type Options struct {
	// Out receives the timeline; nil prints nothing.
	Out io.Writer
	// Prefix names every namespace the lab creates; default "gw-lab".
	Prefix string
	// ReuseIP gives the new pod the old pod's IP (a Recreate rollout on a
	// small pod CIDR) instead of a new one.
	ReuseIP bool
	// Observe is how long the client is watched after its backend died
	// before the lab gives up waiting for it to recover; default 15s.
	Observe time.Duration
	// Interval between the client's requests; default 100ms.
	Interval time.Duration
	// RequestTimeout for each request; default 1s.
	RequestTimeout time.Duration
	// Steady is how long the client runs before the rollout; default 3s,
	// so that the flow provably predates the pods created after it.
	Steady time.Duration
	// WithAgent plays the incident twice, without and then with the agent
	// removing stale flows, and reports both error windows.
	WithAgent bool
	// Grace is the agent's grace period in the lab; default 200ms.
	Grace time.Duration
	// ControlPlane is ControlPlaneMemory (the default) or ControlPlaneReal.
	ControlPlane string
	// KubeBin is the directory of the real control plane's binaries;
	// default $GHOSTWATCH_KUBE_BIN.
	KubeBin string
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = "gw-lab"
	}
	if o.Observe <= 0 {
		o.Observe = 15 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = time.Second
	}
	if o.Steady <= 0 {
		o.Steady = 3 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 200 * time.Millisecond
	}
	if o.ControlPlane == "" {
		o.ControlPlane = ControlPlaneMemory
	}
}

// Result is what a scenario measured, as `lab -o json` prints it.
type Result struct {
	Scenario string `json:"scenario"`
	Runs     []Run  `json:"runs"`
}

// Run is one pass of a scenario.
type Run struct {
	// Agent is whether the agent was clearing ghosts during the run.
	Agent bool `json:"agent"`
	// ErrorWindowSeconds is from the client's first failed request after the
	// rollout to its first success after that, or to the end of the
	// observation when it never recovered.
	ErrorWindowSeconds float64 `json:"error_window_seconds"`
	// FailedRequests counts the requests that failed in that window.
	FailedRequests int `json:"failed_requests"`
	// Recovered is false when the client still failed when observation ended.
	Recovered bool `json:"recovered"`
	// Findings are what ghostwatch reported while the client was failing.
	Findings []finding.Finding `json:"findings"`
	// GhostStillMapped is true when the kernel still translated the
	// client's connection to the dead backend when the run ended.
	GhostStillMapped bool `json:"ghost_still_mapped"`
}

// scenario describes one incident: who the client is and which frontend it
// uses.
type scenario struct {
	name, title string
	namespace   string
	service     string
	app         string
	clusterIP   netip.Addr
	port        uint16
	targetPort  uint16
	nodePort    uint16
	// external is true for a client outside the cluster reaching the
	// NodePort (seed 004); false for a client pod using the ClusterIP
	// (seed 001).
	external bool
}

var (
	nodeIP       = netip.MustParseAddr("192.168.50.1")
	externalIP   = netip.MustParseAddr("203.0.113.10")
	clientPodIP  = netip.MustParseAddr("10.244.1.50")
	oldBackendIP = netip.MustParseAddr("10.244.1.100")
	newBackendIP = netip.MustParseAddr("10.244.1.101")
)

const labNode = "lab-node"

// ConntrackDeploy rebuilds seed 004: a keep-alive client outside the cluster
// reaches a Deployment through a NodePort; a rolling update replaces the
// pod; the kernel keeps translating the client's connection to the deleted
// pod.
func ConntrackDeploy(ctx context.Context, o Options) (*Result, error) {
	return runScenario(ctx, o, scenario{
		name: "conntrack-deploy", title: "seed 004: a rolling deploy behind a NodePort, a keep-alive client",
		namespace: "web", service: "api", app: "api",
		clusterIP: netip.MustParseAddr("10.96.0.80"), port: 80, targetPort: 8080, nodePort: 30080,
		external: true,
	})
}

// ConntrackPool rebuilds seed 001: a client pod holds a pooled, long-lived
// connection to a database behind a ClusterIP; the database pod is
// replaced; the pooled connection stays pinned to the deleted pod.
func ConntrackPool(ctx context.Context, o Options) (*Result, error) {
	return runScenario(ctx, o, scenario{
		name: "conntrack-pool", title: "seed 001: a pooled connection to a ClusterIP backend that is deleted",
		namespace: "db", service: "postgres", app: "postgres",
		clusterIP: netip.MustParseAddr("10.96.100.50"), port: 5432, targetPort: 5432,
	})
}

func runScenario(ctx context.Context, o Options, sc scenario) (*Result, error) {
	o.defaults()
	switch o.ControlPlane {
	case ControlPlaneMemory:
	case ControlPlaneReal:
		if o.KubeBin == "" {
			bin, err := controlplane.FindBinaries()
			if err != nil {
				return nil, fmt.Errorf("control plane %q: %w", o.ControlPlane, err)
			}
			o.KubeBin = bin
		}
	default:
		return nil, fmt.Errorf("control plane %q: want %s or %s", o.ControlPlane, ControlPlaneMemory, ControlPlaneReal)
	}
	res := &Result{Scenario: sc.name}
	modes := []bool{false}
	if o.WithAgent {
		modes = append(modes, true)
	}
	tl := newTimeline(o.Out, time.Now())
	for _, withAgent := range modes {
		run, err := runOnce(ctx, o, sc, tl, withAgent)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
	}
	if len(res.Runs) > 1 {
		tl.section("without and with the agent")
		for _, r := range res.Runs {
			who := "without the agent"
			if r.Agent {
				who = "with the agent   "
			}
			tl.logf("result", "%s: errors for %6.3fs, %d failed requests, recovered: %v", who, r.ErrorWindowSeconds, r.FailedRequests, r.Recovered)
		}
	}
	return res, nil
}

// runOnce builds the lab, plays the incident once, and removes the lab.
func runOnce(ctx context.Context, o Options, sc scenario, tl *timeline, withAgent bool) (run *Run, err error) {
	bed, err := netbed.New(o.Prefix)
	if err != nil {
		return nil, err
	}
	how := "without the agent"
	if withAgent {
		how = "with the agent removing stale flows"
	}
	tl.section("ghostwatch lab %s — %s — %s", sc.name, sc.title, how)
	defer func() {
		if ctx.Err() != nil {
			err = fmt.Errorf("lab %s interrupted: %w", sc.name, ctx.Err())
		}
		if cerr := bed.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("cleaning up the lab: %w", cerr)
		}
		tl.logf("lab", "removed every namespace, link and rule it created")
	}()
	e, err := newEnv(ctx, o, bed, sc, tl)
	if err != nil {
		return nil, err
	}
	if e.real != nil {
		defer e.real.close()
	}
	if withAgent {
		stop, err := e.startAgent(ctx, o)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	run, err = e.replace(ctx, o)
	if err != nil {
		return nil, err
	}
	run.Agent = withAgent
	return run, nil
}

// env is one built lab: the node, the API, the pods and the client.
type env struct {
	bed     *netbed.Bed
	node    *netbed.Node
	cluster *Cluster
	sc      scenario
	tl      *timeline
	pods    map[string]*netbed.Host
	client  *netbed.Host
	// firstConn is the client's first connection (its source address),
	// the one the incident strands.
	firstConn netip.AddrPort
	// real, when set, is the real control plane: kube-proxy routes, the
	// kubelet stand-in runs the pods, cluster is unused.
	real *realWorld
}

func newEnv(ctx context.Context, o Options, bed *netbed.Bed, sc scenario, tl *timeline) (*env, error) {
	if o.ControlPlane == ControlPlaneReal {
		rw, err := newRealWorld(ctx, o, bed, sc, tl)
		if err != nil {
			return nil, err
		}
		e := &env{bed: bed, node: rw.node.Net, sc: sc, tl: tl, pods: map[string]*netbed.Host{}, real: rw}
		e.logService()
		return e, nil
	}
	node, err := bed.AddNode("node", netbed.NodeOptions{
		Addrs:              []netip.Prefix{netip.PrefixFrom(nodeIP, 32)},
		ConntrackTimestamp: true,
	})
	if err != nil {
		return nil, err
	}
	e := &env{bed: bed, node: node, cluster: NewCluster(time.Now), sc: sc, tl: tl, pods: map[string]*netbed.Host{}}
	if err := e.cluster.AddNode(ctx, labNode, nodeIP); err != nil {
		return nil, err
	}
	if err := e.cluster.AddService(ctx, sc.namespace, sc.service, sc.app, []netip.Addr{sc.clusterIP},
		LabPort{Protocol: corev1.ProtocolTCP, Port: int32(sc.port), TargetPort: int32(sc.targetPort), NodePort: int32(sc.nodePort)}); err != nil {
		return nil, err
	}
	tl.logf("node", "namespace %s, address %s, conntrack timestamps on", node.Name(), nodeIP)
	e.logService()
	return e, nil
}

func (e *env) logService() {
	sc := e.sc
	if sc.nodePort != 0 {
		e.tl.logf("api", "Service %s/%s: ClusterIP %s:%d, NodePort %s:%d -> targetPort %d", sc.namespace, sc.service,
			sc.clusterIP, sc.port, nodeIP, sc.nodePort, sc.targetPort)
	} else {
		e.tl.logf("api", "Service %s/%s: ClusterIP %s:%d -> targetPort %d", sc.namespace, sc.service, sc.clusterIP, sc.port, sc.targetPort)
	}
}

// kube is the client the scans and the agent read the cluster with.
func (e *env) kube() kubernetes.Interface {
	if e.real != nil {
		return e.real.agent
	}
	return e.cluster.Client
}

// frontend is where the client connects.
func (e *env) frontend() netip.AddrPort {
	if e.sc.external {
		return netip.AddrPortFrom(nodeIP, e.sc.nodePort)
	}
	return netip.AddrPortFrom(e.sc.clusterIP, e.sc.port)
}

// startPod creates the pod's namespace, serves in it, and registers it.
func (e *env) startPod(ctx context.Context, name string, ip netip.Addr) error {
	if e.real != nil {
		return e.real.startPod(ctx, e.sc, name, ip)
	}
	h, err := e.bed.AddHost(name, e.node, netip.PrefixFrom(ip, 32))
	if err != nil {
		return err
	}
	ln, err := h.Listen("tcp", netip.AddrPortFrom(ip, e.sc.targetPort).String())
	if err != nil {
		return err
	}
	go serve(ln, name)
	if _, err := e.cluster.AddPod(ctx, e.sc.namespace, name, e.sc.app, labNode, ip); err != nil {
		return err
	}
	e.pods[name] = h
	e.tl.logf("kubelet", "pod %s/%s running at %s, serving :%d", e.sc.namespace, name, ip, e.sc.targetPort)
	return nil
}

// route points the service at the given backends, as kube-proxy does when
// the EndpointSlice changes.
func (e *env) route(ctx context.Context, backends ...netip.Addr) error {
	if e.real != nil {
		if err := e.real.routed(ctx, e.sc, backends); err != nil {
			return err
		}
		e.tl.logf("proxy", "kube-proxy's rules now send new connections to %v", backends)
		return nil
	}
	svc := netbed.Service{Proto: snapshot.ProtoTCP, Frontends: []netip.AddrPort{netip.AddrPortFrom(e.sc.clusterIP, e.sc.port)}}
	if e.sc.nodePort != 0 {
		svc.Frontends = append(svc.Frontends, netip.AddrPortFrom(nodeIP, e.sc.nodePort))
	}
	var names []string
	for _, b := range backends {
		svc.Backends = append(svc.Backends, netip.AddrPortFrom(b, e.sc.targetPort))
		names = append(names, b.String())
	}
	if err := e.node.SetServices([]netbed.Service{svc}); err != nil {
		return err
	}
	if len(names) == 0 {
		names = []string{"none (new connections are rejected)"}
	}
	e.tl.logf("proxy", "DNAT rules now send new connections to %s", strings.Join(names, ", "))
	return nil
}

// scan runs one ghostwatch audit of the node, through the same kube source
// and conntrack reader as production.
func (e *env) scan(ctx context.Context, why string) (*audit.Result, error) {
	res := scanNode(ctx, e.kube(), e.node)
	if err := res.Incomplete(); err != nil {
		return nil, fmt.Errorf("lab scan: %w", err)
	}
	if len(res.Findings) == 0 {
		n := res.Snapshot.Conntrack.Matched
		if why == "" {
			e.tl.logf("scan", "no ghosts (%d flow(s) to service frontends checked)", n)
		} else {
			e.tl.logf("scan", "no ghosts (%s; %d flow(s) to service frontends checked)", why, n)
		}
	}
	for _, f := range res.Findings {
		e.tl.logf("scan", "%s %s: %s", strings.ToUpper(f.Severity.String()), f.Rule, f.Message)
	}
	return res, nil
}

// showKernel prints what the node's conntrack table maps the client's
// connections to, and reports whether the client's first connection (from
// firstConn) is still translated to the old backend in a state that can
// carry traffic.
func (e *env) showKernel(ctx context.Context) (ghost bool, err error) {
	fe := e.frontend()
	var lines []string
	err = e.node.Do(func() error {
		c, err := conntrack.Open()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Dump(ctx, func(f *snapshot.Flow) error {
			if f.Frontend() != fe {
				return nil
			}
			lines = append(lines, fmt.Sprintf("%s DNAT -> %s %s timeout %ds", f.String(), f.Backend(), f.State, f.Timeout))
			if f.Reply.Src == oldBackendIP && netip.AddrPortFrom(f.Orig.Src, f.Orig.SrcPort) == e.firstConn &&
				f.State != "CLOSE" && f.State != "TIME_WAIT" {
				ghost = true
			}
			return nil
		})
		return err
	})
	if err != nil {
		return false, err
	}
	if len(lines) == 0 {
		e.tl.logf("kernel", "no conntrack entry for %s", fe)
	}
	for _, l := range lines {
		e.tl.logf("kernel", "%s", l)
	}
	return ghost, nil
}

// startClient connects the client and keeps requesting.
func (e *env) startClient(ctx context.Context, o Options) (*client, error) {
	var name string
	var addr netip.Addr
	if e.sc.external {
		name, addr = "client", externalIP
	} else {
		name, addr = "app", clientPodIP
	}
	h, err := e.bed.AddHost(name, e.node, netip.PrefixFrom(addr, 32))
	if err != nil {
		return nil, err
	}
	e.client = h
	fe := e.frontend()
	c := newClient(func(ctx context.Context) (net.Conn, error) {
		return h.Dial(ctx, "tcp", "", fe.String())
	}, o.Interval, o.RequestTimeout)
	go c.run(ctx)
	who := "a client outside the cluster"
	if !e.sc.external {
		who = "client pod app/app on the node"
	}
	e.tl.logf("client", "%s at %s opens one keep-alive connection to %s and sends a request every %s",
		who, addr, fe, o.Interval)
	return c, nil
}

// replace runs the incident once and measures what the client saw.
func (e *env) replace(ctx context.Context, o Options) (*Run, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sc := e.sc
	oldPod, newPod := sc.app+"-v1", sc.app+"-v2"
	newIP := newBackendIP
	if o.ReuseIP {
		newIP = oldBackendIP
	}
	if err := e.startPod(ctx, oldPod, oldBackendIP); err != nil {
		return nil, err
	}
	if err := e.route(ctx, oldBackendIP); err != nil {
		return nil, err
	}
	cl, err := e.startClient(ctx, o)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if _, err := cl.waitFor(ctx, o.Steady+10*time.Second, func(os []Outcome) bool {
		return len(os) > 0 && os[len(os)-1].At.Sub(t0) >= o.Steady
	}); err != nil {
		return nil, fmt.Errorf("client never ran: %w", err)
	}
	ok, failed := count(cl.since(0))
	if failed > 0 || ok == 0 {
		return nil, fmt.Errorf("the client failed before the rollout (%d ok, %d failed, first: %v): the lab network is broken",
			ok, failed, firstFailure(cl.since(0)).Err)
	}
	e.firstConn, _ = netip.ParseAddrPort(cl.since(0)[0].Local)
	e.tl.logf("client", "%d requests ok, all answered by %s, over one connection", ok, oldPod)
	if _, err := e.showKernel(ctx); err != nil {
		return nil, err
	}
	if _, err := e.scan(ctx, "every backend is live"); err != nil {
		return nil, err
	}

	e.tl.section("rollout")
	if !o.ReuseIP {
		if err := e.startPod(ctx, newPod, newIP); err != nil {
			return nil, err
		}
	}
	if e.real != nil {
		err = e.real.terminatePod(ctx, sc, oldPod)
	} else {
		err = e.cluster.TerminatePod(ctx, sc.namespace, oldPod)
	}
	if err != nil {
		return nil, err
	}
	e.tl.logf("api", "pod %s/%s terminating: still running, listed as terminating in the EndpointSlice", sc.namespace, oldPod)
	if o.ReuseIP {
		err = e.route(ctx)
	} else {
		err = e.route(ctx, newIP)
	}
	if err != nil {
		return nil, err
	}
	if _, err := e.scan(ctx, oldPod+" is draining: terminating but still exists"); err != nil {
		return nil, err
	}
	mark := len(cl.since(0))
	if e.real != nil {
		if err := e.real.killPod(ctx, sc, oldPod); err != nil {
			return nil, err
		}
	} else {
		if err := e.bed.RemoveHost(e.pods[oldPod]); err != nil {
			return nil, err
		}
		delete(e.pods, oldPod)
		if err := e.cluster.DeletePod(ctx, sc.namespace, oldPod); err != nil {
			return nil, err
		}
	}
	e.tl.logf("kubelet", "pod %s/%s deleted: its namespace, veth and route are gone", sc.namespace, oldPod)

	// The client's next requests go to the dead pod.
	if _, err := cl.waitFor(ctx, 10*time.Second, func(os []Outcome) bool { return hasFailure(os[mark:]) }); err != nil {
		return nil, fmt.Errorf("the client never noticed the pod was gone: %w", err)
	}
	first := firstFailure(cl.since(mark))
	e.tl.logf("client", "request failed: %v", first.Err)
	run := &Run{}
	if o.ReuseIP {
		if err := e.startPod(ctx, newPod, newIP); err != nil {
			return nil, err
		}
		if err := e.route(ctx, newIP); err != nil {
			return nil, err
		}
	}
	if _, err := e.showKernel(ctx); err != nil {
		return nil, err
	}
	res, err := e.scan(ctx, "")
	if err != nil {
		return nil, err
	}
	run.Findings = res.Findings

	// Watch the client until it recovers or the observation ends.
	all, werr := cl.waitFor(ctx, o.Observe, func(os []Outcome) bool { return recoveredAfter(os[mark:]) })
	if werr != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	window, nfail, recovered := measure(all[mark:])
	run.ErrorWindowSeconds, run.FailedRequests, run.Recovered = window.Round(time.Millisecond).Seconds(), nfail, recovered
	if recovered {
		last := all[len(all)-1]
		e.tl.logf("client", "recovered: answered by %s over a new connection from %s", last.Pod, last.Local)
	} else {
		e.tl.logf("client", "still failing after %s of observation", o.Observe)
	}
	run.GhostStillMapped, err = e.showKernel(ctx)
	if err != nil {
		return nil, err
	}
	e.tl.section("summary")
	state := "recovered"
	if !recovered {
		state = "had not recovered"
	}
	e.tl.logf("result", "the client saw errors for %.1fs (%d failed requests) and %s; ghostwatch reported %d finding(s)",
		window.Seconds(), nfail, state, len(run.Findings))
	if run.GhostStillMapped {
		e.tl.logf("result", "the kernel still maps the connection to the deleted pod; every retransmission renews the entry, so it lasts until the flow is deleted or the client gives up")
	}
	return run, nil
}

func count(os []Outcome) (ok, failed int) {
	for _, o := range os {
		if o.Err != nil {
			failed++
		} else {
			ok++
		}
	}
	return ok, failed
}

func hasFailure(os []Outcome) bool {
	for _, o := range os {
		if o.Err != nil {
			return true
		}
	}
	return false
}

func firstFailure(os []Outcome) Outcome {
	for _, o := range os {
		if o.Err != nil {
			return o
		}
	}
	return Outcome{}
}

// recoveredAfter: a success that follows a failure.
func recoveredAfter(os []Outcome) bool {
	failed := false
	for _, o := range os {
		if o.Err != nil {
			failed = true
		} else if failed {
			return true
		}
	}
	return false
}

// measure returns the error window: from sending the first request that
// failed to the first answer after it, or to the last outcome when none came.
func measure(os []Outcome) (time.Duration, int, bool) {
	var first time.Time
	n := 0
	for _, o := range os {
		if o.Err != nil {
			if first.IsZero() {
				first = o.Sent
			}
			n++
			continue
		}
		if !first.IsZero() {
			return o.At.Sub(first), n, true
		}
	}
	if first.IsZero() {
		return 0, 0, true
	}
	return os[len(os)-1].At.Sub(first), n, false
}

// scanNode runs one ghostwatch audit of a lab node: the cluster through the
// production kube source's informers, the node's conntrack table over
// netlink, every rule.
func scanNode(ctx context.Context, client kubernetes.Interface, node *netbed.Node) *audit.Result {
	return audit.Run(ctx, audit.Config{
		NodeName: labNode,
		Kube:     &kube.APISource{Client: client, Timeout: 30 * time.Second},
		Conntrack: func(keep conntrack.Keep) source.Source {
			return inNamespace{node, &conntrack.KernelSource{Keep: keep}}
		},
		Rules:        rule.All(rule.Config{}),
		SuspectsOnly: true,
	})
}

// inNamespace runs a source on a thread inside the node's network namespace.
type inNamespace struct {
	node *netbed.Node
	src  source.Source
}

func (n inNamespace) Name() string { return n.src.Name() }

func (n inNamespace) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	return n.node.Do(func() error { return n.src.Collect(ctx, s) })
}
