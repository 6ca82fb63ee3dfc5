package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// newHostLocalNode is the scenario's node in a directory of the test,
// with the real plugin, or stops the test when the plugin is not built.
func newHostLocalNode(t *testing.T) *wipeNode {
	t.Helper()
	bin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := newWipeNode(t.TempDir(), filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func start(t *testing.T, n *wipeNode, name string) netip.Addr {
	t.Helper()
	a, err := n.start(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func auditOf(t *testing.T, n *wipeNode) *audit.Result {
	t.Helper()
	r, err := n.audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Seed 003 with the real plugin: pods get .2, .3, .4; the store is wiped
// whole while they run. ghostwatch names .2 as the address the next ADD
// returns, with the sandbox the runtime's cache names for each pod. After
// hostlocal-reserve writes the reservations back under host-local's lock,
// the next real ADD gets a fresh address (.5). On a copy of the wiped node
// left alone, the same ADD returns .2: the duplicate.
func TestRealHostLocalWipe(t *testing.T) {
	n := newHostLocalNode(t)
	for i, name := range []string{"web-0", "web-1", "web-2"} {
		if got, want := start(t, n, name), netip.AddrFrom4([4]byte{10, 244, 2, byte(2 + i)}); got != want {
			t.Fatalf("pod %s got %s, want %s", name, got, want)
		}
	}
	if fs := auditOf(t, n).Findings; len(fs) != 0 {
		t.Fatalf("findings on a whole store: %+v", fs)
	}
	if err := os.RemoveAll(filepath.Join(n.root, "run/cni-ipam-state")); err != nil {
		t.Fatal(err)
	}
	alone, err := n.copyTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	res := auditOf(t, n)
	var targets []finding.Target
	for _, f := range res.Findings {
		if f.Rule != rule.IPAMUnbookedIPID {
			t.Errorf("unexpected finding %s %s", f.Rule, f.Message)
			continue
		}
		if f.Evidence["next_allocation"] != "10.244.2.2" {
			t.Errorf("%s: next allocation %v, want 10.244.2.2", f.Subject.IP, f.Evidence["next_allocation"])
		}
		if want := "sandbox-" + strings.TrimPrefix(f.Subject.Pod, "default/"); f.Evidence["container_id"] != want {
			t.Errorf("%s: container %v, want %s (from the runtime's cache)", f.Subject.IP, f.Evidence["container_id"], want)
		}
		if (f.Subject.IP == "10.244.2.2") != (f.Severity == finding.Critical) {
			t.Errorf("%s is %s", f.Subject.IP, f.Severity)
		}
		targets = append(targets, f.Target)
	}
	if len(targets) != 3 {
		t.Fatalf("%d unbooked IPs reported, want 3: %+v", len(targets), res.Findings)
	}

	// The repair, as the agent's remedy makes it.
	act := &remedy.Reservations{Root: n.root}
	for _, tgt := range targets {
		if err := act.Verify(context.Background(), tgt); err != nil {
			t.Fatalf("Verify %s: %v", tgt, err)
		}
		if err := act.Act(context.Background(), tgt); err != nil {
			t.Fatalf("Act %s: %v", tgt, err)
		}
	}
	if fs := auditOf(t, n).Findings; len(fs) != 0 {
		t.Errorf("findings after the repair: %+v", fs)
	}
	if got := start(t, n, "web-3"); got != netip.MustParseAddr("10.244.2.5") {
		t.Errorf("after the repair the next pod got %s, want a fresh 10.244.2.5", got)
	}
	// The repaired reservations are the runtime's own: its DEL frees them.
	if err := n.cni.DelNetworkList(context.Background(), n.list, &libcni.RuntimeConf{
		ContainerID: n.sandbox("web-1"), NetNS: filepath.Join(n.root, "netns", "web-1"), IfName: "eth0",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.root, "run/cni-ipam-state/kindnet/10.244.2.3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DEL of web-1's sandbox left its repaired reservation: %v", err)
	}

	// Without the repair.
	if got := start(t, alone, "web-3"); got != netip.MustParseAddr("10.244.2.2") {
		t.Errorf("without the repair the next pod got %s, want the duplicate 10.244.2.2", got)
	}
	dups := 0
	for _, f := range auditOf(t, alone).Findings {
		if f.Rule == rule.DuplicatePodIPID && f.Subject.IP == "10.244.2.2" {
			dups++
		}
	}
	if dups != 1 {
		t.Errorf("without the repair: %d duplicate-pod-ip findings on 10.244.2.2, want 1", dups)
	}
}

// The hostlocal-wipe lab, as `ghostwatch-lab hostlocal-wipe` runs it: its
// prediction and both endings, measured, and a timeline that says them.
func TestHostLocalWipeScenario(t *testing.T) {
	bin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res, err := HostLocalWipe(context.Background(), HostLocalOptions{Out: &out, CNIBin: filepath.Dir(bin)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Before, " ") != "10.244.2.2 10.244.2.3 10.244.2.4" || res.Predicted != "10.244.2.2" || len(res.Runs) != 2 {
		t.Fatalf("result %+v", res)
	}
	alone, repaired := res.Runs[0], res.Runs[1]
	if alone.Repaired || alone.NextPodIP != "10.244.2.2" || alone.DuplicateOf != "default/web-0" {
		t.Errorf("left alone: %+v, want the next pod on web-0's 10.244.2.2", alone)
	}
	if !repaired.Repaired || len(repaired.Written) != 3 || repaired.NextPodIP != "10.244.2.5" || repaired.DuplicateOf != "" {
		t.Errorf("repaired: %+v, want three reservations written and a fresh 10.244.2.5", repaired)
	}
	for _, want := range []string{
		"rm -rf /run/cni-ipam-state",
		"critical ipam-unbooked-ip: pod default/web-0 holds 10.244.2.2",
		"pod default/web-3: CNI ADD -> 10.244.2.2, which pod default/web-0 still holds",
		"critical duplicate-pod-ip: IP 10.244.2.2 is held by 2 pods",
		"hostlocal-reserve wrote 10.244.2.2 in /run/cni-ipam-state/kindnet for container sandbox-web-0 (eth0) of pod default/web-0",
		"after 3 reservations written back: the next pod got 10.244.2.5, a fresh address",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the timeline lacks %q:\n%s", want, out.String())
		}
	}
}

// The wiped store, on the real API server: with the node's pods there, a
// live scan of the node's files and the analysis of the bundle collect
// wrote find the same unbooked addresses as the lab's own audit.
func TestRealHostLocalWipeCollectThenAnalyze(t *testing.T) {
	bin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cp := startControlPlane(t, controlplane.Options{})
	kubeconfig, err := cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	rules := "--rule=ipam-unbooked-ip,ipam-leaked-ip,duplicate-pod-ip"
	var live, analyzed []string
	inspect := func(ctx context.Context, node, root string, pods []snapshot.Pod) error {
		if err := cp.RegisterNode(ctx, node, netip.MustParseAddr("172.18.0.4"), netip.MustParsePrefix("10.244.2.0/24")); err != nil {
			return err
		}
		for _, sp := range pods {
			p, err := cp.Admin.CoreV1().Pods(sp.Namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sp.Namespace, Name: sp.Name},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: sp.IPs[0].String(), PodIPs: []corev1.PodIP{{IP: sp.IPs[0].String()}}, StartTime: &metav1.Time{Time: time.Now()}}
			if _, err := cp.Admin.CoreV1().Pods(sp.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		var err error
		live, analyzed, err = scanAndBundle(ctx, t, kubeconfig, node, root, rules)
		return err
	}
	res, err := HostLocalWipe(ctx, HostLocalOptions{CNIBin: filepath.Dir(bin), Inspect: inspect})
	if err != nil {
		t.Fatal(err)
	}
	var lab []string
	for _, f := range res.Findings {
		if f.Rule == rule.IPAMUnbookedIPID {
			lab = append(lab, f.Subject.IP)
		}
	}
	t.Logf("the lab's audit: unbooked %v; live scan and analyze: %q", lab, live)
	if len(live) != len(lab) || len(lab) != 3 || fmt.Sprint(live) != fmt.Sprint(analyzed) {
		t.Errorf("live scan %q, analyze %q, the lab's own audit %v", live, analyzed, lab)
	}
}
