package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// lab is a control plane and one real node, for a test.
type lab struct {
	cp   *controlplane.ControlPlane
	node *Node
}

func startLab(t *testing.T) *lab {
	t.Helper()
	testenv.RequireRoot(t, "a real node creates network namespaces and runs containers")
	kube, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	cniBin := filepath.Dir(plugin)
	if err := Check(kube, cniBin); errors.Is(err, ErrNoRuntime) {
		testenv.Unavailable(t, err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	// Registered first, run last: the node leaves no pod namespace, mount
	// or cgroup behind once stopped.
	before := podNamespaces(t)
	var n *Node
	t.Cleanup(func() {
		if n == nil {
			return
		}
		for _, ns := range podNamespaces(t) {
			if !slices.Contains(before, ns) {
				t.Errorf("the stopped node left the pod network namespace %s", ns)
			}
		}
		if points := mountsUnder(n.Dir); len(points) > 0 {
			t.Errorf("the stopped node left mounts: %s", strings.Join(points, ", "))
		}
		links, _ := os.ReadDir(containerLogLinks)
		for _, e := range links {
			if target, _ := os.Readlink(filepath.Join(containerLogLinks, e.Name())); strings.HasPrefix(target, n.Dir+"/") {
				t.Errorf("the stopped node left a link to its container's log: %s", e.Name())
			}
		}
		for _, h := range cgroupHierarchies() {
			if _, err := os.Stat(filepath.Join(h, n.cgroupRoot)); err == nil {
				t.Errorf("the stopped node left its cgroup %s", filepath.Join(h, n.cgroupRoot))
			}
		}
	})
	ctx := context.Background()
	images, err := BuildImages(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	bed, err := netbed.New("gwn" + hex.EncodeToString(b)[:5])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: kube})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	n, err = Start(ctx, cp, bed, "node-1", Options{
		IP: netip.MustParseAddr("172.18.0.2"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
		KubeBin: kube, CNIBin: cniBin, Images: []string{images},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return &lab{cp: cp, node: n}
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
		Spec: corev1.PodSpec{
			NodeName: l.node.Name,
			Containers: []corev1.Container{{
				Name: "web", Image: LabpodImage, Args: []string{"serve"}, ImagePullPolicy: corev1.PullNever,
				Env:            []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}},
		},
	}
	if _, err := l.cp.Admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip netip.Addr
	poll.UntilNoted(t, 2*time.Minute, "the pod Ready on the real node", func() (bool, string) {
		if err := l.node.Check(); err != nil {
			t.Fatal(err)
		}
		p, err := l.cp.Admin.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ip, _ = netip.ParseAddr(p.Status.PodIP)
				return true, ""
			}
		}
		return false, fmt.Sprintf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	if !netip.MustParsePrefix("10.244.1.0/24").Contains(ip) {
		t.Fatalf("pod IP %s, want one of the node's range 10.244.1.0/24", ip)
	}
	if _, err := os.Stat(filepath.Join(l.node.HostLocalDir, ip.String())); err != nil {
		t.Errorf("host-local's store does not hold the pod's IP: %v", err)
	}
	resp, err := l.node.Net.HTTPClient(5 * time.Second).Get("http://" + netip.AddrPortFrom(ip, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := strings.TrimSpace(string(body)); got != "web-0" {
		t.Errorf("the pod answered %q, want its name web-0", got)
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
