package realnode

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
)

// Seed 003 as its report plays it, on the real node with the chart
// installed (remedies off): replicas on one node, the kubelet stopped,
// host-local's state directory removed, the kubelet started, the
// replicas scaled up. The agent reports ipam-unbooked-ip on the running
// pods before the duplicate exists, critical for the IP host-local hands
// out next; the scale-up then hands a running pod's IP to a second pod, for
// real; the controller reports duplicate-pod-ip with an Event on both.
func TestSeed003OnRealNode(t *testing.T) {
	l := seed003Wiped(t, "")
	t.Log("the replicas scaled up")
	l.scale(t, "web", 6)
	var dup []string
	poll.UntilNoted(t, poll.Patience, "two running pods with the same IP", func() (bool, string) {
		byIP := map[string][]string{}
		for name, ip := range l.running(t, "default") {
			byIP[ip] = append(byIP[ip], name)
		}
		for _, names := range byIP {
			if len(names) > 1 {
				slices.Sort(names)
				dup = names
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", byIP)
	})
	t.Logf("duplicate: %v", dup)
	for _, pod := range dup {
		e := l.waitEvent(t, "default", sink.EventReason(rule.DuplicatePodIPID), func(e corev1.Event) bool {
			return e.InvolvedObject.Name == pod
		})
		if e.Type != corev1.EventTypeWarning {
			t.Errorf("the duplicate's Event on %s is %s, want Warning", pod, e.Type)
		}
		t.Logf("Event on %s: %s", pod, e.Message)
	}
	// The chart's alerts fire in Prometheus: the duplicate at once, the
	// unbooked IPs once they have stood the rule's minute.
	l.prom.waitAlert(t, "GhostwatchDuplicatePodIP", "firing", poll.Patience)
	l.prom.waitAlert(t, "GhostwatchUnbookedPodIP", "firing", 3*time.Minute)
}

// With hostlocal-reserve on, the agent writes the running replicas'
// reservations back into the wiped store before the scale-up, and the
// scale-up hands out fresh IPs: no duplicate appears.
func TestSeed003PreventedOnRealNode(t *testing.T) {
	l := seed003Wiped(t, "  remedies: [hostlocal-reserve]\n")
	before := l.running(t, "default")
	poll.UntilNoted(t, poll.Patience, "the running replicas' reservations written back", func() (bool, string) {
		held := map[string]bool{}
		for _, ip := range l.node.HandedOut() {
			held[ip.String()] = true
		}
		var missing []string
		for name, ip := range before {
			if !held[ip] && strings.HasPrefix(name, "web-") {
				missing = append(missing, name+" "+ip)
			}
		}
		return len(missing) == 0, "not held: " + strings.Join(missing, ", ")
	})
	t.Log("the replicas scaled up")
	l.scale(t, "web", 6)
	byIP := map[string][]string{}
	for name, ip := range l.running(t, "default") {
		byIP[ip] = append(byIP[ip], name)
	}
	for ip, names := range byIP {
		if len(names) > 1 {
			t.Errorf("IP %s handed to %v despite the reservations written back", ip, names)
		}
	}
}

// seed003Wiped plays seed 003 up to the scale-up: four replicas, the
// chart installed with agentValues added under agent:, the kubelet
// stopped, host-local's store removed, the kubelet started; then waits
// until the agent reports ipam-unbooked-ip, critical for the IP
// host-local hands out next, before anything else changed.
func seed003Wiped(t *testing.T, agentValues string) *lab {
	t.Helper()
	l := startLab(t, withReleaseImage, withMonitoring)
	ctx := context.Background()
	// The replicas first, so that they hold the range's first IPs and the
	// controller's pods the next: the duplicates the scale-up makes are
	// the replicas'.
	l.deployment(t, "web", 4)
	kubeconfig, err := l.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's shipped settings: it watches host-local's store, and
	// audits when the store is wiped, not at its next full audit.
	values := l.chartValues() + agentValues
	if _, err := InstallChart(ctx, kubeconfig, "gw", "ghostwatch", values, t.Logf); err != nil {
		t.Fatal(err)
	}
	l.allReady(t, "ghostwatch", 3)
	l.prom = l.startPrometheus(t, "ghostwatch")
	l.prom.waitTargetsUp(t, `namespace="ghostwatch"`, 3)
	before := l.running(t, "default")

	t.Log("the kubelet stopped, host-local's state directory removed, the kubelet started")
	l.node.StopKubelet()
	if err := os.RemoveAll(l.node.HostLocalDir); err != nil {
		t.Fatal(err)
	}
	if err := l.node.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	// Before any duplicate: the agent reports the running replicas' IPs
	// unbooked, critical for the one host-local hands out next (its
	// findings are its metrics, its readiness and its nodes/findings
	// answer; Events are the controller's, and the agent's actions').
	poll.UntilNoted(t, poll.Patience, "the agent reporting ipam-unbooked-ip, critical", func() (bool, string) {
		m, err := l.agentMetrics()
		if err != nil {
			return false, err.Error()
		}
		return m[`ghostwatch_findings{rule="ipam-unbooked-ip",severity="critical"}`] >= 1, fmt.Sprintf("%v", m)
	})
	if got := l.running(t, "default"); !maps.Equal(got, before) {
		t.Fatalf("the pods changed before the scale-up: %v, then %v", before, got)
	}
	return l
}

// deployment creates Deployment name of n labpod web replicas, its pod
// spec changed by each of edit, and waits until they are available.
func (l *lab) deployment(t *testing.T, name string, n int32, edit ...func(*corev1.PodSpec)) {
	t.Helper()
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{Containers: []corev1.Container{web()}}
	for _, e := range edit {
		e(&spec)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := l.cp.Admin.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.available(t, name, n)
}

// service creates Service name (port 80) in front of Deployment name's
// replicas and returns its ClusterIP's URL.
func (l *lab) service(t *testing.T, name string) string {
	t.Helper()
	svc, err := l.cp.Admin.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80).String()
}

// scale sets Deployment name's replicas and waits until they are
// available.
func (l *lab) scale(t *testing.T, name string, n int32) {
	t.Helper()
	ctx := context.Background()
	s, err := l.cp.Admin.AppsV1().Deployments("default").GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = n
	if _, err := l.cp.Admin.AppsV1().Deployments("default").UpdateScale(ctx, name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	l.available(t, name, n)
}

func (l *lab) available(t *testing.T, name string, n int32) {
	t.Helper()
	ctx := context.Background()
	poll.UntilNoted(t, poll.Patience, fmt.Sprintf("Deployment %s: %d replicas available", name, n), func() (bool, string) {
		if err := l.node.Check(); err != nil {
			t.Fatal(err)
		}
		d, err := l.cp.Admin.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == n && d.Status.Replicas == n, l.pods(ctx, "default")
	})
}

// allReady waits until ns holds n pods, every one Ready.
func (l *lab) allReady(t *testing.T, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	poll.UntilNoted(t, 3*time.Minute, fmt.Sprintf("%d pods Ready in %s", n, ns), func() (bool, string) {
		if err := l.node.Check(); err != nil {
			t.Fatal(err)
		}
		list, err := l.cp.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		up := 0
		for i := range list.Items {
			if ready(&list.Items[i]) {
				up++
			}
		}
		return len(list.Items) == n && up == n, l.pods(ctx, ns)
	})
}

// running is each Running pod of ns with its IP.
func (l *lab) running(t *testing.T, ns string) map[string]string {
	t.Helper()
	list, err := l.cp.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		if p.Status.PodIP != "" {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out
}

// waitEvent waits for an Event of reason in ns that match accepts.
func (l *lab) waitEvent(t *testing.T, ns, reason string, match func(corev1.Event) bool) corev1.Event {
	t.Helper()
	var got corev1.Event
	poll.UntilNoted(t, poll.Patience, "an Event "+reason+" in "+ns, func() (bool, string) {
		list, err := l.cp.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if match(e) {
				got = e
				return true, ""
			}
			seen = append(seen, e.InvolvedObject.Name+": "+e.Message)
		}
		return false, fmt.Sprintf("%d of that reason: %s", len(list.Items), strings.Join(seen, "; "))
	})
	return got
}

// agentMetrics are the ghostwatch_ samples of the agent on the first
// node, read on its network at the chart's port, by series.
func (l *lab) agentMetrics() (map[string]float64, error) {
	body, err := l.get("http://" + netip.AddrPortFrom(l.node.IP, 10280).String() + "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "ghostwatch_") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// sum adds the samples of metric name whose series hold every label of
// labels (as name="value").
func sum(m map[string]float64, name string, labels ...string) float64 {
	var n float64
	for series, v := range m {
		metric, rest, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		if !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(rest, l) }) {
			n += v
		}
	}
	return n
}
