package calico

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source"
	calicosrc "github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// env is a real control plane with Calico's CRDs installed.
type env struct {
	cp  *controlplane.ControlPlane
	c   *Cluster
	api kubernetes.Interface
	// nodes are the nodes registered (node), by name.
	nodes map[string]*Node
}

// newEnv starts the control plane and installs Calico; without the
// binaries (scripts/kube-binaries.sh, scripts/calico-binaries.sh) the test
// skips, and fails under CI.
func newEnv(t *testing.T) *env {
	t.Helper()
	kubeBin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	calicoBin, err := FindBinaries()
	if errors.Is(err, ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: kubeBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range cp.Logs() {
				logTail(t, l)
			}
		}
		cp.Stop()
	})
	c, err := Install(ctx, cp, calicoBin)
	if err != nil {
		t.Fatal(err)
	}
	return &env{cp: cp, c: c, api: cp.Admin, nodes: map[string]*Node{}}
}

func logTail(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("%s ends:\n%s", path, strings.Join(lines, "\n"))
}

// node registers a Node and its files (AddNode).
func (e *env) node(t *testing.T, name string) *Node {
	t.Helper()
	n, err := e.c.AddNode(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	e.nodes[name] = n
	return n
}

// runPod runs a pod on node (RunPod) while the node's nodename file holds
// bookedAs, then gives the file the node's own name back, as calico-node
// does at its start.
func (e *env) runPod(t *testing.T, name, node, bookedAs string) *Pod {
	t.Helper()
	n := e.nodes[node]
	if err := n.SetNodename(bookedAs); err != nil {
		t.Fatal(err)
	}
	p, err := n.RunPod(context.Background(), "default", name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetNodename(n.Name); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s on %s: calico-ipam booked %s under node %q", name, n.Name, p.IP, p.BookedAs)
	return p
}

// allocation is the attribute of the block allocation holding ip, or nil
// when the address is free.
func (e *env) allocation(t *testing.T, ip netip.Addr) *IPAMAttribute {
	t.Helper()
	_, a, err := e.c.Booked(context.Background(), ip)
	if err != nil {
		t.Fatal(err)
	}
	if a == nil {
		return nil
	}
	return &a.IPAMAttribute
}

// handleExists reports whether the IPAMHandle of id exists.
func (e *env) handleExists(t *testing.T, id string) bool {
	t.Helper()
	ok, err := e.c.HandleExists(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestStaleNodenameAllocationCollected reproduces Calico issue #12257
// (seed 002) with Calico's own binaries: calico-ipam books a pod's address
// under the stale node name its nodename file holds (node-a) while the pod
// runs on node-b; calico-kube-controllers' leak collector reads the node
// mismatch as a rescheduled pod and frees the address the running pod
// still has; the next pod on node-a is then given the same address. The
// controls keep their allocations through the same scans: a pod on node-b
// booked under node-b, and one booked under the stale name of node-c,
// deleted since, which the collector does not compare.
func TestStaleNodenameAllocationCollected(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.node(t, "node-a")
	e.node(t, "node-b")
	e.node(t, "node-c")
	if err := e.c.Apply(ctx, NodePools("node-a", "node-b", "node-c")); err != nil {
		t.Fatal(err)
	}
	const grace = 5 * time.Second
	kcOptions := KubeControllersOptions{LeakGracePeriod: grace}
	if err := e.c.Configure(ctx, kcOptions); err != nil {
		t.Fatal(err)
	}

	misbooked := e.runPod(t, "misbooked", "node-b", "node-a")
	control := e.runPod(t, "control", "node-b", "node-b")
	deletedNode := e.runPod(t, "booked-on-deleted", "node-b", "node-c")
	if err := e.api.CoreV1().Nodes().Delete(ctx, "node-c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Pod{misbooked, control, deletedNode} {
		a := e.allocation(t, p.IP)
		if a == nil || a.HandleID == nil || *a.HandleID != p.Request.HandleID() || a.Secondary["node"] != p.BookedAs || a.Secondary["pod"] != p.Name {
			t.Fatalf("%s's allocation of %s: %+v, want handle %s booked under %s", p.Name, p.IP, a, p.Request.HandleID(), p.BookedAs)
		}
	}
	e.golden(t, "seed002")

	// ghostwatch, before kube-controllers runs: both wrong bookings. The
	// configuration's status holds no running configuration (calicoctl
	// stores an empty one), so the grace is the spec's, which the
	// collector runs with once it starts: the booking under an existing
	// node is critical, with the window; the other a warning.
	if got := e.misbookings(t); !slices.Equal(got, []string{misbooked.IP.String() + " critical", deletedNode.IP.String() + " warning"}) {
		t.Errorf("ghostwatch before kube-controllers runs: %v", got)
	}

	before, beforeJSON, beforeOut, err := e.c.IPAMCheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("calicoctl ipam check before the collector runs:\n%s", beforeOut)
	goldenReport(t, "seed002/ipam-check-before.json", beforeJSON)
	for _, p := range []*Pod{misbooked, control, deletedNode} {
		if as := before.Allocations[p.IP.String()]; len(as) != 1 || !as[0].InUse {
			t.Errorf("ipam check before the collector: %s: %+v, want one allocation in use", p.IP, as)
		}
	}

	start := time.Now()
	kc, err := e.c.StartKubeControllers(ctx, kcOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, kc.Log())
		}
	})
	// ghostwatch, once it runs: the misbooking is critical, with the
	// window in which the collector frees it; the booking under a node
	// that no longer exists, which the collector keeps, stays a warning.
	// The collector takes at least one grace to free it.
	if got := e.misbookings(t); !slices.Equal(got, []string{misbooked.IP.String() + " critical", deletedNode.IP.String() + " warning"}) {
		t.Errorf("ghostwatch while kube-controllers runs: %v", got)
	}

	// One grace period after the first scan, plus up to a scan interval
	// (grace/2), plus the start of the process: never sooner than the
	// grace, however much later a busy machine makes it.
	poll.Until(t, poll.Patience, "the misbooked allocation freed", func() bool {
		if err := kc.Check(); err != nil {
			t.Fatal(err)
		}
		return e.allocation(t, misbooked.IP) == nil && !e.handleExists(t, misbooked.Request.HandleID())
	})
	if took := time.Since(start); took < grace {
		t.Errorf("kube-controllers freed %s %v after it started, within its leakGracePeriod %v", misbooked.IP, took, grace)
	}
	t.Logf("kube-controllers freed %s (pod %s, running, booked under %s) %s after it started (leakGracePeriod %s)",
		misbooked.IP, misbooked.Name, misbooked.BookedAs, time.Since(start).Round(100*time.Millisecond), grace)
	for _, words := range [][]string{
		{"Pod rescheduled on new node. Allocation no longer valid", ipField(misbooked.IP), `new="node-b"`, `old="node-a"`},
		{"Candidate IP leak", ipField(misbooked.IP)},
		{"Confirmed IP leak", ipField(misbooked.IP)},
		{"Garbage collecting leaked IP address", ipField(misbooked.IP)},
	} {
		if ok, err := kc.Logged(words...); err != nil || !ok {
			t.Errorf("kube-controllers' log has no line with %q (%v)", words, err)
		}
	}
	// The controls were judged in every one of those scans: they are
	// still allocated, and no scan made them even candidates.
	for _, p := range []*Pod{control, deletedNode} {
		if a := e.allocation(t, p.IP); a == nil || a.HandleID == nil || *a.HandleID != p.Request.HandleID() {
			t.Errorf("%s's allocation of %s: %+v, want it kept", p.Name, p.IP, a)
		}
		if !e.handleExists(t, p.Request.HandleID()) {
			t.Errorf("%s's handle %s was deleted", p.Name, p.Request.HandleID())
		}
		if ok, err := kc.Logged("Candidate IP leak", ipField(p.IP)); err != nil || ok {
			t.Errorf("kube-controllers took %s's %s for a leak (%v)", p.Name, p.IP, err)
		}
	}

	after, afterJSON, afterOut, err := e.c.IPAMCheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("calicoctl ipam check after the collector freed %s:\n%s", misbooked.IP, afterOut)
	goldenReport(t, "seed002/ipam-check-after-gc.json", afterJSON)
	if as := after.Allocations[misbooked.IP.String()]; len(as) != 0 {
		t.Errorf("ipam check after the collector: %s: %+v, want no allocation", misbooked.IP, as)
	}

	e.golden(t, "seed002/after-gc")

	// Calico hands a freed address out again after the block's other free
	// addresses: the fourth pod booked under node-a gets it, and two
	// running pods then have it.
	var second *Pod
	for i := 1; i <= 4 && second == nil; i++ {
		if p := e.runPod(t, fmt.Sprintf("next-%d", i), "node-a", "node-a"); p.IP == misbooked.IP {
			second = p
		}
	}
	if second == nil {
		t.Fatalf("no pod of four booked under node-a got the freed %s", misbooked.IP)
	}
	// ghostwatch: the duplicate calicoctl does not count.
	dups := 0
	for _, f := range e.ghostwatch(t).Findings {
		if f.Rule == rule.DuplicatePodIPID && f.Subject.IP == second.IP.String() && f.Severity == finding.Critical {
			dups++
		}
	}
	if dups != 1 {
		t.Errorf("ghostwatch with %s on two pods: %d duplicate-pod-ip findings, want 1", second.IP, dups)
	}
	dup, dupJSON, dupOut, err := e.c.IPAMCheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("calicoctl ipam check with %s on two pods:\n%s", second.IP, dupOut)
	goldenReport(t, "seed002/ipam-check-duplicate.json", dupJSON)
	if as := dup.Allocations[second.IP.String()]; len(as) != 1 || len(as[0].Owners) != 2 {
		t.Errorf("ipam check with the duplicate: %s: %+v, want one allocation with two owners", second.IP, as)
	}
}

// misbookings are ipam-misbooked's findings on the live cluster, "IP
// severity" each; a critical one must give the window the collector frees
// it in, from its booking and the grace.
func (e *env) misbookings(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range e.ghostwatch(t).Findings {
		if f.Rule != rule.IPAMMisbookedID {
			t.Errorf("unexpected %s %s: %s", f.Severity, f.Rule, f.Message)
			continue
		}
		t.Logf("ghostwatch: %s %s: %s", f.Severity, f.Rule, f.Message)
		out = append(out, f.Subject.IP+" "+f.Severity.String())
		if f.Severity != finding.Critical {
			continue
		}
		booked, err := time.Parse(time.RFC3339, f.Evidence["booked_at"].(string))
		grace, gerr := time.ParseDuration(f.Evidence["leak_grace_period"].(string))
		if err != nil || gerr != nil {
			t.Fatalf("booked_at %v, leak_grace_period %v", f.Evidence["booked_at"], f.Evidence["leak_grace_period"])
		}
		if want := booked.Add(grace).UTC().Format(time.RFC3339); f.Evidence["freed_from"] != want {
			t.Errorf("freed_from %v, want the booking plus the grace, %s", f.Evidence["freed_from"], want)
		}
	}
	return out
}

// ghostwatch runs the cluster rules on the live cluster, as a scan does:
// the Pods and Nodes, and Calico's ledger through the API server.
func (e *env) ghostwatch(t *testing.T) *audit.Result {
	t.Helper()
	cal, err := calicosrc.NewAPISource(e.cp.Config(controlplane.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	res := audit.Run(context.Background(), audit.Config{
		Sources: []source.Source{&live.APISource{Client: e.api, Timeout: 30 * time.Second}, cal},
		Rules:   []rule.Rule{&rule.IPAMMisbooked{}, &rule.DuplicatePodIP{}},
	})
	if err := res.Incomplete(); err != nil {
		t.Fatal(err)
	}
	return res
}

// golden compares the IPAM objects as stored (less what changes from run
// to run) with testdata/dir/*.json.
func (e *env) golden(t *testing.T, dir string) {
	t.Helper()
	for _, r := range []struct {
		file string
		list func() ([]unstructured.Unstructured, error)
	}{
		{"ipamblocks.json", func() ([]unstructured.Unstructured, error) { return e.c.List(context.Background(), IPAMBlocks) }},
		{"ipamhandles.json", func() ([]unstructured.Unstructured, error) { return e.c.List(context.Background(), IPAMHandles) }},
		{"blockaffinities.json", func() ([]unstructured.Unstructured, error) {
			return e.c.List(context.Background(), BlockAffinities)
		}},
	} {
		objs, err := r.list()
		if err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for _, o := range objs {
			out = append(out, stable(o.Object))
		}
		b, err := marshalStable(out)
		if err != nil {
			t.Fatal(err)
		}
		compareGolden(t, filepath.Join("testdata", dir, r.file), b)
	}
}

// goldenReport compares a calicoctl ipam check report, less what changes
// from run to run, with testdata/file.
func goldenReport(t *testing.T, file string, report []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(report, &m); err != nil {
		t.Fatal(err)
	}
	b, err := marshalStable(stable(m))
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, filepath.Join("testdata", file), b)
}

// volatile are the fields whose values change from run to run: the
// golden files hold a placeholder instead. A block's sequence numbers start
// at the clock's nanoseconds when it is made.
var volatile = map[string]bool{
	"resourceVersion": true, "uid": true, "creationTimestamp": true, "managedFields": true,
	"timestamp": true, "clusterGUID": true, "clusterInformationRevision": true,
	"sequenceNumber": true, "UID": true, "Revision": true,
}

// stable replaces the volatile fields' values with "<volatile>", and the
// values of sequenceNumberForAllocation, keeping its keys (the allocated
// ordinals).
func stable(v map[string]any) map[string]any {
	out := map[string]any{}
	for k, x := range v {
		switch m, isMap := x.(map[string]any); {
		case volatile[k]:
			out[k] = "<volatile>"
		case k == "sequenceNumberForAllocation" && isMap:
			seq := map[string]any{}
			for ord := range m {
				seq[ord] = "<volatile>"
			}
			out[k] = seq
		default:
			out[k] = stableValue(x)
		}
	}
	return out
}

// marshalStable is stable(v) as indented JSON, with < and > as they are.
func marshalStable(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return b.Bytes(), err
}

func stableValue(x any) any {
	switch x := x.(type) {
	case map[string]any:
		return stable(x)
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = stableValue(y)
		}
		return out
	}
	return x
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n got: %s\nwant: %s", path, got, want)
	}
}

// ipField is how kube-controllers logs an allocation's address.
func ipField(ip netip.Addr) string { return `ip="` + ip.String() + `"` }
