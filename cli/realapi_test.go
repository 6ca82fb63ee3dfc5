package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// realCluster starts a real API server holding node worker-1, a NodePort
// Service, and two running pods of worker-1 that report one address
// (10.244.1.9: a duplicate-pod-ip), one of them with a service account's
// token in its environment and an annotation; it returns an admin's
// kubeconfig.
func realCluster(t *testing.T) (kubeconfig string, admin kubernetes.Interface) {
	t.Helper()
	bin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
		return "", nil
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	kubeconfig, err = cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	api := cp.Admin
	node, err := api.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.60.1"}}
	if _, err := api.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}},
	}}
	if _, err := api.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	for _, name := range []string{"web-a", "web-b"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"example.com/api-key": "ANNOTATEDSECRET"}},
			Spec: corev1.PodSpec{NodeName: "worker-1", Containers: []corev1.Container{{Name: "web", Image: "web:1",
				Env: []corev1.EnvVar{{Name: "API_TOKEN", Value: calicoJWT}}}}},
		}
		p, err := api.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.9", PodIPs: []corev1.PodIP{{IP: "10.244.1.9"}}, StartTime: &start}
		if _, err := api.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return kubeconfig, api
}

// On a host that is not a node of the cluster (its name is no Node's), a
// scan judges no node's ledgers: this host's conntrack table, proxy and
// IPAM files are not read as a node's, and the report says so, with what
// to do; the cluster-wide rules run, and the exit code follows what they
// found. Before, the host's (empty) table was judged as node "vm"'s and
// the scan exited 0, and --rule duplicate-pod-ip exited 2 because a
// NodePort Service made the node's frontends matter.
func TestScanOffTheNode(t *testing.T) {
	kubeconfig, _ := realCluster(t)
	t.Setenv("NODE_NAME", "laptop")
	notNode := `"laptop" ($NODE_NAME) is not among the cluster's nodes (its nodes: worker-1)`

	code, out, errOut := run(t, "", "scan", "--kubeconfig", kubeconfig, "-o", "json")
	if code != ExitFindings {
		t.Errorf("whole scan: exit %d, want %d (the duplicate); stderr %s", code, ExitFindings, errOut)
	}
	r := decodeOne(t, out)
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = s.Status + ": " + s.Detail
	}
	for _, src := range []string{"host", "conntrack", "proxy", "hostlocal", "calico-node"} {
		if !strings.HasPrefix(status[src], "not given: this host is not a node of the cluster: "+notNode) || !strings.Contains(status[src], "run the scan on the node, or pass --node-name NODE") {
			t.Errorf("source %s = %q", src, status[src])
		}
	}
	skipped := map[string]bool{}
	for _, sk := range r.Skipped {
		skipped[sk.Rule] = sk.NotGiven
	}
	for _, id := range []string{"stale-nat-flow", "misdelivered-flow", "stale-nodename-file"} {
		if !skipped[id] {
			t.Errorf("%s not said to be not judged: %+v", id, r.Skipped)
		}
	}
	if len(r.Findings) != 1 || r.Findings[0].Rule != "duplicate-pod-ip" {
		t.Errorf("findings: %+v", r.Findings)
	}

	// The table says what was not judged and why.
	code, out, _ = run(t, "", "scan", "--kubeconfig", kubeconfig)
	if code != ExitFindings || !strings.Contains(out, "Not judged:") || !strings.Contains(out, "stale-nat-flow, misdelivered-flow") || !strings.Contains(out, notNode) {
		t.Errorf("table: exit %d:\n%s", code, out)
	}

	// A cluster-wide rule runs wherever kubectl does.
	code, out, errOut = run(t, "", "scan", "--kubeconfig", kubeconfig, "--rule", "duplicate-pod-ip", "-o", "json")
	if r := decodeOne(t, out); code != ExitFindings || len(r.Findings) != 1 {
		t.Errorf("--rule duplicate-pod-ip: exit %d, %d findings; stderr %s", code, len(r.Findings), errOut)
	}

	// A scan of the node's rules alone judges nothing here, and says why.
	code, _, errOut = run(t, "", "scan", "--kubeconfig", kubeconfig, "--rule", "stale-nat-flow")
	if code != ExitError || !strings.Contains(errOut, "no rule could run") || !strings.Contains(errOut, notNode) {
		t.Errorf("--rule stale-nat-flow: exit %d, stderr %s", code, errOut)
	}
}

// A bundle collect wrote from a real API server holds the objects the
// rules read, trimmed: no pod's environment (a token there), no
// annotation but ghostwatch's; analyze still finds the duplicate from it.
func TestCollectTrimsTheObjects(t *testing.T) {
	kubeconfig, _ := realCluster(t)
	bundle := filepath.Join(t.TempDir(), "b.tar.gz")
	code, _, errOut := run(t, "", "collect", "--kubeconfig", kubeconfig, "--node-name", "worker-1", "--host-root", nodeWithCredentials(t), "-f", bundle, "--timeout", "20s")
	if code != ExitError || !strings.Contains(errOut, "wrote "+bundle) {
		// The controller's replicas are not there: exit 2.
		t.Fatalf("collect: exit %d, stderr %s", code, errOut)
	}
	f, err := os.Open(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range append(tokenShapes, regexp.MustCompile(`ANNOTATEDSECRET|API_TOKEN`)) {
		if m := re.Find(all); m != nil {
			t.Errorf("the bundle holds %q (%s)", m, re)
		}
	}
	tr := tar.NewReader(strings.NewReader(string(all)))
	found := false
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == bundleObjects {
			b, _ := io.ReadAll(tr)
			found = strings.Contains(string(b), `"name":"web-a"`) && strings.Contains(string(b), `"podIP":"10.244.1.9"`) && strings.Contains(string(b), `"kind":"Pod"`)
		}
	}
	if !found {
		t.Errorf("%s lacks the pods", bundleObjects)
	}
	code, out, errOut := run(t, "", "analyze", bundle, "-o", "json", "--rule", "duplicate-pod-ip")
	if r := decodeOne(t, out); code != ExitFindings || len(r.Findings) != 1 {
		t.Errorf("analyze: exit %d, %+v; stderr %s", code, r.Findings, errOut)
	}
}
