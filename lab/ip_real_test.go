package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/cli"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

// An address passes through three pods on the real control plane (a
// rolling replacement that reuses it); `ghostwatch ip` shows all three, in
// order, with their UIDs, times and endings, from the two controller
// replicas' address histories merged with what the API server lists now.
// The leader is then killed: the standby, which kept its own history
// while standing by, takes over and alone still tells the whole story,
// and goes on recording.
func TestRealIPTimelineSurvivesTheLeader(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	ctx := context.Background()
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.installController(t)
	// The reader the agents answer, whose token ip requests.
	installIPReader(t, e)
	a := e.controllerReplica(t, "controller-a")
	b := e.controllerReplica(t, "controller-b")
	// The agent of node-1, report only, its files under a root of their
	// own (no host-local there).
	e.realAgent(t, "--host-root="+t.TempDir())
	// Their pods, on a node whose kubelet API the test serves: a
	// port-forward to a replica's history port reaches that replica's, to
	// the agent's address port the agent's, in node-1's namespace.
	const agentPod = "gw-agent-x7k2p"
	replicas := map[string]*replica{a.name: a, b.name: b}
	if err := e.cp.ServeKubeletAPI(ctx, "control-1", func(ctx context.Context, ns, name string, port int32) (net.Conn, error) {
		if r, ok := replicas[name]; ok && ns == "ghostwatch" && port == cli.HistoryPort {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", strings.TrimPrefix(r.url, "http://"))
		}
		if name == agentPod && ns == "ghostwatch" && port == cli.AgentAddressPort {
			return e.node.Net.Dial(ctx, "tcp", "", fmt.Sprintf("127.0.0.1:%d", port))
		}
		return nil, fmt.Errorf("nothing listens on %s/%s:%d", ns, name, port)
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		e.ghostwatchPod(t, r.name, "controller", "control-1")
	}
	e.ghostwatchPod(t, agentPod, "agent", "control-1")
	// The Service of the cart pods, which the client below goes through.
	svc := e.service(t, "shop", "cart", 0)
	var leader string
	e.eventually(t, time.Minute, "a replica to lead", func() bool {
		l, err := e.api.CoordinationV1().Leases("ghostwatch").Get(ctx, "ghostwatch-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		leader = *l.Spec.HolderIdentity
		return true
	})

	ip := netip.MustParseAddr("10.244.7.47")
	var uids []string
	for i, name := range []string{"cart-7d9f-a", "cart-7d9f-b", "cart-7d9f-c"} {
		if i > 0 {
			prev := []string{"cart-7d9f-a", "cart-7d9f-b"}[i-1]
			if err := e.api.CoreV1().Pods("shop").Delete(ctx, prev, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
			e.gone(t, "shop", prev)
		}
		uids = append(uids, e.podAt(t, "shop", name, ip))
	}
	// A pooled connection to the Service, answered by the last pod.
	clientHost, err := e.bed.AddHost("app", e.node.Net, hostPfx(netip.MustParseAddr("10.244.7.250")))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := keepAlive(cctx, clientHost, netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80))
	answeredBy(t, c, "cart-7d9f-c", 3)
	want := []string{
		"shop/cart-7d9f-a " + uids[0] + " node-1 deleted",
		"shop/cart-7d9f-b " + uids[1] + " node-1 deleted",
		"shop/cart-7d9f-c " + uids[2] + " node-1 holds",
	}
	var rep ipTimeline
	e.eventually(t, 30*time.Second, "both replicas to tell the three tenures, each through a port-forward", func() bool {
		rep = e.ghostwatchIP(t, ip)
		return fmt.Sprint(rep.summary()) == fmt.Sprint(want) && len(rep.Histories) == 2
	})
	// Asked directly, each replica tells the same.
	for _, r := range []*replica{a, b} {
		if got := e.ghostwatchIP(t, ip, r.url); fmt.Sprint(got.summary()) != fmt.Sprint(want) {
			t.Errorf("%s alone: %q", r.name, got.summary())
		}
	}
	for i := 1; i < len(rep.Tenures); i++ {
		prev, cur := rep.Tenures[i-1], rep.Tenures[i]
		if prev.Until.IsZero() || prev.Until.After(cur.From.Add(time.Second)) || prev.From.After(prev.Until.Add(time.Second)) {
			t.Errorf("tenure %d (%s, %s) does not end before %d (%s) begins", i-1, prev.From, prev.Until, i, cur.From)
		}
	}

	// The leader dies without a word; the standby takes the Lease.
	standby, dead := b, a
	if leader == "controller-b" {
		standby, dead = a, b
	}
	dead.kill(t)
	// While its pod still says Running, the dead replica is named as not
	// answering, and what the standby tells still stands.
	rep = e.ghostwatchIP(t, ip)
	if len(rep.Unanswered) != 1 || rep.Unanswered[0].Replica != dead.name || fmt.Sprint(rep.summary()) != fmt.Sprint(want) {
		t.Errorf("with %s dead: unanswered %+v, tenures %q", dead.name, rep.Unanswered, rep.summary())
	}
	// Its Deployment would replace it; its pod goes.
	if err := e.api.CoreV1().Pods("ghostwatch").Delete(ctx, dead.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(t, time.Minute, "the standby to lead", func() bool {
		l, err := e.api.CoordinationV1().Leases("ghostwatch").Get(ctx, "ghostwatch-controller", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == standby.name
	})
	if err := e.api.CoreV1().Pods("shop").Delete(ctx, "cart-7d9f-c", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "shop", "cart-7d9f-c")
	want[2] = "shop/cart-7d9f-c " + uids[2] + " node-1 deleted"
	staleFound := func() bool {
		for _, f := range rep.Findings {
			if f.From == "node-1" && f.Rule == "stale-nat-flow" && strings.HasSuffix(f.Runbook, "docs/runbooks/stale-nat-flow.md") {
				return true
			}
		}
		return false
	}
	e.eventually(t, 30*time.Second, "the standby alone to tell the three, the last one ended, and node-1's agent its stale flow", func() bool {
		rep = e.ghostwatchIP(t, ip)
		return fmt.Sprint(rep.summary()) == fmt.Sprint(want) && len(rep.Unanswered) == 0 && staleFound()
	})
	if !rep.Judged {
		t.Error("the standby leads, yet the report says no leading replica answered")
	}
	// The client's connection is still translated to the dead pod on
	// node-1: its agent says so, with the command that removes exactly it.
	if len(rep.Flows) != 1 || rep.Flows[0].Node != "node-1" || rep.Flows[0].Total == 0 {
		t.Fatalf("flows %+v, want node-1's ghost", rep.Flows)
	}
	if rep.IPAM == nil || !strings.Contains(rep.IPAM.NotServed, "serves no Calico IPAM") {
		t.Errorf("IPAM %+v: want it said that no Calico IPAM is served", rep.IPAM)
	}
	found := false
	for _, f := range rep.Flows[0].Flows {
		found = found || (f.Role == "backend" && strings.HasPrefix(f.Flow, "tcp 10.244.7.250:") && strings.Contains(f.Remove, "-r "+ip.String()))
	}
	if !found {
		t.Errorf("node-1's flows %+v: want the client's, translated to %s", rep.Flows[0].Flows, ip)
	}
	if len(rep.Histories) != 1 || rep.Histories[0].Replica != standby.name {
		t.Errorf("histories %+v, want %s's alone", rep.Histories, standby.name)
	}
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// Only the agents of the nodes asked for: none runs on node-9.
	out, _ := exec.Command(ghostwatchBinary(t), "ip", ip.String(), "--kubeconfig="+kubeconfig, "--node=node-9", "-o", "json").Output()
	var some ipTimeline
	if err := json.Unmarshal(out, &some); err != nil || len(some.Flows) != 0 || len(some.Unanswered) != 1 || !strings.Contains(some.Unanswered[0].Error, "no running agent on node-9") {
		t.Errorf("--node=node-9: %v %s", err, out)
	}
	table, err := exec.Command(ghostwatchBinary(t), "ip", ip.String(), "--kubeconfig="+kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(table), "shop/cart-7d9f-c") {
		t.Errorf("ghostwatch ip: %v\n%s", err, table)
	}
	t.Logf("ghostwatch ip %s:\n%s", ip, table)
}

// ghostwatchPod creates the pod of a ghostwatch component, as its
// Deployment or DaemonSet would, bound to node and running.
func (e *realEnv) ghostwatchPod(t *testing.T, name, component, node string) {
	t.Helper()
	ctx := context.Background()
	p, err := e.api.CoreV1().Pods("ghostwatch").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "ghostwatch", "app.kubernetes.io/component": component}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: component, Image: "ghostwatch"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := e.api.CoreV1().Pods("ghostwatch").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ipTimeline is what `ghostwatch ip -o json` prints, as the test reads it.
type ipTimeline struct {
	Tenures []history.Tenure `json:"tenures"`
	Flows   []struct {
		conntrack.AtAddress
	} `json:"flows"`
	Histories []struct {
		Replica string `json:"replica"`
	} `json:"histories"`
	Unanswered []struct{ Replica, Error string } `json:"unanswered"`
	IPAM       *struct {
		NotServed, Verdict string
	} `json:"ipam"`
	Findings []struct{ From, Rule, Runbook string } `json:"findings"`
	Judged   bool                                   `json:"clusterJudged"`
}

func (r ipTimeline) summary() []string {
	var out []string
	for _, t := range r.Tenures {
		how := t.Ended
		if t.Holding() {
			how = "holds"
		}
		out = append(out, fmt.Sprintf("%s/%s %s %s %s", t.Namespace, t.Pod, t.UID, t.Node, how))
	}
	return out
}

// ghostwatchIP runs `ghostwatch ip ADDRESS -o json` as the cluster's admin,
// asking the histories at urls.
func (e *realEnv) ghostwatchIP(t *testing.T, ip netip.Addr, urls ...string) ipTimeline {
	t.Helper()
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"ip", ip.String(), "--kubeconfig=" + kubeconfig, "-o", "json"}
	for _, u := range urls {
		args = append(args, "--history-url="+u)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(ghostwatchBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Logf("ghostwatch ip: %v: %s", err, errOut.String())
	}
	var rep ipTimeline
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("ghostwatch ip -o json: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	return rep
}

// podAt creates ns/name on node-1 at ip and waits until it runs there; it
// returns its UID.
func (e *realEnv) podAt(t *testing.T, ns, name string, ip netip.Addr) string {
	t.Helper()
	e.createPod(t, e.node.Name, ns, name, map[string]string{"app": "cart"}, ip, 0)
	var uid string
	e.eventually(t, time.Minute, fmt.Sprintf("pod %s/%s running at %s", ns, name, ip), func() bool {
		p, err := e.api.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP != ip.String() {
			return false
		}
		uid = string(p.UID)
		return true
	})
	return uid
}

// replica is one `ghostwatch controller` process.
type replica struct {
	name, url string
	cmd       *exec.Cmd
	logs      *bytes.Buffer
	killed    bool
}

// controllerReplica runs a controller replica named name with the
// controller's identity, in the host's namespace on ports of its own,
// until the test ends (or kill).
func (e *realEnv) controllerReplica(t *testing.T, name string) *replica {
	t.Helper()
	return e.controllerReplicaIn(t, name, nil)
}

// controllerReplicaIn is controllerReplica in node's network namespace
// (on the default ports of its loopback), or the host's when node is nil.
func (e *realEnv) controllerReplicaIn(t *testing.T, name string, node *controlplane.Node) *replica {
	t.Helper()
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserController)
	if err != nil {
		t.Fatal(err)
	}
	listen, hist := fmt.Sprintf("127.0.0.1:%d", cli.ControllerPort), fmt.Sprintf("127.0.0.1:%d", cli.HistoryPort)
	if node == nil {
		listen, hist = loopbackPort(t), loopbackPort(t)
	}
	r := &replica{name: name, url: "http://" + hist, logs: &bytes.Buffer{}}
	r.cmd = exec.Command(ghostwatchBinary(t), "controller", "--kubeconfig="+kubeconfig, "--identity="+name,
		"--lease-namespace=ghostwatch", "--listen="+listen, "--history-listen="+hist, "--log-format=text")
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	start := r.cmd.Start
	if node != nil {
		start = func() error { return node.Net.Do(r.cmd.Start) }
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !r.killed {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, r.logs.String())
		}
	})
	return r
}

// kill ends the replica at once, as a node's loss would.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	r.killed = true
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Wait()
}

// loopbackPort is a free port of 127.0.0.1, as HOST:PORT.
func loopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
