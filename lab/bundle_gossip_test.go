package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The gossip incident on real Serf agents and the real API server: a
// member named after its address dies, a new pod gets the address. While
// the controller (report only) reports the ghost, `ghostwatch collect`
// takes the member list its leader read, and `ghostwatch analyze` of the
// bundle finds what the controller found.
func TestRealCollectThenAnalyzeGossipGhost(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	e.installController(t)
	clusters := filepath.Join(t.TempDir(), "gossip-clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {system: serf, namespace: gossip}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hist := loopbackPort(t)
	metrics := e.realController(t, "--gossip-interval=1s", "--gossip-clusters="+clusters, "--history-listen="+hist)

	serfGhost(t, e, metrics)
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
		Findings []struct{ Rule, Severity, Message string }
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
		for _, f := range r.Findings {
			t.Logf("the bundle's %s %s: %s", f.Rule, f.Severity, f.Message)
		}
	}
}
