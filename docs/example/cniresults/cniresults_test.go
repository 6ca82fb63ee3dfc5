package cniresults

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// cluster is the kube source of the tests: the pods of node-a, as the
// agent's informers would hold them.
type cluster struct{ pods []snapshot.Pod }

func (cluster) Name() string { return "kube" }
func (c cluster) Collect(_ context.Context, s *snapshot.Snapshot) error {
	s.Kube = &snapshot.Kube{Pods: c.pods}
	return nil
}

const cachedWeb0 = `{"kind":"cniCacheV1","containerId":"c0ffee","ifName":"eth0","networkName":"k8s-pod-network",
 "cniArgs":[["K8S_POD_NAMESPACE","shop"],["K8S_POD_NAME","web-0"],["K8S_POD_UID","uid-web-0"]],
 "result":{"cniVersion":"1.0.0","ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}]}}`

// hostRoot returns a host root whose result cache holds files, plus a
// FIFO and a symlink, which are not read.
func hostRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "var/lib/cni/results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// The example ledger and rule run through the audit as a node agent runs
// them: web-0's sandbox is gone, its result still cached, and web-1 holds
// its address.
func TestOrphanThroughTheAudit(t *testing.T) {
	root := hostRoot(t, map[string]string{"k8s-pod-network-c0ffee-eth0": cachedWeb0})
	pods := []snapshot.Pod{{UID: "uid-web-1", Namespace: "shop", Name: "web-1", Node: "node-a", Phase: snapshot.PodRunning,
		IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}}
	res := audit.Run(context.Background(), audit.Config{
		NodeName: "node-a",
		Sources:  []source.Source{cluster{pods}, &Source{HostRoot: root}},
		Rules:    []rule.Rule{&Orphan{}},
	})
	if err := res.Incomplete(); err != nil {
		t.Fatal(err)
	}
	if st, _ := res.Snapshot.Source(Name); st.Detail != "1 cached result" {
		t.Errorf("status %+v", st)
	}
	if len(res.Findings) != 1 || res.Findings[0].Subject.Pod != "web-1" || res.Findings[0].Subject.IP != "10.244.1.5" ||
		!strings.Contains(res.Findings[0].Message, "for pod shop/web-0, which no longer runs here; pod shop/web-1 holds it now") {
		t.Errorf("findings %+v", res.Findings)
	}
	// web-0 running again: its own result, no finding.
	pods = append(pods, snapshot.Pod{UID: "uid-web-0", Namespace: "shop", Name: "web-0", Node: "node-a", Phase: snapshot.PodRunning})
	res = audit.Run(context.Background(), audit.Config{NodeName: "node-a", Sources: []source.Source{cluster{pods}, &Source{HostRoot: root}}, Rules: []rule.Rule{&Orphan{}}})
	if len(res.Findings) != 0 {
		t.Errorf("findings while the cached pod runs: %+v", res.Findings)
	}
}

// A node without the cache has no such ledger: the rule is not
// applicable there. A file that is not a cached result is an error that
// names it, and the rule is skipped.
func TestSourceUnsupportedAndMalformed(t *testing.T) {
	res := audit.Run(context.Background(), audit.Config{NodeName: "node-a",
		Sources: []source.Source{cluster{}, &Source{HostRoot: t.TempDir()}}, Rules: []rule.Rule{&Orphan{}}})
	if st, _ := res.Snapshot.Source(Name); st.Status != snapshot.StatusUnsupported || !strings.Contains(st.Detail, "var/lib/cni/results does not exist") {
		t.Errorf("without the cache: %+v", st)
	}
	if len(res.Skipped) != 1 || !res.Skipped[0].NotApplicable {
		t.Errorf("skipped %+v", res.Skipped)
	}
	root := hostRoot(t, map[string]string{"k8s-pod-network-x-eth0": `{"kind":"something else"}`})
	res = audit.Run(context.Background(), audit.Config{NodeName: "node-a",
		Sources: []source.Source{cluster{}, &Source{HostRoot: root}}, Rules: []rule.Rule{&Orphan{}}})
	if st, _ := res.Snapshot.Source(Name); st.Status != snapshot.StatusError || !strings.Contains(st.Detail, `k8s-pod-network-x-eth0: kind "something else": not libcni's cniCacheV1`) {
		t.Errorf("a stray file: %+v", st)
	}
	if snapshot.LedgerOf[Results](res.Snapshot, Name) != nil || len(res.Skipped) != 1 || res.Skipped[0].NotApplicable {
		t.Errorf("a failed collection left a ledger, or the rule ran: %+v", res.Skipped)
	}
}

// FuzzParse: no input makes the parser panic, and what it accepts has
// addresses that are valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(cachedWeb0))
	f.Add([]byte(`{"kind":"cniCacheV1","result":{"ips":[{"address":"fd00::1/64"}]}}`))
	f.Add([]byte(`{"kind":"cniCacheV1","cniArgs":[["K8S_POD_NAME"]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		for _, a := range r.IPs {
			if !a.IsValid() {
				t.Errorf("accepted an invalid address from %q", b)
			}
		}
	})
}

// wireAgent is how the agent runs the ledger: one more of its node's
// ledgers, and the rule among its rules (cli/agent.go). It is built, not
// run, here: it must compile.
func wireAgent(hostRoot string, sources []source.Source, rules []rule.Rule) agent.Config {
	return agent.Config{
		NodeName: "node-a",
		Sources:  sources,
		Ledgers:  []source.Source{&Source{HostRoot: hostRoot}},
		Rules:    append(rules, &Orphan{}),
		Now:      time.Now,
	}
}

func TestWireAgent(t *testing.T) {
	cfg := wireAgent("/host", nil, nil)
	if len(cfg.Ledgers) != 1 || cfg.Ledgers[0].Name() != Name || cfg.Rules[0].Info().ID != OrphanID {
		t.Errorf("%+v", cfg)
	}
}
