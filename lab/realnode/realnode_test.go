package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// lab is a control plane and real nodes, for a test.
type lab struct {
	cp  *controlplane.ControlPlane
	bed *netbed.Bed
	// node is the first of nodes.
	node  *Node
	nodes []*Node
	// link is the network between the two nodes, withSecondNode.
	link *netbed.Link
	// monitored: withMonitoring; prom, once started.
	monitored bool
	prom      *prometheus
}

// labOption is something more a test's lab needs.
type labOption int

// The options.
const (
	// withReleaseImage imports ghostwatch's release image
	// (BuildReleaseImage) into the nodes.
	withReleaseImage labOption = iota + 1
	// withSecondNode starts node-2 (172.18.0.3, pods in 10.244.2.0/24)
	// beside node-1, linked as two machines are.
	withSecondNode
	// withMonitoring installs the Prometheus Operator's CRDs, so that the
	// chart is installed with its ServiceMonitors and PrometheusRule
	// (chartValues), for startPrometheus.
	withMonitoring
	// withNFTables runs kube-proxy in nftables mode, not iptables.
	withNFTables
)

func startLab(t *testing.T, opts ...labOption) *lab {
	t.Helper()
	testenv.RequireRoot(t, "a real node creates network namespaces and runs containers")
	// Registered first, run last: the nodes leave no pod namespace, mount
	// or cgroup behind once stopped.
	before := podNamespaces(t)
	l := &lab{}
	t.Cleanup(func() {
		for _, ns := range podNamespaces(t) {
			// One a process is in is a pod's of another run's node: a pod
			// of these nodes that outlived them keeps its cgroup, which
			// checkLeftNothing reports.
			if !slices.Contains(before, ns) && !inUse(ns) {
				t.Errorf("the stopped nodes left the pod network namespace %s", ns)
			}
		}
		for _, n := range l.nodes {
			checkLeftNothing(t, n)
		}
	})
	ctx := context.Background()
	o := ClusterOptions{Nodes: 1, Release: slices.Contains(opts, withReleaseImage)}
	if slices.Contains(opts, withSecondNode) {
		o.Nodes = 2
	}
	if slices.Contains(opts, withNFTables) {
		o.Mode = controlplane.ProxyNFTables
	}
	c, err := StartCluster(ctx, o)
	switch {
	case errors.Is(err, controlplane.ErrNoBinaries), errors.Is(err, cni.ErrNoBinary), errors.Is(err, ErrNoCrictl), errors.Is(err, ErrNoRuntime):
		testenv.Unavailable(t, err.Error())
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	l.cp, l.bed, l.nodes, l.node, l.link = c.CP, c.Bed, c.Nodes, c.Nodes[0], c.Link
	for _, n := range l.nodes {
		// Registered after Stop, run before it: a failed test shows what
		// the ghostwatch pods said.
		t.Cleanup(func() {
			if t.Failed() {
				l.explain(t, n)
			}
		})
	}
	if slices.Contains(opts, withMonitoring) {
		if _, err := l.cp.InstallCRDs(ctx, os.DirFS("testdata/monitoring-crds")); err != nil {
			t.Fatal(err)
		}
		l.monitored = true
	}
	return l
}

// explain logs what the ghostwatch pods on n said, and the agent's
// readiness and findings, for a failed test.
func (l *lab) explain(t *testing.T, n *Node) {
	t.Logf("the ghostwatch pods' logs on %s end:\n%s", n.Name, n.LogTail("ghostwatch", 40))
	// The agent on the node's network, at the chart's port.
	base := "http://" + netip.AddrPortFrom(n.IP, 10280).String()
	if body, err := l.get(base + "/readyz"); err == nil {
		t.Logf("the agent's /readyz on %s: %s", n.Name, body)
	}
	if body, err := l.get(base + "/metrics"); err == nil {
		var keep []string
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, "ghostwatch_source_up") || strings.HasPrefix(line, "ghostwatch_findings") || strings.HasPrefix(line, "ghostwatch_audits_total") {
				keep = append(keep, strings.TrimSpace(line))
			}
		}
		t.Logf("the agent's metrics on %s:\n%s", n.Name, strings.Join(keep, "\n"))
	}
}

// checkLeftNothing fails t if the stopped node n left a mount, a log link
// or its cgroup.
func checkLeftNothing(t *testing.T, n *Node) {
	t.Helper()
	if points := mountsUnder(n.Dir); len(points) > 0 {
		t.Errorf("the stopped node %s left mounts: %s", n.Name, strings.Join(points, ", "))
	}
	links, _ := os.ReadDir(containerLogLinks)
	for _, e := range links {
		if target, _ := os.Readlink(filepath.Join(containerLogLinks, e.Name())); strings.HasPrefix(target, n.Dir+"/") {
			t.Errorf("the stopped node %s left a link to its container's log: %s", n.Name, e.Name())
		}
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, n.cgroupRoot)); err == nil {
			t.Errorf("the stopped node %s left its cgroup %s", n.Name, filepath.Join(h, n.cgroupRoot))
		}
	}
}

// web is the labpod HTTP backend's container, Ready by its own probe.
func web() corev1.Container {
	return corev1.Container{
		Name: "web", Image: LabpodImage, Args: []string{"serve"}, ImagePullPolicy: corev1.PullNever,
		Env:            []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
	}
}

// ready says whether p is Ready.
func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pods says where each pod of ns is: its node, phase, conditions and
// containers' states, for a message.
func (l *lab) pods(ctx context.Context, ns string) string {
	list, err := l.cp.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range list.Items {
		var conds []string
		for _, c := range p.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
		var states []string
		for _, c := range p.Status.ContainerStatuses {
			states = append(states, fmt.Sprintf("%s %+v", c.Name, c.State))
		}
		out = append(out, fmt.Sprintf("%s on %q: %s [%s] %s", p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(conds, "; "), strings.Join(states, "; ")))
	}
	return strings.Join(out, "\n")
}

// get is the body of GET url from inside the node.
func (l *lab) get(url string) (string, error) {
	c := l.node.Net.HTTPClient(5 * time.Second)
	// A client per call: its connection is closed with it, not left idle
	// to count against a server's limit (Prometheus accepts 512).
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body)), err
}

// A pod bound to the real node runs as a container from the lab's image:
// the kubelet reports it Ready by its own HTTP probe, host-local handed
// its IP out of the node's range and recorded it in its store, and it
// answers HTTP at that IP from the node.
func TestPodOnRealNode(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"},
		Spec:       corev1.PodSpec{NodeName: l.node.Name, Containers: []corev1.Container{web()}},
	}
	if _, err := l.cp.Admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip netip.Addr
	poll.UntilNoted(t, poll.Patience, "the pod Ready on the real node", func() (bool, string) {
		if err := l.node.Check(); err != nil {
			t.Fatal(err)
		}
		p, err := l.cp.Admin.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ready(p) {
			ip, _ = netip.ParseAddr(p.Status.PodIP)
			return true, ""
		}
		return false, fmt.Sprintf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	if !netip.MustParsePrefix("10.244.1.0/24").Contains(ip) {
		t.Fatalf("pod IP %s, want one of the node's range 10.244.1.0/24", ip)
	}
	if _, err := os.Stat(filepath.Join(l.node.HostLocalDir, ip.String())); err != nil {
		t.Errorf("host-local's store does not hold the pod's IP: %v", err)
	}
	got, err := l.get("http://" + netip.AddrPortFrom(ip, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	if got != "web-0" {
		t.Errorf("the pod answered %q, want its name web-0", got)
	}
	// The kubelet mounted the pod's ServiceAccount token, as on a cluster.
	p, err := l.cp.Admin.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }) {
		t.Error("the pod has no projected ServiceAccount token volume")
	}
}

// A Deployment's replicas are scheduled onto the real node, and its
// Service answers from both at its ClusterIP, through the node's real
// kube-proxy.
func TestDeploymentBehindAService(t *testing.T) {
	l := startLab(t)
	l.deployment(t, "web", 2)
	url := l.service(t, "web")
	seen := map[string]bool{}
	poll.UntilNoted(t, poll.Patience, "both replicas answering at the ClusterIP", func() (bool, string) {
		got, err := l.get(url)
		if err != nil {
			return false, err.Error()
		}
		seen[got] = true
		return len(seen) == 2, fmt.Sprintf("answered by %v", slices.Sorted(maps.Keys(seen)))
	})
	for name := range seen {
		if !strings.HasPrefix(name, "web-") {
			t.Errorf("answered by %q, not a replica of the Deployment", name)
		}
	}
}

// podNamespaces are the network namespaces the runtime made for pods
// (/run/netns/cni-...).
func podNamespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cni-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// inUse says whether a process is in the named network namespace.
func inUse(name string) bool {
	var st unix.Stat_t
	return unix.Stat(filepath.Join("/run/netns", name), &st) == nil && len(inNetns(st.Ino)) > 0
}

// Two real nodes linked as two machines are: a replica scheduled onto
// node-2 takes its IP from node-2's range, and node-1 reaches it at its
// Service's ClusterIP through node-1's kube-proxy and the link, as a
// client on one node reaches a backend on another (seed 001's shape).
func TestPodsAcrossRealNodes(t *testing.T) {
	l := startLab(t, withSecondNode)
	ctx := context.Background()
	l.deployment(t, "web", 1, func(spec *corev1.PodSpec) {
		spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-2"}
	})
	url := l.service(t, "web")
	var pod corev1.Pod
	poll.UntilNoted(t, poll.Patience, "the replica Ready on node-2", func() (bool, string) {
		for _, n := range l.nodes {
			if err := n.Check(); err != nil {
				t.Fatal(err)
			}
		}
		list, err := l.cp.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false, l.pods(ctx, "default")
		}
		pod = list.Items[0]
		return ready(&pod), l.pods(ctx, "default")
	})
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err != nil || pod.Spec.NodeName != "node-2" || !netip.MustParsePrefix("10.244.2.0/24").Contains(ip) {
		t.Fatalf("the replica runs on %q at %q, want node-2 in 10.244.2.0/24", pod.Spec.NodeName, pod.Status.PodIP)
	}
	var got string
	var err error
	poll.UntilNoted(t, poll.Patience, "node-1 answered by the replica on node-2 at the ClusterIP", func() (bool, string) {
		got, err = l.get(url)
		if err != nil {
			return false, err.Error()
		}
		return got == pod.Name, "answered " + got
	})
}
