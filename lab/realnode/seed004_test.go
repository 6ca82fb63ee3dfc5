package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/lab/keepalive"
)

// Seed 004 on two real nodes, the chart installed with stale-nat-flow on:
// a keep-alive client outside the cluster sends requests to a Deployment
// behind a NodePort of node-1, its one replica on node-2 (strandAcross).
func TestSeed004OnRealNodes(t *testing.T) {
	l := startLab(t, withReleaseImage, withSecondNode, withMonitoring)
	l.installRemedying(t)
	l.prom = l.startPrometheus(t, "ghostwatch")
	// An agent on each node, two controller replicas.
	l.prom.waitTargetsUp(t, `namespace="ghostwatch"`, 4)
	l.deployment(t, "api", 1, onNode("node-2"), shortGrace)
	port := l.nodePort(t, "api")

	client, err := l.bed.AddHost("client", l.node.Net, netip.MustParsePrefix("203.0.113.10/32"))
	if err != nil {
		t.Fatal(err)
	}
	to := netip.AddrPortFrom(l.node.IP, port)
	ka := &keepalive.Client{Host: "api", Dial: func(ctx context.Context) (net.Conn, error) { return client.Dial(ctx, "tcp", "", to.String()) }}
	run, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ka.Run(run, 200*time.Millisecond) }()
	t.Cleanup(func() { stop(); <-done })
	l.strandAcross(t, "api", "a client outside the cluster, at node-1's NodePort "+to.String(), func() (keepalive.Log, error) { return ka.Log(), nil })
	// In Prometheus, the stale flow's alert went pending while the agent
	// waited out its grace, and is gone now that the flow is: it never
	// stood the rule's two minutes.
	poll.UntilNoted(t, poll.Patience, "GhostwatchStaleConntrackFlows pending while the flow was stale, and gone since", func() (bool, string) {
		was, err := l.prom.query(`max_over_time(ALERTS{alertname="GhostwatchStaleConntrackFlows",alertstate="pending"}[10m])`)
		if err != nil {
			return false, err.Error()
		}
		now, err := l.prom.alerts()
		if err != nil {
			return false, err.Error()
		}
		_, standing := now["GhostwatchStaleConntrackFlows"]
		return len(was) == 1 && !standing, fmt.Sprintf("pending in the last 10 minutes: %v; alerts now: %v", was, now)
	})
}

// Seed 001 on two real nodes, the chart installed with stale-nat-flow on:
// a client pod on node-1 holds a pooled connection to a Deployment
// behind a ClusterIP, its one replica on node-2 (strandAcross).
func TestSeed001OnRealNodes(t *testing.T) {
	l := startLab(t, withReleaseImage, withSecondNode)
	l.installRemedying(t)
	l.deployment(t, "db", 1, onNode("node-2"), shortGrace)
	url := l.service(t, "db")
	l.deployment(t, "app", 1, onNode("node-1"), func(spec *corev1.PodSpec) {
		c := &spec.Containers[0]
		c.Name, c.Args = "app", []string{"client", "-target", strings.TrimPrefix(url, "http://")}
		c.ReadinessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Port = "/healthz", intstr.FromInt32(8081)
	})
	app := l.only(t, "app")
	l.strandAcross(t, "db", "client pod "+app.Name+" on node-1, at the ClusterIP "+url, func() (keepalive.Log, error) {
		body, err := l.get("http://" + netip.AddrPortFrom(netip.MustParseAddr(app.Status.PodIP), 8081).String() + "/log")
		if err != nil {
			return nil, err
		}
		var log keepalive.Log
		return log, json.Unmarshal([]byte(body), &log)
	})
}

// installRemedying installs the chart with stale-nat-flow on, and waits
// for an agent on each node and both controller replicas.
func (l *lab) installRemedying(t *testing.T) {
	t.Helper()
	l.install(t, l.chartValues()+"  remedies: [stale-nat-flow]\n")
}

// shortGrace gives a pod 2 s to stop, not 30.
func shortGrace(spec *corev1.PodSpec) { spec.TerminationGracePeriodSeconds = new(int64(2)) }

// strandAcross plays what seeds 001 and 004 share, once the client (who)
// sends its requests to Deployment name's one replica on node-2 through
// node-1's kube-proxy: node-2 loses its network to node-1, and a rolling
// update moves the replica to node-1. node-2's kubelet stops the old pod,
// whose FIN is lost with the link, and deletes it. node-1's kernel keeps
// translating the client's connection to the deleted pod, its request
// retransmitted into the void. The agent on node-1 deletes the flow after
// its grace; the next retransmission is translated anew, to the new
// replica, which resets it; the client's next connection is answered by
// the new replica. log reads the client's log.
func (l *lab) strandAcross(t *testing.T, name, who string, log func() (keepalive.Log, error)) {
	t.Helper()
	ctx := context.Background()
	old := l.only(t, name)
	read := func() (keepalive.Log, string) {
		got, err := log()
		if err != nil {
			return nil, err.Error()
		}
		return got, got.String()
	}
	poll.UntilNoted(t, poll.Patience, who+" answered by "+old.Name+" on one connection", func() (bool, string) {
		got, says := read()
		return got.AnsweredBy(old.Name, 1) >= 3, says
	})

	t.Log("node-2 cut off from node-1; the replica moved to node-1 by a rolling update")
	cut := time.Now()
	if err := l.link.Cut(l.nodes[1].Net); err != nil {
		t.Fatal(err)
	}
	l.moveTo(t, name, "node-1")
	var moved corev1.Pod
	poll.UntilNoted(t, poll.Patience, "the old replica deleted, the new one Ready on node-1", func() (bool, string) {
		list, err := l.cp.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 || list.Items[0].Name == old.Name || !ready(&list.Items[0]) {
			return false, l.pods(ctx, "default")
		}
		moved = list.Items[0]
		return true, ""
	})
	deleted := time.Now()

	var reset, answered keepalive.Outcome
	poll.UntilNoted(t, poll.Patience, "the client's connection to "+old.Name+" reset, and a new one answered by "+moved.Name, func() (bool, string) {
		got, says := read()
		reset, answered = got.ResetThenAnswered(1, moved.Name)
		return !answered.At.IsZero(), says
	})
	t.Logf("the partition at 0 s; the old replica deleted at %.1f s; the client's connection reset at %.1f s, answered by %s at %.1f s",
		deleted.Sub(cut).Seconds(), reset.At.Sub(cut).Seconds(), moved.Name, answered.At.Sub(cut).Seconds())

	m, err := l.agentMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(m, "ghostwatch_remedy_actions_total", `rule="stale-nat-flow"`, `result="done"`); n < 1 {
		t.Errorf("node-1's agent deleted %v stale flows: %v", n, m)
	}
	e := l.waitEvent(t, "default", "StaleFlowDeleted", func(corev1.Event) bool { return true })
	t.Logf("Event on %s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
}

// onNode binds a pod to node name by its hostname label.
func onNode(name string) func(*corev1.PodSpec) {
	return func(spec *corev1.PodSpec) {
		spec.NodeSelector = map[string]string{"kubernetes.io/hostname": name}
	}
}

// only is Deployment name's one pod.
func (l *lab) only(t *testing.T, name string) corev1.Pod {
	t.Helper()
	list, err := l.cp.Admin.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d pods of %s, want one", len(list.Items), name)
	}
	return list.Items[0]
}

// nodePort creates NodePort Service name in front of Deployment name's
// replicas, each of edit changing its spec, and returns its node port.
func (l *lab) nodePort(t *testing.T, name string, edit ...func(*corev1.ServiceSpec)) uint16 {
	t.Helper()
	spec := corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": name},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}
	for _, e := range edit {
		e(&spec)
	}
	svc, err := l.cp.Admin.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return uint16(svc.Spec.Ports[0].NodePort)
}

// moveTo rolls Deployment name's pods onto node: a change of its
// template, as any rolling update.
func (l *lab) moveTo(t *testing.T, name, node string) {
	t.Helper()
	ctx := context.Background()
	d, err := l.cp.Admin.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onNode(node)(&d.Spec.Template.Spec)
	if _, err := l.cp.Admin.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
