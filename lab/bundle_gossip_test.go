package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// The gossip incident on real Serf agents and the real API server: a
// member named after its address dies, a new pod gets the address. While
// the controller (report only) reports the ghost, `ghostwatch collect`
// takes the member list its leader read, and `ghostwatch analyze` of the
// bundle finds what the controller found.
func TestRealCollectThenAnalyzeGossipGhost(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	ctx := context.Background()
	ms, err := deploy.Controller()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, ok := m.Object.(*corev1.Namespace); ok {
			continue
		}
		if err := createObject(ctx, e.cp.Admin, m.Object); err != nil {
			t.Fatalf("%s: %v", m.File, err)
		}
	}
	clusters := filepath.Join(t.TempDir(), "gossip-clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {system: serf, namespace: gossip}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hist := loopbackPort(t)
	metrics := e.realController(t, "--gossip-interval=1s", "--gossip-clusters="+clusters, "--history-listen="+hist)

	survivor := serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.MustParseAddrPort("127.0.0.3:0"), RPC: netip.MustParseAddrPort("127.0.0.3:0")})
	old := serftest.Start(t, serftest.Config{Name: "node-127-0-0-2", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	old.Join(t, survivor.Gossip)
	rpcPort := netip.MustParseAddrPort(survivor.RPC).Port()
	if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gossip"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, ip string, start time.Time, annotations map[string]string) {
		p, err := e.api.CoreV1().Pods("gossip").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gossip", Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "serf", Image: "serf:0.10.2"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}}
		if _, err := e.api.CoreV1().Pods("gossip").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	serfPod := map[string]string{sourcegossip.AnnotationGossip: "serf"}
	pod("serf-0", "127.0.0.3", time.Now().Add(-time.Hour), map[string]string{sourcegossip.AnnotationGossip: "serf", sourcegossip.AnnotationGossipPort: fmt.Sprint(rpcPort)})
	pod("serf-1", "127.0.0.2", time.Now().Add(-time.Hour), serfPod)
	e.eventually(t, time.Minute, "the controller to read both members alive", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_gossip_members{cluster="gossip/serf",status="alive",system="serf"} 2`)
	})
	started := time.Now().Add(6 * time.Second)
	old.Kill()
	if err := e.api.CoreV1().Pods("gossip").Delete(ctx, "serf-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	pod("serf-2", "127.0.0.2", started, serfPod)
	newcomer := serftest.Start(t, serftest.Config{Name: "node-8c1f3e", Gossip: netip.MustParseAddrPort("127.0.0.2:0")})
	newcomer.Join(t, survivor.Gossip)
	e.eventually(t, time.Minute, "the controller to report the ghost", func() bool {
		return strings.Contains(metrics(t), `ghostwatch_findings{rule="gossip-ghost-member",severity="critical"} 1`)
	})

	// The controller's findings, by rule and severity, as it publishes
	// them, then the bundle's.
	counts := regexp.MustCompile(`(?m)^ghostwatch_findings\{rule="(gossip-[a-z-]+)",severity="([a-z]+)"\} ([1-9][0-9]*)$`)
	var want []string
	for _, m := range counts.FindAllStringSubmatch(metrics(t), -1) {
		want = append(want, fmt.Sprintf("%s %s x%s", m[1], m[2], m[3]))
	}
	slices.Sort(want)
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "gossip.tar.gz")
	if out, err := exec.Command(ghostwatchBinary(t), "collect", "--kubeconfig="+kubeconfig, "--node-name=node-1", "--host-root="+t.TempDir(),
		"-f", bundle, "--history-url=http://"+hist).CombinedOutput(); err != nil {
		t.Fatalf("collect: %v\n%s", err, out)
	}
	if _, ok := bundleFiles(t, bundle)["controller/gossip.json"]; !ok {
		t.Fatal("the bundle holds no member list")
	}
	out, err := exec.Command(ghostwatchBinary(t), "analyze", bundle, "--rule=gossip-ghost-member,gossip-ip-identity", "-o", "json").Output()
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("analyze: %v\n%s", err, out)
	}
	var r struct {
		Findings []struct{ Rule, Severity string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range r.Findings {
		n[f.Rule+" "+f.Severity]++
	}
	var got []string
	for k, c := range n {
		got = append(got, fmt.Sprintf("%s x%d", k, c))
	}
	slices.Sort(got)
	t.Logf("the controller and the bundle: %q", want)
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the bundle's findings %q, the controller's %q", got, want)
	}
}
