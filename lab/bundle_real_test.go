package lab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The conntrack incident on the real control plane (a pooled connection
// left translated to a deleted replica): a live scan on the node, then
// `ghostwatch collect` there at once, then `ghostwatch analyze` of the
// tarball elsewhere, give the same findings; the bundle holds no token and
// no Secret, and its manifest lists what it holds.
func TestRealCollectThenAnalyzeIsTheLiveScan(t *testing.T) {
	e := newRealEnv(t, controlplane.ProxyIPTables)
	// A controller replica, whose address history the bundle takes,
	// from before the incident.
	e.installController(t)
	replica := e.controllerReplicaIn(t, "controller-a", e.node)
	app, fe := e.pooledReplicas(t)
	ctx, cancel := context.WithCancel(context.Background())
	k := e.killPinned(t, keepAlive(ctx, app, fe), "db", "pg", 1, metav1.DeleteOptions{}, realObserve)
	// The client goes: nothing opens new flows while the evidence is read.
	cancel()
	if len(e.flowsTo(t, k.ip)) == 0 {
		t.Fatalf("no flow left to the deleted %s", k.ip)
	}
	// The node's files: a host-local store and its configuration.
	root := t.TempDir()
	for name, data := range map[string]string{
		"etc/cni/net.d/10-lab.conflist":               `{"cniVersion":"1.0.0","name":"lab","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.7.0/24"}]]}}]}`,
		"var/lib/cni/networks/lab/last_reserved_ip.0": "10.244.7.9",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := e.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	inNode := func(args ...string) ([]byte, error) {
		var stderr bytes.Buffer
		cmd := exec.Command("ip", append([]string{"netns", "exec", e.node.Net.Name(), ghostwatchBinary(t)}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, stderr.String())
		}
		return out, err
	}
	live, err := inNode("scan", "--kubeconfig="+kubeconfig, "--node-name=node-1", "--host-root="+root, "-o", "json")
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("scan: %v", err)
	}
	bundle := filepath.Join(t.TempDir(), "incident.tar.gz")
	// The replica runs in the node's namespace, as a pod of it would;
	// its history is asked directly (a port-forward needs a kubelet).
	var collectErr error
	e.eventually(t, 30*time.Second, "collect to take the replica's history", func() bool {
		_, collectErr = inNode("collect", "--kubeconfig="+kubeconfig, "--node-name=node-1", "--host-root="+root, "-f", bundle, "--history-url="+replica.url)
		return collectErr == nil
	})
	if collectErr != nil {
		t.Fatalf("collect: %v", collectErr)
	}
	// Analyzed outside the node: nothing of the node is read.
	analyzed, err := exec.Command(ghostwatchBinary(t), "analyze", bundle, "-o", "json").Output()
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("analyze: %v", err)
	}
	l, a := reportFindings(t, live), reportFindings(t, analyzed)
	if len(l) == 0 || !slices.ContainsFunc(l, func(s string) bool {
		return strings.Contains(s, "stale-nat-flow") && strings.Contains(s, k.ip.String())
	}) {
		t.Fatalf("the live scan found %q: want the ghost of %s", l, k.ip)
	}
	t.Logf("live scan and analyze: %q", l)
	if fmt.Sprint(l) != fmt.Sprint(a) {
		t.Errorf("findings differ:\n live    %q\n analyze %q", l, a)
	}

	// Collected again with a Consul token and a Serf key in the
	// environment and a password in an address: the bundle holds none.
	secret := filepath.Join(t.TempDir(), "secret.tar.gz")
	cmd := exec.Command("ip", "netns", "exec", e.node.Net.Name(), ghostwatchBinary(t), "collect", "--kubeconfig="+kubeconfig, "--node-name=node-1",
		"--host-root="+root, "-f", secret, "--history-url="+strings.Replace(replica.url, "http://", "http://operator:pw-5e3cr3t@", 1))
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_TOKEN=c0n5ul-t0ken-9f2a", "SERF_RPC_AUTH=53rf-k3y-77b1")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "pw-5e3cr3t") {
		t.Fatalf("collect: %v\n%s", err, out)
	}
	for name, data := range bundleFiles(t, secret) {
		for _, s := range []string{"pw-5e3cr3t", "c0n5ul-t0ken-9f2a", "53rf-k3y-77b1"} {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds %q", name, s)
			}
		}
	}

	// The ghost's address, told from the bundle alone: the deleted pod,
	// its flow left on node-1, and the finding.
	var ipErr bytes.Buffer
	ipCmd := exec.Command(ghostwatchBinary(t), "ip", k.ip.String(), "--bundle", bundle, "-o", "json")
	ipCmd.Stderr = &ipErr
	out, err := ipCmd.Output()
	if err != nil {
		t.Fatalf("ip --bundle: %v: %s\n%s", err, ipErr.String(), out)
	}
	var story struct {
		Tenures []struct{ Pod, Ended string }
		Flows   []struct {
			Node  string
			Total int
		}
		Findings []struct{ Rule string }
	}
	if err := json.Unmarshal(out, &story); err != nil {
		t.Fatal(err)
	}
	if len(story.Tenures) != 1 || story.Tenures[0].Pod != k.victim || story.Tenures[0].Ended != "deleted" ||
		len(story.Flows) != 1 || story.Flows[0].Node != "node-1" || story.Flows[0].Total == 0 ||
		len(story.Findings) != 1 || story.Findings[0].Rule != "stale-nat-flow" {
		t.Errorf("ip %s --bundle: %s", k.ip, out)
	}

	// What the bundle holds, and what it never does.
	files := bundleFiles(t, bundle)
	for _, want := range []string{"manifest.json", "cluster/objects.json", "controller/history.json", "node/conntrack.txt", "node/sysctls.json", "node/addresses.json", "node/proxy.json",
		"node/host/etc/cni/net.d/10-lab.conflist", "node/host/var/lib/cni/networks/lab/last_reserved_ip.0"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the bundle lacks %s (it holds %v)", want, keys(files))
		}
	}
	token, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if bytes.Contains(data, []byte("kind\":\"Secret")) || bytes.Contains(data, []byte(e.cp.Server)) || bytes.Contains(data, tokenOf(token)) {
			t.Errorf("%s holds a Secret, the API server's address or the kubeconfig's token", name)
		}
	}
	var m struct {
		Node         string
		Collected    []struct{ Path, What string }
		NotCollected []struct {
			What, Why string
			Absent    bool
		}
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || m.Node != "node-1" || len(m.Collected) != len(files)-1 {
		t.Errorf("manifest %+v (%v): want node-1 and every other file listed", m, err)
	}
	// No Calico and no gossip cluster here: said, not missed.
	if len(m.NotCollected) != 2 || !m.NotCollected[0].Absent || !strings.Contains(m.NotCollected[0].What, "Calico") ||
		!m.NotCollected[1].Absent || !strings.Contains(m.NotCollected[1].What, "gossip") {
		t.Errorf("not collected %+v: want Calico's IPAM and the gossip lists, absent", m.NotCollected)
	}
	// The node's own settings: conntrack timestamps are on in its namespace.
	if !bytes.Contains(files["node/sysctls.json"], []byte(`"net.netfilter.nf_conntrack_timestamp": "1"`)) {
		t.Errorf("sysctls: %s", files["node/sysctls.json"])
	}
	if !bytes.Contains(files["controller/history.json"], []byte(`"pod":"`+k.victim+`"`)) {
		t.Errorf("the history does not hold the deleted %s: %s", k.victim, files["controller/history.json"])
	}
}

// reportFindings lists a JSON report's findings as rule, severity and
// subject, sorted.
func reportFindings(t *testing.T, report []byte) []string {
	t.Helper()
	var r struct {
		Findings []struct {
			Rule, Severity string
			Subject        map[string]any
		}
	}
	if err := json.Unmarshal(report, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, report)
	}
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("%s %s %v", f.Rule, f.Severity, f.Subject))
	}
	slices.Sort(out)
	return out
}

// bundleFiles reads the files of a tar.gz into memory.
func bundleFiles(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// tokenOf is the bearer token a kubeconfig holds.
func tokenOf(kubeconfig []byte) []byte {
	for _, l := range strings.Split(string(kubeconfig), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "token: "); ok {
			return []byte(strings.Trim(v, `"`))
		}
	}
	return []byte("no token in the kubeconfig")
}

// scanAndBundle scans node live (its files under root, the rules given as
// a --rule flag), then collects a bundle there (no controller asked: it is
// named as missing) and analyzes it: both reports' findings.
func scanAndBundle(ctx context.Context, t *testing.T, kubeconfig, node, root, rules string) (live, analyzed []string, err error) {
	return scanAndBundleIn(ctx, t, "", kubeconfig, node, root, rules)
}

// scanAndBundleIn is scanAndBundle with the scan and collect run in the
// network namespace netns ("": this one).
func scanAndBundleIn(ctx context.Context, t *testing.T, netns, kubeconfig, node, root, rules string) (live, analyzed []string, err error) {
	onNode := func(args ...string) *exec.Cmd {
		if netns == "" {
			return exec.CommandContext(ctx, ghostwatchBinary(t), args...)
		}
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns, ghostwatchBinary(t)}, args...)...)
	}
	l, err := onNode("scan", "--kubeconfig="+kubeconfig, "--node-name="+node, "--host-root="+root, rules, "-o", "json").Output()
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		return nil, nil, fmt.Errorf("scan: %w", err)
	}
	bundle := filepath.Join(t.TempDir(), node+".tar.gz")
	if out, err := onNode("collect", "--kubeconfig="+kubeconfig, "--node-name="+node, "--host-root="+root,
		"-f", bundle, "--history-url=http://127.0.0.1:1").CombinedOutput(); err != nil && !strings.Contains(string(out), "not collected: the controller") {
		return nil, nil, fmt.Errorf("collect: %w: %s", err, out)
	}
	var stderr strings.Builder
	acmd := exec.CommandContext(ctx, ghostwatchBinary(t), "analyze", bundle, rules, "-o", "json")
	acmd.Stderr = &stderr
	a, err := acmd.Output()
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		return nil, nil, fmt.Errorf("analyze: %w: %s", err, stderr.String())
	}
	return reportFindings(t, l), reportFindings(t, a), nil
}
