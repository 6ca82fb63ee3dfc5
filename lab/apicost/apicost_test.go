package apicost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// TestAPICost runs the harness small (300 pods on 10 Nodes, 20 Services,
// 30 replacements) on the real control plane and checks that it measures
// (both clients synced, their bytes and requests counted in both phases,
// the audit log read, the agent's requests told from kube-proxy's), and
// that the agent reads no more of the cluster than its node needs: what
// kube-proxy reads, its own node's pods, and pods by address
// (ScopeViolations).
func TestAPICost(t *testing.T) {
	testenv.RequireRoot(t, "needs root: runs kube-proxy and the agent in a node network namespace")
	bin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	res, err := Run(context.Background(), Config{
		Sizes:    Sizes{Pods: 300, Nodes: 10, Services: 20, Replacements: 30, Rate: 20},
		KubeBin:  bin,
		AgentBin: agentBinary(t),
		Progress: &progress,
	})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := res.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())

	for _, c := range res.Clients {
		if c.RSSAfterSync == 0 || c.RSSAfterChurn == 0 || c.HWM < c.RSSAfterChurn {
			t.Errorf("%s: RSS after sync %d, after the churn %d, peak %d: want all read", c.Name, c.RSSAfterSync, c.RSSAfterChurn, c.HWM)
		}
		for _, p := range c.Phases {
			if p.Requests == 0 && p.Phase == PhaseStart.String() {
				t.Errorf("%s, %s: no request in the audit log", c.Name, p.Phase)
			}
			if p.Received == 0 || p.Objects == 0 {
				t.Errorf("%s, %s: received %d bytes, %d objects; want both counted", c.Name, p.Phase, p.Received, p.Objects)
			}
			if len(p.Errors) > 0 {
				t.Errorf("%s, %s: the tap failed: %v", c.Name, p.Phase, p.Errors)
			}
		}
	}
	// Each client's requests are its own user's, and the agent's include
	// the pods it reads.
	kp, ag := res.Client(ClientKubeProxy), res.Client(ClientAgent)
	if len(kp.Requests) == 0 || len(ag.Requests) == 0 {
		t.Fatalf("audit log: %d requests of kube-proxy, %d of the agent; want some of each", len(kp.Requests), len(ag.Requests))
	}
	for _, r := range ag.Requests {
		if r.User != controlplane.UserAgent {
			t.Errorf("agent request %s by %s", r.Key(), r.User)
		}
	}
	if !hasRequest(ag.Requests, "list", "pods") || !hasRequest(ag.Requests, "watch", "pods") {
		t.Errorf("the agent's requests %v: want a list and a watch of pods", keys(ag.Requests))
	}
	if hasRequest(kp.Requests, "list", "pods") {
		t.Errorf("kube-proxy's requests %v include a list of pods", keys(kp.Requests))
	}
	if start := ag.Phase(PhaseStart); start.TapRequests == 0 || start.Objects < res.Sizes.Services+res.Sizes.Pods/res.Sizes.Nodes {
		t.Errorf("agent, start: %d requests through its tap, %d objects; want its lists of the %d Services and its node's %d pods counted",
			start.TapRequests, start.Objects, res.Sizes.Services, res.Sizes.Pods/res.Sizes.Nodes)
	}
	// The agent is held to its node: it asks what kube-proxy asks, its
	// own node's pods (spec.nodeName) and pods by address now and then.
	for _, r := range ScopeViolations(ag.Requests) {
		t.Errorf("the agent reads beyond its node: %s (%s)", r.Key(), r.URI)
	}
}

func hasRequest(reqs []AuditRequest, verb, resource string) bool {
	for _, r := range reqs {
		if r.Verb == verb && r.Resource == resource {
			return true
		}
	}
	return false
}

func keys(reqs []AuditRequest) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		if k := r.Key(); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// agentBinary is $GHOSTWATCH_AGENT_BIN, or ./cmd/ghostwatch built for the
// test.
func agentBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(AgentBinEnv); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "ghostwatch")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ghostwatch")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatal(fmt.Errorf("go build ./cmd/ghostwatch: %w\n%s", err, out))
	}
	return bin
}
