package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "kernel test: needs root to create network namespaces (run the suite as root)")
}

// newBed makes a test bed of fresh namespaces, removed when the test ends;
// failing to remove them fails the test.
func newBed(t *testing.T) *netbed.Bed {
	t.Helper()
	bed, err := netbed.New(prefix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Errorf("closing the bed: %v", err)
		}
	})
	return bed
}

func prefix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return "gwl" + hex.EncodeToString(b)[:5]
}

func TestConntrackDeployScenario(t *testing.T) {
	requireRoot(t)
	var out bytes.Buffer
	res, err := ConntrackDeploy(context.Background(), Options{Out: &out, Prefix: prefix(), Observe: 3 * time.Second})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 1 {
		t.Fatalf("runs = %+v", res.Runs)
	}
	r := res.Runs[0]
	if r.FailedRequests == 0 || r.Recovered || !r.GhostStillMapped {
		t.Errorf("without the agent the client must fail and the ghost stay: %+v", r)
	}
	if len(r.Findings) != 1 || r.Findings[0].Rule != rule.StaleNATFlowID || r.Findings[0].Subject.IP != oldBackendIP.String() {
		t.Errorf("findings = %+v, want one stale-nat-flow for %s", r.Findings, oldBackendIP)
	}
	if !strings.Contains(out.String(), "is draining") {
		t.Errorf("timeline lacks the draining scan")
	}
	// What the in-memory API holds, and the kernel showing what the lab's
	// rules do: the client's address is kept.
	if !strings.Contains(out.String(), "Service web/api: externalTrafficPolicy not set") || strings.Contains(out.String(), "SNAT ->") {
		t.Errorf("timeline does not state the policy, or the node rewrote the client's address")
	}
	// One line for the first timeout, one counting the others.
	if strings.Count(out.String(), "request failed: timeout") != 1 || !strings.Contains(out.String(), "more requests failed the same way (timeout)") {
		t.Errorf("timeline does not show the timeouts once and count them")
	}
}

func TestConntrackDeployReuseIPScenario(t *testing.T) {
	requireRoot(t)
	var out bytes.Buffer
	res, err := ConntrackDeploy(context.Background(), Options{Out: &out, Prefix: prefix(), Observe: 10 * time.Second, ReuseIP: true})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if len(r.Findings) != 1 || r.Findings[0].Rule != rule.MisdeliveredFlowID || r.Findings[0].Subject.IP != oldBackendIP.String() ||
		r.Findings[0].Subject.Pod != "web/api-v2" {
		t.Errorf("findings = %+v, want one misdelivered-flow for %s held by web/api-v2", r.Findings, oldBackendIP)
	}
	// The new pod resets the connection it never accepted; the client
	// reconnects through the Service and the old entry can carry no more.
	if !r.Recovered || r.GhostStillMapped {
		t.Errorf("after the reset the client must recover and the old entry be closed: %+v", r)
	}
	// Both kinds of failure are on the timeline, in the order they came.
	timeout, reset := strings.Index(out.String(), "request failed: timeout"), strings.Index(out.String(), "request failed: connection reset")
	if timeout < 0 || reset < timeout {
		t.Errorf("timeline does not show the timeout, then the reset")
	}
}

func TestConntrackPoolScenario(t *testing.T) {
	requireRoot(t)
	var out bytes.Buffer
	res, err := ConntrackPool(context.Background(), Options{Out: &out, Prefix: prefix(), Observe: 2 * time.Second})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if r.FailedRequests == 0 || r.Recovered || !r.GhostStillMapped {
		t.Errorf("the pooled connection must stay broken: %+v", r)
	}
	if len(r.Findings) != 1 || r.Findings[0].Rule != rule.StaleNATFlowID || r.Findings[0].Subject.Service != "db/postgres" {
		t.Errorf("findings = %+v, want one stale-nat-flow for db/postgres", r.Findings)
	}
}

// With the agent the stale flow is deleted and the client recovers (within a
// second on an idle machine: logged, not held to it); without it the flow
// is still there when the run ends.
func TestConntrackDeployWithAgent(t *testing.T) {
	requireRoot(t)
	var out bytes.Buffer
	res, err := ConntrackDeploy(context.Background(), Options{Out: &out, Prefix: prefix(), Observe: 5 * time.Second, WithAgent: true})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 || res.Runs[0].Agent || !res.Runs[1].Agent {
		t.Fatalf("runs = %+v", res.Runs)
	}
	without, with := res.Runs[0], res.Runs[1]
	if without.Recovered || !without.GhostStillMapped {
		t.Errorf("without the agent the ghost must outlive the run: %+v", without)
	}
	if !with.Recovered || with.GhostStillMapped {
		t.Errorf("with the agent the client must recover and the ghost be gone: %+v", with)
	}
	// How fast is measured by the benchmarks (BenchmarkSideBySide, a
	// pod's death), not bounded here: a loaded machine slows the agent
	// and the client alike.
	t.Logf("with the agent the error window was %.3fs", with.ErrorWindowSeconds)
	if !strings.Contains(out.String(), "StaleFlowDeleted on Service web/api") {
		t.Errorf("no StaleFlowDeleted Event on the Service in the timeline")
	}
	checkAgentActions(t, res)
}

// checkAgentActions checks that the run with the agent records its
// deletion of the client's stale flow, and the run without records none.
func checkAgentActions(t *testing.T, res *Result) {
	t.Helper()
	without, with := res.Runs[0], res.Runs[1]
	if without.AgentActions != nil {
		t.Errorf("actions without the agent: %+v", without.AgentActions)
	}
	deleted := 0
	for _, a := range with.AgentActions {
		if a.Result == remedy.Done && a.Rule == rule.StaleNATFlowID && strings.HasPrefix(a.Flow, "tcp "+externalIP.String()+":") &&
			strings.HasSuffix(a.Flow, " -> 192.168.50.1:30080") && strings.HasPrefix(a.Reason, "deleted "+a.Flow) && a.AtSeconds > 0 {
			deleted++
		}
	}
	if deleted != 1 {
		t.Errorf("agent actions %+v, want one deletion of the client's flow", with.AgentActions)
	}
}

// namespacesOf lists the network namespaces named prefix-*.
func namespacesOf(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := netbed.Namespaces(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A timeline nobody reads any more (stdout closed under the lab) stops the
// run, which removes its namespaces and says so in its error.
func TestScenarioStopsWhenTheTimelineFails(t *testing.T) {
	requireRoot(t)
	p := prefix()
	// The seventh write fails: the node and the old pod exist by then.
	w := &brokenWriter{ok: 6, err: syscall.EPIPE}
	res, err := ConntrackDeploy(context.Background(), Options{Out: w, Prefix: p})
	t.Log("\n" + strings.Join(w.lines, ""))
	if err == nil || !errors.Is(err, syscall.EPIPE) || !strings.Contains(err.Error(), "interrupted: writing the timeline") ||
		!strings.Contains(err.Error(), "removed every namespace it created") {
		t.Fatalf("result %+v, error %v; want the run stopped by the failed write", res, err)
	}
	if !strings.Contains(strings.Join(w.lines, ""), "pod web/api-v1 running") {
		t.Errorf("the write failed before the lab had built anything")
	}
	if left := namespacesOf(t, p); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if c, err := netbed.ClaimPrefix(p); err != nil {
		t.Errorf("the prefix is still held: %v", err)
	} else {
		c.Release()
	}
	if w.writes != 7 {
		t.Errorf("%d writes, want 7: none after the one that failed", w.writes)
	}
}

// The timeline states the NodePort Service's externalTrafficPolicy as each
// control plane's API holds it, and what the node does with the client's
// address.
func TestTrafficPolicyIsWhatTheScenarioCreates(t *testing.T) {
	ctx := context.Background()
	sc := deployScenario
	cl := NewCluster(time.Now)
	if err := addService(ctx, cl, sc); err != nil {
		t.Fatal(err)
	}
	svc, err := cl.Client.CoreV1().Services(sc.namespace).Get(ctx, sc.service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		svc          *corev1.Service
		real         bool
		policy, path string
	}{
		{"memory", svc, false,
			"externalTrafficPolicy not set (the in-memory API sets no defaults; a real API server would set Cluster)",
			"the lab's DNAT rules keep the client's address (no SNAT), as kube-proxy does for Local"},
		{"real", labService(sc), true,
			"externalTrafficPolicy Local",
			"kube-proxy keeps the client's address (no SNAT) and sends NodePort traffic only to endpoints on this node"},
		{"real, Cluster", &corev1.Service{Spec: corev1.ServiceSpec{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster}}, true,
			"externalTrafficPolicy Cluster",
			"kube-proxy masquerades NodePort traffic (SNAT to the node)"},
	} {
		policy, path := trafficPolicy(tc.svc, tc.real)
		if policy != tc.policy || !strings.HasPrefix(path, tc.path) {
			t.Errorf("%s: %q, %q; want %q, %q...", tc.name, policy, path, tc.policy, tc.path)
		}
	}
}

// The client's first connection is stranded while its entry, by its
// conntrack ID, still carries traffic to the old backend; a reconnection
// from the same port is another entry with the same tuple (the old one,
// reset, gave way to it), and is not the ghost.
func TestStrandedEntry(t *testing.T) {
	first := netip.MustParseAddrPort("203.0.113.10:43966")
	entry := func(id uint32, state string) *snapshot.Flow {
		return &snapshot.Flow{ID: id, State: state,
			Orig:  snapshot.Tuple{Src: first.Addr(), SrcPort: first.Port(), Dst: netip.MustParseAddr("192.168.50.1"), DstPort: 30080},
			Reply: snapshot.Tuple{Src: oldBackendIP, SrcPort: 8080, Dst: first.Addr(), DstPort: first.Port()}}
	}
	for _, c := range []struct {
		f    *snapshot.Flow
		id   uint32
		want bool
	}{
		{entry(7, "ESTABLISHED"), 7, true},
		{entry(7, "ESTABLISHED"), 0, true}, // the ID not known yet: the tuple decides
		{entry(8, "ESTABLISHED"), 7, false},
		{entry(7, "CLOSE"), 7, false},
		{entry(7, "TIME_WAIT"), 7, false},
	} {
		if got := strandedEntry(c.f, first, c.id); got != c.want {
			t.Errorf("entry %d %s, first ID %d: stranded %v, want %v", c.f.ID, c.f.State, c.id, got, c.want)
		}
	}
	other := entry(7, "ESTABLISHED")
	other.Orig.SrcPort = 40000
	if strandedEntry(other, first, 7) {
		t.Error("an entry from another port is the first connection's")
	}
}
