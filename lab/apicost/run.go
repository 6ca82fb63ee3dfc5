package apicost

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// Config configures Run.
type Config struct {
	Sizes
	// KubeBin is the directory of the Kubernetes binaries
	// (controlplane.FindBinaries).
	KubeBin string
	// AgentBin is the ghostwatch binary measured.
	AgentBin string
	// Quiet is how long both clients must have been idle for a phase to
	// end (Tap.LastActivity; default DefaultQuiet).
	Quiet time.Duration
	// Workers write the cluster in parallel (default 32).
	Workers int
	// Prefix names the node's network namespace (default gwc and five
	// random hex digits).
	Prefix string
	// Dir, when set, keeps the control plane's files: its processes' logs,
	// the agent's, the audit log. By default they go to a temporary
	// directory, removed at the end.
	Dir string
	// Progress, when set, receives a line per step of the run.
	Progress io.Writer
}

// DefaultQuiet is Config.Quiet when it is zero.
const DefaultQuiet = 5 * time.Second

// Deadlines of the waits; a run on a loaded two-core machine is far within
// them.
const (
	slicesDeadline = 15 * time.Minute
	syncDeadline   = 15 * time.Minute
	settleDeadline = 15 * time.Minute
)

// agentListen is where the agent serves /readyz in the node.
const agentListen = "127.0.0.1:10280"

// kubeProxyHealthz is kube-proxy's health endpoint in the node, as AddNode
// starts it.
const kubeProxyHealthz = "http://127.0.0.1:10256/healthz"

// The clients, as results name them.
const (
	ClientKubeProxy = "kube-proxy"
	ClientAgent     = "agent"
)

// Run builds the cluster of cfg.Sizes on a real control plane, then runs
// kube-proxy and the agent on the first node, each through a Tap of its
// own, and measures two phases.
//
// Start runs from each client's start until both have synced: every
// initial list has been answered to its end (for a watch asked for its
// initial events, the bookmark ending them has come), kube-proxy's
// /healthz and the agent's /readyz answer 200, and neither client has done
// anything (Tap.LastActivity) for cfg.Quiet. Churn runs from there through
// the replacements until the last is done, the EndpointSlices hold the
// current pods and nothing else, and both clients have been idle for
// cfg.Quiet again. The API server's audit log counts the requests that
// each client's user made in each phase (by requestReceivedTimestamp); the
// taps count the bytes and the objects. The resident memory of each
// process is read at the end of each phase.
//
// Everything Run starts is stopped, and everything it makes removed
// (Config.Dir excepted), whatever the outcome.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	l, err := newLayout(cfg.Sizes)
	if err != nil {
		return nil, err
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Prefix == "" {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		cfg.Prefix = "gwc" + hex.EncodeToString(b)[:5]
	}
	if err := controlplane.CheckBinaries("--kube-bin "+cfg.KubeBin, cfg.KubeBin); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(cfg.AgentBin); err != nil || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("agent binary %q: not an executable file (build one with: go build -o /tmp/ghostwatch ./cmd/ghostwatch)", cfg.AgentBin)
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, err
		}
	}
	began := time.Now()
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%7.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	res = &Result{Sizes: cfg.Sizes, Machine: machine(), AgentBinary: cfg.AgentBin, AgentVersion: agentVersion(ctx, cfg.AgentBin)}

	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: cfg.KubeBin, Dir: cfg.Dir, AuditLog: true})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	if v, err := cp.Admin.Discovery().ServerVersion(); err == nil {
		res.Machine.Kubernetes = v.GitVersion
	}
	progress("control plane up (%s)", res.Machine.Kubernetes)

	// The harness writes as fast as the API server takes it.
	acfg := cp.Config(controlplane.UserAdmin)
	acfg.QPS, acfg.Burst = 5000, 10000
	acfg.ContentType = protobufType
	acfg.UserAgent = "ghostwatch-apicost"
	admin, err := kubernetes.NewForConfig(acfg)
	if err != nil {
		return nil, err
	}
	kubelet := newAPIKubelet(admin, l)
	slots, err := l.populate(ctx, admin, kubelet, cfg.Workers, cp.RegisterNode, progress)
	if err != nil {
		return nil, fmt.Errorf("building the cluster: %w", err)
	}
	if err := waitSlices(ctx, admin, l, cp, progress); err != nil {
		return nil, err
	}
	res.Setup = seconds(time.Since(began))
	progress("cluster built: %d pods on %d Nodes, %d Services, every pod ready in its EndpointSlice", l.Pods, l.Nodes, l.Services)
	if err := applyAgentRBAC(ctx, admin); err != nil {
		return nil, err
	}

	bed, err := netbed.New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	defer bed.Close()
	cert, err := cp.ServingCertificate()
	if err != nil {
		return nil, err
	}
	var proxyTap, agentTap *Tap
	defer func() {
		for _, t := range []*Tap{agentTap, proxyTap} {
			if t != nil {
				t.Close()
			}
		}
	}()
	var proxyStarted time.Time
	node, err := cp.AddNode(ctx, bed, l.nodeName(0), controlplane.NodeOptions{
		IP: l.nodeIP(0), PodCIDR: l.podCIDR(0), Mode: controlplane.ProxyIPTables, Registered: true,
		ProxyServer: func(nn *netbed.Node) (string, error) {
			var err error
			if proxyTap, err = OpenTap(nn, ClientKubeProxy, cp.Server, cert, cp.CertPool()); err != nil {
				return "", err
			}
			proxyStarted = time.Now()
			return proxyTap.URL(), nil
		},
	})
	if err != nil {
		return nil, err
	}
	defer node.Stop()
	progress("kube-proxy healthy on %s", node.Name)

	if agentTap, err = OpenTap(node.Net, ClientAgent, cp.Server, cert, cp.CertPool()); err != nil {
		return nil, err
	}
	kubeconfig, err := cp.WriteKubeconfigFor(controlplane.UserAgent, agentTap.URL())
	if err != nil {
		return nil, err
	}
	hostRoot, err := os.MkdirTemp("", "ghostwatch-apicost-host-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(hostRoot)
	agentStarted := time.Now()
	agent, err := cp.Run("ghostwatch-agent", nil, "ip", "netns", "exec", node.Net.Name(), cfg.AgentBin, "agent",
		"--kubeconfig="+kubeconfig, "--node-name="+node.Name, "--host-root="+hostRoot, "--listen="+agentListen, "--log-level=info")
	if err != nil {
		return nil, err
	}
	defer agent.Stop(10 * time.Second)
	progress("agent started")

	taps := []*Tap{proxyTap, agentTap}
	hc := node.Net.HTTPClient(2 * time.Second)
	alive := func() error { return errors.Join(cp.Check(), node.Check(), agent.Check()) }
	if err := poll(ctx, syncDeadline, 100*time.Millisecond, "sync of kube-proxy and the agent", func() (bool, string, error) {
		if err := alive(); err != nil {
			return false, "", err
		}
		var waiting []string
		for _, t := range taps {
			if p, d := t.Initial(); p > 0 || d == 0 {
				waiting = append(waiting, fmt.Sprintf("%s: %d initial lists under way, %d done", t.name, p, d))
			}
		}
		for _, e := range []struct{ who, url string }{{ClientKubeProxy, kubeProxyHealthz}, {ClientAgent, "http://" + agentListen + "/readyz"}} {
			if err := httpOK(ctx, hc, e.url); err != nil {
				waiting = append(waiting, fmt.Sprintf("%s: %v", e.who, err))
			}
		}
		if len(waiting) == 0 {
			if idle := idleFor(taps); idle < cfg.Quiet {
				waiting = append(waiting, fmt.Sprintf("idle for %s of %s", idle.Round(time.Millisecond), cfg.Quiet))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; "), nil
	}); err != nil {
		return nil, fmt.Errorf("%w (the agent's log: %s)", err, agent.Log())
	}
	synced := time.Now()
	for _, t := range taps {
		t.SetPhase(PhaseChurn)
	}
	pids := map[string]int{ClientKubeProxy: node.ProxyPID(), ClientAgent: agent.PID()}
	afterSync := readMemory(pids)
	progress("both synced and idle for %s: kube-proxy %s after its start, the agent %s after its", cfg.Quiet,
		synced.Sub(proxyStarted).Round(time.Millisecond), synced.Sub(agentStarted).Round(time.Millisecond))

	churnBegan := time.Now()
	if err := l.churn(ctx, admin, kubelet, slots, progress); err != nil {
		return nil, err
	}
	progress("%d replacements done in %s", l.Replacements, time.Since(churnBegan).Round(time.Millisecond))
	if err := waitSlices(ctx, admin, l, cp, progress); err != nil {
		return nil, err
	}
	if err := poll(ctx, settleDeadline, 100*time.Millisecond, "quiet after the churn", func() (bool, string, error) {
		if err := alive(); err != nil {
			return false, "", err
		}
		if idle := idleFor(taps); idle < cfg.Quiet {
			return false, fmt.Sprintf("idle for %s of %s", idle.Round(time.Millisecond), cfg.Quiet), nil
		}
		for _, t := range taps {
			if p, _ := t.Initial(); p > 0 {
				return false, fmt.Sprintf("%s: %d lists under way", t.name, p), nil
			}
		}
		return true, "", nil
	}); err != nil {
		return nil, err
	}
	settled := time.Now()
	for _, t := range taps {
		t.SetPhase(PhaseAfter)
	}
	afterChurn := readMemory(pids)
	progress("both idle for %s after the churn", cfg.Quiet)

	agent.Stop(10 * time.Second)
	node.Stop()
	f, err := os.Open(cp.AuditLog())
	if err != nil {
		return nil, err
	}
	reqs, err := ParseAudit(bufio.NewReaderSize(f, 1<<20), controlplane.UserKubeProxy, controlplane.UserAgent)
	f.Close()
	if err != nil {
		return nil, err
	}
	res.Start, res.Churn = seconds(synced.Sub(proxyStarted)), seconds(settled.Sub(synced))
	for _, c := range []struct {
		name, user string
		tap        *Tap
		started    time.Time
	}{{ClientKubeProxy, controlplane.UserKubeProxy, proxyTap, proxyStarted}, {ClientAgent, controlplane.UserAgent, agentTap, agentStarted}} {
		var mine []AuditRequest
		for _, r := range reqs {
			if r.User == c.user {
				mine = append(mine, r)
			}
		}
		cr := clientResult(c.name, c.user, c.tap, mine, synced, settled)
		cr.SyncedAfter = seconds(synced.Sub(c.started))
		cr.RSSAfterSync, cr.RSSAfterChurn = afterSync[c.name].rss, afterChurn[c.name].rss
		cr.HWM = afterChurn[c.name].hwm
		res.Clients = append(res.Clients, cr)
	}
	res.Notes = crossCheck(res.Clients)
	res.Total = seconds(time.Since(began))
	progress("done")
	return res, nil
}

// idleFor is how long none of taps' clients has done anything.
func idleFor(taps []*Tap) time.Duration {
	var last time.Time
	for _, t := range taps {
		if a := t.LastActivity(); a.After(last) {
			last = a
		}
	}
	return time.Since(last)
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// waitSlices waits until the EndpointSlices of the Services hold every
// pod, ready, and nothing else: no endpoint of a pod that is terminating or
// gone.
func waitSlices(ctx context.Context, c kubernetes.Interface, l layout, cp *controlplane.ControlPlane, progress func(string, ...any)) error {
	last := ""
	return poll(ctx, slicesDeadline, time.Second, "every pod ready in its EndpointSlice and no other endpoint", func() (bool, string, error) {
		if err := cp.Check(); err != nil {
			return false, "", err
		}
		list, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName})
		if err != nil {
			return false, err.Error(), nil
		}
		all, ready, services := 0, 0, map[string]bool{}
		for _, s := range list.Items {
			services[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] = true
			for _, ep := range s.Endpoints {
				all++
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					ready++
				}
			}
		}
		note := fmt.Sprintf("%d of %d pods ready in the slices of %d of %d Services, %d endpoints not ready", ready, l.Pods, len(services), l.Services, all-ready)
		if note != last {
			progress("%s", note)
			last = note
		}
		return ready == l.Pods && all == l.Pods && len(services) == l.Services, note, nil
	})
}

// applyAgentRBAC creates what deploy/agent grants the agent's
// ServiceAccount: its namespace, the ServiceAccount, the ClusterRole and
// its binding. The workload itself (the DaemonSet) is left out: Run starts
// the agent.
func applyAgentRBAC(ctx context.Context, c kubernetes.Interface) error {
	ms, err := deploy.AgentInstall()
	if err != nil {
		return err
	}
	for _, m := range ms {
		switch o := m.Object.(type) {
		case *corev1.Namespace:
			_, err = c.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("deploy/%s: %w", m.File, err)
		}
	}
	return nil
}

// memory is a process's VmRSS and VmHWM, in bytes.
type memory struct{ rss, hwm int64 }

func readMemory(pids map[string]int) map[string]memory {
	out := map[string]memory{}
	for name, pid := range pids {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		m, _ := parseStatus(f)
		f.Close()
		out[name] = m
	}
	return out
}

// parseStatus reads VmRSS and VmHWM from a /proc/PID/status.
func parseStatus(r io.Reader) (memory, error) {
	var m memory
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("%s: %q, want a size in kB", k, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", k, err)
		}
		if k == "VmRSS" {
			m.rss = n * 1024
		} else {
			m.hwm = n * 1024
		}
	}
	return m, sc.Err()
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// agentVersion is the first line of `ghostwatch version`.
func agentVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return first
}

// clientResult gathers one client's counts: the tap's per phase, the audit
// log's requests by the phase they were received in.
func clientResult(name, user string, tap *Tap, reqs []AuditRequest, synced, settled time.Time) ClientResult {
	cr := ClientResult{Name: name, User: user, Requests: reqs, Connections: tap.Connections()}
	for _, p := range []Phase{PhaseStart, PhaseChurn} {
		c := tap.Counts(p)
		pc := PhaseCost{Phase: p.String(), Received: c.Received, Sent: c.Sent, UpstreamReceived: c.UpstreamReceived,
			UpstreamSent: c.UpstreamSent, Connections: c.Connections, Errors: c.Errors}
		byKey := map[string]*KeyCost{}
		get := func(k string) *KeyCost {
			if byKey[k] == nil {
				byKey[k] = &KeyCost{Key: k, Events: map[string]int{}}
			}
			return byKey[k]
		}
		for k, kc := range c.ByKey {
			e := get(k)
			e.TapRequests, e.Items, e.Body, e.Decoded, e.Objects = kc.Requests, kc.Items, kc.Body, kc.Decoded, kc.Objects()
			for t, n := range kc.Events {
				e.Events[t] = n
			}
			pc.TapRequests += kc.Requests
			pc.Objects += kc.Objects()
		}
		for _, r := range reqs {
			if phaseAt(r.Received, synced, settled) == p {
				get(r.Key()).Requests++
				pc.Requests++
			}
		}
		for _, e := range byKey {
			pc.ByKey = append(pc.ByKey, *e)
		}
		slices.SortFunc(pc.ByKey, func(a, b KeyCost) int {
			if c := cmp.Compare(b.Body, a.Body); c != 0 {
				return c
			}
			return strings.Compare(a.Key, b.Key)
		})
		cr.Phases = append(cr.Phases, pc)
	}
	return cr
}

// phaseAt is the phase a request received at t belongs to.
func phaseAt(t, synced, settled time.Time) Phase {
	switch {
	case t.Before(synced):
		return PhaseStart
	case t.Before(settled):
		return PhaseChurn
	}
	return PhaseAfter
}

// crossCheck notes where the audit log and a tap disagree on a client's
// requests.
func crossCheck(clients []ClientResult) []string {
	var notes []string
	for _, c := range clients {
		for _, p := range c.Phases {
			if p.Requests != p.TapRequests {
				notes = append(notes, fmt.Sprintf("%s, %s: the audit log has %d requests, the tap saw %d", c.Name, p.Phase, p.Requests, p.TapRequests))
			}
			for _, e := range p.Errors {
				notes = append(notes, fmt.Sprintf("%s, %s: %s", c.Name, p.Phase, e))
			}
		}
	}
	return notes
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// AgentBinEnv names the ghostwatch binary to measure when no flag does.
const AgentBinEnv = "GHOSTWATCH_AGENT_BIN"
