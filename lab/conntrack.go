package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/host"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
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
	// Inspect, when set with the real control plane, is called while the
	// client fails and the ghost stands, after the lab's own scan, with an
	// admin's kubeconfig and the node's network namespace: a look from
	// outside.
	Inspect func(ctx context.Context, kubeconfig, netns string) error
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
	// AgentActions are what the agent did during the run, in order: each
	// flow it deleted, or was refused or failed to; null without the
	// agent.
	AgentActions []AgentAction `json:"agent_actions"`
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
	return runScenario(ctx, o, deployScenario)
}

var deployScenario = scenario{
	name: "conntrack-deploy", title: "seed 004: a rolling deploy behind a NodePort, a keep-alive client",
	namespace: "web", service: "api", app: "api",
	clusterIP: netip.MustParseAddr("10.96.0.80"), port: 80, targetPort: 8080, nodePort: 30080,
	external: true,
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
	// A timeline nobody reads any more ends the run: each run's teardown
	// removes its namespaces.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tl := newTimeline(o.Out, time.Now())
	tl.failed = func(err error) { cancel(fmt.Errorf("writing the timeline: %w", err)) }
	// The prefix is the lab's until it ends, across its runs.
	claim, err := netbed.ClaimPrefix(o.Prefix)
	if err != nil {
		return nil, err
	}
	defer claim.Release()
	for _, withAgent := range modes {
		run, err := runOnce(ctx, claim, o, sc, tl, withAgent)
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
func runOnce(ctx context.Context, claim *netbed.Claim, o Options, sc scenario, tl *timeline, withAgent bool) (run *Run, err error) {
	bed := claim.Bed()
	how := "without the agent"
	if withAgent {
		how = "with the agent removing stale flows"
	}
	tl.section("ghostwatch-lab %s — %s — %s", sc.name, sc.title, how)
	defer func() {
		cerr := bed.Close()
		if cerr == nil {
			tl.logf("lab", "removed every namespace, link and rule it created")
		}
		if ctx.Err() != nil {
			// The timeline may be what failed: say here that the lab is gone.
			err = fmt.Errorf("lab %s interrupted: %w", sc.name, context.Cause(ctx))
			if cerr == nil {
				err = fmt.Errorf("%w; removed every namespace it created", err)
			}
		}
		if cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up the lab: %w", cerr))
		}
	}()
	e, err := newEnv(ctx, o, bed, sc, tl)
	if err != nil {
		return nil, err
	}
	if e.real != nil {
		defer e.real.close()
	}
	var actions *actionLog
	stopAgent := func() {}
	if withAgent {
		actions = &actionLog{tl: tl}
		if stopAgent, err = e.startAgent(ctx, o, actions); err != nil {
			return nil, err
		}
		defer stopAgent()
	}
	run, err = e.replace(ctx, o)
	if err != nil {
		return nil, err
	}
	run.Agent = withAgent
	if withAgent {
		// Stopped first, so that the run holds every action it took.
		stopAgent()
		run.AgentActions = actions.list()
	}
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
	// firstID is the conntrack ID of firstConn's entry, once the kernel was
	// first shown translating it: the client may reconnect from the same
	// port, and the new connection's entry is then another entry with the
	// same tuple.
	firstID uint32
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
		if err := e.logService(ctx); err != nil {
			return nil, err
		}
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
	if err := addService(ctx, e.cluster, sc); err != nil {
		return nil, err
	}
	tl.logf("node", "namespace %s, address %s, conntrack timestamps on", node.Name(), nodeIP)
	if err := e.logService(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// addService creates sc's Service in the in-memory API.
func addService(ctx context.Context, c *Cluster, sc scenario) error {
	return c.AddService(ctx, sc.namespace, sc.service, sc.app, []netip.Addr{sc.clusterIP},
		LabPort{Protocol: corev1.ProtocolTCP, Port: int32(sc.port), TargetPort: int32(sc.targetPort), NodePort: int32(sc.nodePort)})
}

// logService prints the Service as the API holds it; for a NodePort, its
// externalTrafficPolicy and what the node does with the client's address,
// which decide whether a dead backend leaves a ghost.
func (e *env) logService(ctx context.Context) error {
	sc := e.sc
	if sc.nodePort == 0 {
		e.tl.logf("api", "Service %s/%s: ClusterIP %s:%d -> targetPort %d", sc.namespace, sc.service, sc.clusterIP, sc.port, sc.targetPort)
		return nil
	}
	e.tl.logf("api", "Service %s/%s: ClusterIP %s:%d, NodePort %s:%d -> targetPort %d", sc.namespace, sc.service,
		sc.clusterIP, sc.port, nodeIP, sc.nodePort, sc.targetPort)
	var admin kubernetes.Interface
	if e.real != nil {
		admin = e.real.cp.Admin
	} else {
		admin = e.cluster.Client
	}
	svc, err := admin.CoreV1().Services(sc.namespace).Get(ctx, sc.service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Service %s/%s back: %w", sc.namespace, sc.service, err)
	}
	policy, path := trafficPolicy(svc, e.real != nil)
	e.tl.logf("api", "Service %s/%s: %s", sc.namespace, sc.service, policy)
	e.tl.logf("proxy", "%s", path)
	return nil
}

// trafficPolicy says what a NodePort Service's externalTrafficPolicy is in
// the API, and what the node does with the client's traffic (path):
// kube-proxy (real) does as the policy says; the lab's own DNAT rules (not
// real) never masquerade.
func trafficPolicy(svc *corev1.Service, real bool) (policy, path string) {
	const ghost = "; with Cluster, kube-proxy would masquerade it out of the backend's veth, and the entry would go with the pod: no ghost on one node"
	p := svc.Spec.ExternalTrafficPolicy
	policy = "externalTrafficPolicy " + string(p)
	switch {
	case !real && p == "":
		return "externalTrafficPolicy not set (the in-memory API sets no defaults; a real API server would set Cluster)",
			"the lab's DNAT rules keep the client's address (no SNAT), as kube-proxy does for Local, and every endpoint is on this node" + ghost
	case !real:
		return policy, "the lab's DNAT rules keep the client's address (no SNAT) whatever the policy says"
	case p == corev1.ServiceExternalTrafficPolicyLocal:
		return policy, "kube-proxy keeps the client's address (no SNAT) and sends NodePort traffic only to endpoints on this node" + ghost
	}
	return policy, "kube-proxy masquerades NodePort traffic (SNAT to the node) and may send it to endpoints on any node; a backend on this node leaves no ghost, its entries go with its veth"
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
		checked := ""
		if st, ok := res.Snapshot.Source(conntrack.Name); ok {
			checked = st.Detail
		}
		if why == "" {
			e.tl.logf("scan", "no ghosts (conntrack: %s)", checked)
		} else {
			e.tl.logf("scan", "no ghosts (%s; conntrack: %s)", why, checked)
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
			line := fmt.Sprintf("%s DNAT -> %s", f.String(), f.Backend())
			if src := netip.AddrPortFrom(f.Reply.Dst, f.Reply.DstPort); src != netip.AddrPortFrom(f.Orig.Src, f.Orig.SrcPort) {
				line += fmt.Sprintf(" SNAT -> %s", src)
			}
			lines = append(lines, fmt.Sprintf("%s %s timeout %ds", line, f.State, f.Timeout))
			if netip.AddrPortFrom(f.Orig.Src, f.Orig.SrcPort) == e.firstConn && f.Reply.Src == oldBackendIP && e.firstID == 0 {
				e.firstID = f.ID
			}
			ghost = ghost || strandedEntry(f, e.firstConn, e.firstID)

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

// strandedEntry reports whether f is the client's first connection's entry
// (from first, conntrack ID id when known), still translated to the old
// backend in a state that can carry traffic. An entry with the same tuple
// and another ID is a new connection from the same port, not the ghost.
func strandedEntry(f *snapshot.Flow, first netip.AddrPort, id uint32) bool {
	if netip.AddrPortFrom(f.Orig.Src, f.Orig.SrcPort) != first || f.Reply.Src != oldBackendIP {
		return false
	}
	if id != 0 && f.ID != id {
		return false
	}
	return f.State != "CLOSE" && f.State != "TIME_WAIT"
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
	c.failures = &failureLog{tl: e.tl}
	go c.run(ctx)
	who := "a client outside the cluster"
	if !e.sc.external {
		who = "client pod app/app on the node"
	}
	e.tl.logf("client", "%s at %s opens one keep-alive connection to %s and sends a request every %s",
		who, addr, fe, o.Interval)
	return c, nil
}

// terminatePod marks the pod terminating: it keeps running and stays in the
// EndpointSlice as terminating, as during a rollout's grace period.
func (e *env) terminatePod(ctx context.Context, name string) error {
	var err error
	if e.real != nil {
		err = e.real.terminatePod(ctx, e.sc, name)
	} else {
		err = e.cluster.TerminatePod(ctx, e.sc.namespace, name)
	}
	if err != nil {
		return err
	}
	e.tl.logf("api", "pod %s/%s terminating: still running, listed as terminating in the EndpointSlice", e.sc.namespace, name)
	return nil
}

// killPod removes the pod for good: its namespace, veth and route on the
// node, and its object in the API.
func (e *env) killPod(ctx context.Context, name string) error {
	if e.real != nil {
		if err := e.real.killPod(ctx, e.sc, name); err != nil {
			return err
		}
	} else {
		if err := e.bed.RemoveHost(e.pods[name]); err != nil {
			return err
		}
		delete(e.pods, name)
		if err := e.cluster.DeletePod(ctx, e.sc.namespace, name); err != nil {
			return err
		}
	}
	e.tl.logf("kubelet", "pod %s/%s deleted: its namespace, veth and route are gone", e.sc.namespace, name)
	return nil
}

// incident is one play of the scenario on a built lab: the pod the rollout
// replaces, its successor, the client, and what was measured.
type incident struct {
	e              *env
	o              Options
	oldPod, newPod string
	// newIP is the new pod's address: the old pod's with ReuseIP.
	newIP netip.Addr
	cl    *client
	// mark is how many requests the client had made when the old pod died;
	// the error window is measured from there.
	mark int
	// window is the error window before it is rounded into run.
	window time.Duration
	run    Run
}

// replace plays the incident once, one step after another, and measures
// what the client saw.
func (e *env) replace(ctx context.Context, o Options) (*Run, error) {
	ctx, cancel := context.WithCancel(ctx)
	in := &incident{e: e, o: o, oldPod: e.sc.app + "-v1", newPod: e.sc.app + "-v2", newIP: newBackendIP}
	defer func() {
		cancel()
		// The client dials inside its namespace: it must be done before
		// the lab removes it, also when a step failed or was cancelled.
		if in.cl != nil {
			<-in.cl.done
		}
	}()
	if o.ReuseIP {
		in.newIP = oldBackendIP
	}
	for _, step := range []func(context.Context) error{
		in.serveOld,
		in.connect,
		in.checkHealthy,
		in.rollOut,
		in.killOld,
		in.awaitFailure,
		in.startNewOnOldIP,
		in.scanGhost,
		in.observe,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	in.summarize()
	return &in.run, nil
}

// serveOld starts the pod the rollout will replace and routes the Service
// to it alone, so that every connection before the rollout lands on it.
func (in *incident) serveOld(ctx context.Context) error {
	if err := in.e.startPod(ctx, in.oldPod, oldBackendIP); err != nil {
		return err
	}
	return in.e.route(ctx, oldBackendIP)
}

// connect starts the client and lets it run for o.Steady over one
// keep-alive connection. It proves the lab network works (every request
// answered by the old pod) and that the client's flow predates the pods
// the rollout creates; it records that flow's source as e.firstConn.
func (in *incident) connect(ctx context.Context) error {
	e, o := in.e, in.o
	cl, err := e.startClient(ctx, o)
	if err != nil {
		return err
	}
	in.cl = cl
	t0 := time.Now()
	if _, err := cl.waitFor(ctx, o.Steady+10*time.Second, func(os []Outcome) bool {
		return len(os) > 0 && os[len(os)-1].At.Sub(t0) >= o.Steady
	}); err != nil {
		return fmt.Errorf("client never ran: %w", err)
	}
	ok, failed := count(cl.since(0))
	if failed > 0 || ok == 0 {
		return fmt.Errorf("the client failed before the rollout (%d ok, %d failed, first: %v): the lab network is broken",
			ok, failed, firstFailure(cl.since(0)).Err)
	}
	e.firstConn, _ = netip.ParseAddrPort(cl.since(0)[0].Local)
	e.tl.logf("client", "%d requests ok, all answered by %s, over one connection", ok, in.oldPod)
	return nil
}

// checkHealthy shows the kernel translating the client's connection to the
// live old pod and scans: ghostwatch must find nothing while every backend
// is live.
func (in *incident) checkHealthy(ctx context.Context) error {
	if _, err := in.e.showKernel(ctx); err != nil {
		return err
	}
	_, err := in.e.scan(ctx, "every backend is live")
	return err
}

// rollOut plays a rolling update up to the old pod's deletion: the new pod
// starts (unless it must wait for the old pod's IP), the old pod
// terminates, and the Service routes new connections away from it. The
// scan while the old pod drains proves ghostwatch does not report flows to
// a pod that is terminating but still exists.
func (in *incident) rollOut(ctx context.Context) error {
	e, o := in.e, in.o
	e.tl.section("rollout")
	if !o.ReuseIP {
		if err := e.startPod(ctx, in.newPod, in.newIP); err != nil {
			return err
		}
	}
	if err := e.terminatePod(ctx, in.oldPod); err != nil {
		return err
	}
	var err error
	if o.ReuseIP {
		err = e.route(ctx)
	} else {
		err = e.route(ctx, in.newIP)
	}
	if err != nil {
		return err
	}
	_, err = e.scan(ctx, in.oldPod+" is draining: terminating but still exists")
	return err
}

// killOld deletes the old pod, marking where the client's requests after
// its death begin.
func (in *incident) killOld(ctx context.Context) error {
	in.mark = len(in.cl.since(0))
	return in.e.killPod(ctx, in.oldPod)
}

// awaitFailure waits for the client's next requests to fail. It proves the
// incident: the kernel still sends the client's established connection to
// the pod that no longer exists, although the Service no longer routes
// there.
func (in *incident) awaitFailure(ctx context.Context) error {
	// The client's failure log has printed the failure.
	if _, err := in.cl.waitFor(ctx, 10*time.Second, func(os []Outcome) bool { return hasFailure(os[in.mark:]) }); err != nil {
		return fmt.Errorf("the client never noticed the pod was gone: %w", err)
	}
	return nil
}

// startNewOnOldIP, with ReuseIP, starts the new pod on the dead pod's address and
// routes the Service to it, so that the stale flow is delivered to a pod
// that never accepted it.
func (in *incident) startNewOnOldIP(ctx context.Context) error {
	if !in.o.ReuseIP {
		return nil
	}
	if err := in.e.startPod(ctx, in.newPod, in.newIP); err != nil {
		return err
	}
	return in.e.route(ctx, in.newIP)
}

// scanGhost shows what the kernel maps now and scans while the client
// fails: ghostwatch must report the stale flow (or, with ReuseIP, the
// misdelivered one). Its findings are the run's.
func (in *incident) scanGhost(ctx context.Context) error {
	if _, err := in.e.showKernel(ctx); err != nil {
		return err
	}
	res, err := in.e.scan(ctx, "")
	if err != nil {
		return err
	}
	in.run.Findings = res.Findings
	if in.o.Inspect != nil && in.e.real != nil {
		kubeconfig, err := in.e.real.cp.WriteKubeconfig(controlplane.UserAdmin)
		if err != nil {
			return err
		}
		if err := in.o.Inspect(ctx, kubeconfig, in.e.node.Name()); err != nil {
			return fmt.Errorf("inspecting the ghost: %w", err)
		}
	}
	return nil
}

// observe watches the client until it recovers or o.Observe ends, measures
// the error window from the old pod's death, and checks whether the kernel
// still maps the client's first connection to the dead pod: without the
// agent it does; with it, or after a reset from a new pod on the same IP,
// it must not.
func (in *incident) observe(ctx context.Context) error {
	e, o := in.e, in.o
	_, werr := in.cl.waitFor(ctx, o.Observe, func(os []Outcome) bool { return recoveredAfter(os[in.mark:]) })
	if werr != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	// Measured on what the failure log printed.
	all := in.cl.stopFailures()
	window, nfail, recovered := measure(all[in.mark:])
	in.window = window
	in.run.ErrorWindowSeconds, in.run.FailedRequests, in.run.Recovered = window.Round(time.Millisecond).Seconds(), nfail, recovered
	if recovered {
		last := all[len(all)-1]
		e.tl.logf("client", "recovered: answered by %s over a new connection from %s", last.Pod, last.Local)
	} else {
		e.tl.logf("client", "still failing after %s of observation", o.Observe)
	}
	var err error
	in.run.GhostStillMapped, err = e.showKernel(ctx)
	return err
}

// summarize prints what the run measured: how long the client failed,
// whether it recovered, what ghostwatch reported, and whether the ghost
// outlived the run.
func (in *incident) summarize() {
	r := in.run
	in.e.tl.section("summary")
	state := "recovered"
	if !r.Recovered {
		state = "had not recovered"
	}
	in.e.tl.logf("result", "the client saw errors for %.1fs (%s) and %s; ghostwatch reported %s",
		in.window.Seconds(), text.Count(r.FailedRequests, "failed request", "failed requests"), state, text.Count(len(r.Findings), "finding", "findings"))
	if r.GhostStillMapped {
		in.e.tl.logf("result", "the kernel still maps the connection to the deleted pod; every retransmission renews the entry, so it lasts until the flow is deleted or the client gives up")
	}
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
		Sources: []source.Source{
			&live.APISource{Client: client, Timeout: 30 * time.Second},
			hostOf(node),
			&conntrack.KernelSource{Open: openIn(node)},
		},
		Rules: rule.All(rule.Config{}),
	})
}

// hostOf reads the node's addresses, its NodePort frontends, in its
// network namespace.
func hostOf(node *netbed.Node) *host.Addresses {
	return &host.Addresses{Read: func() (as []netip.Addr, err error) {
		err = node.Do(func() error {
			as, err = host.Local()
			return err
		})
		return as, err
	}}
}

// openIn opens conntrack sockets in the node's network namespace: they read
// and change that namespace's table from any thread.
func openIn(node *netbed.Node) func() (*conntrack.Conn, error) {
	return func() (c *conntrack.Conn, err error) {
		err = node.Do(func() error {
			c, err = conntrack.Open()
			return err
		})
		return c, err
	}
}
