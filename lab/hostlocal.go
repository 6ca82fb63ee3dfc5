package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
)

// HostLocalOptions tunes the hostlocal-wipe scenario.
type HostLocalOptions struct {
	// Out receives the timeline; nil discards it.
	Out io.Writer
	// CNIBin is the directory holding the host-local plugin
	// (scripts/cni-plugins.sh); "" means $GHOSTWATCH_CNI_BIN.
	CNIBin string
	// Pods is how many pods run on the node before the wipe. Default 3.
	Pods int
	// Inspect, when set, is called once the store is wiped and ghostwatch
	// has judged it, before anything else runs, with the node's name, its
	// files' root and its pods: a look from outside.
	Inspect func(ctx context.Context, node, root string, pods []snapshot.Pod) error
}

// HostLocalResult is what the hostlocal-wipe scenario measured.
type HostLocalResult struct {
	Scenario string `json:"scenario"`
	// Before are the addresses the pods got, in order.
	Before []string `json:"pod_ips"`
	// Predicted is the address ghostwatch said the next ADD returns.
	Predicted string            `json:"predicted_next_ip"`
	Runs      []WipeRun         `json:"runs"`
	Findings  []finding.Finding `json:"findings"`
}

// WipeRun is one ending of the incident: the next pod's ADD with or
// without the repair.
type WipeRun struct {
	Repaired bool `json:"repaired"`
	// Written are the reservations hostlocal-reserve wrote back.
	Written []string `json:"reservations_written"`
	// NextPodIP is what the next pod on the node got.
	NextPodIP string `json:"next_pod_ip"`
	// DuplicateOf names the running pod that already held it, if one did.
	DuplicateOf string `json:"duplicate_of,omitempty"`
}

// The node of the scenario: kind's worker with kindnet's configuration.
const (
	wipeNodeName = "kind-worker3"
	wipeDataDir  = "/run/cni-ipam-state"
	wipeConf     = `{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"host-local",
 "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`
)

// HostLocalWipe plays seed 003 with the real host-local plugin, called
// through libcni as containerd and CRI-O call it: pods start on a node
// whose store is then wiped while they run. ghostwatch reads the store as
// the agent does and names the address the next ADD returns; the incident
// is then played twice from the same wiped state: left alone, the next pod
// gets a running pod's address; repaired by hostlocal-reserve, it gets a
// fresh one. The node's files live in a temporary directory, as the
// node's / would.
func HostLocalWipe(ctx context.Context, o HostLocalOptions) (*HostLocalResult, error) {
	if o.Pods <= 0 {
		o.Pods = 3
	}
	if o.Pods > 200 {
		return nil, fmt.Errorf("--pods %d: at most 200 fit the node's /24 with room to spare", o.Pods)
	}
	bin := o.CNIBin
	if bin == "" {
		var err error
		if bin, err = cni.FindHostLocal(); err != nil {
			return nil, fmt.Errorf("%w (or pass --cni-bin)", err)
		}
		bin = filepath.Dir(bin)
	} else if _, err := os.Stat(filepath.Join(bin, cni.HostLocalBinary)); err != nil {
		return nil, fmt.Errorf("--cni-bin %s: %w: build host-local with scripts/cni-plugins.sh", bin, err)
	}
	tl := newTimeline(o.Out, time.Now())
	res := &HostLocalResult{Scenario: "hostlocal-wipe"}
	tmp, err := os.MkdirTemp("", "ghostwatch-hostlocal-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	tl.section("seed 003: host-local's store wiped while its pods run")
	n, err := newWipeNode(filepath.Join(tmp, "node"), bin)
	if err != nil {
		return nil, err
	}
	tl.logf("node", "%s, kindnet's configuration: host-local on 10.244.2.0/24, store %s/kindnet (files under %s)", wipeNodeName, wipeDataDir, n.root)
	for i := range o.Pods {
		name := fmt.Sprintf("web-%d", i)
		a, err := n.start(ctx, name)
		if err != nil {
			return nil, err
		}
		res.Before = append(res.Before, a.String())
		tl.logf("kubelet", "pod default/%s: CNI ADD (sandbox %s) -> %s", name, n.sandbox(name), a)
	}
	tl.logf("ledger", "%s", n.describeStore())
	r, err := n.audit(ctx)
	if err != nil {
		return nil, err
	}
	tl.logf("ghostwatch", "%s", describeFindings(r.Findings))

	if err := os.RemoveAll(filepath.Join(n.root, wipeDataDir)); err != nil {
		return nil, err
	}
	tl.logf("incident", "rm -rf %s (a node restore cleaning CNI state); the pods keep running with their addresses", wipeDataDir)
	tl.logf("ledger", "%s", n.describeStore())
	r, err = n.audit(ctx)
	if err != nil {
		return nil, err
	}
	res.Findings = r.Findings
	var targets []finding.Target
	for _, f := range r.Findings {
		tl.logf("ghostwatch", "%s %s: %s", f.Severity, f.Rule, f.Message)
		if f.Rule == rule.IPAMUnbookedIPID {
			if next, ok := f.Evidence["next_allocation"].(string); ok && res.Predicted == "" {
				res.Predicted = next
			}
			if f.Target != nil {
				targets = append(targets, f.Target)
			}
		}
	}
	if o.Inspect != nil {
		if err := o.Inspect(ctx, wipeNodeName, n.root, slices.Clone(n.pods)); err != nil {
			return nil, fmt.Errorf("inspecting the wiped store: %w", err)
		}
	}
	alone, err := n.copyTo(filepath.Join(tmp, "alone"))
	if err != nil {
		return nil, err
	}

	tl.section("left alone: the next pod starts on the node")
	run, err := alone.nextPod(ctx, tl, nil)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, run)

	tl.section("repaired: hostlocal-reserve writes the reservations back, then the next pod starts")
	run, err = n.nextPod(ctx, tl, targets)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, run)

	tl.section("summary")
	tl.logf("ghostwatch", "predicted the next ADD returns %s", res.Predicted)
	for _, run := range res.Runs {
		what := "left alone"
		if run.Repaired {
			what = fmt.Sprintf("after %d reservations written back", len(run.Written))
		}
		if run.DuplicateOf != "" {
			tl.logf("result", "%s: the next pod got %s, which %s holds: a duplicate pod IP", what, run.NextPodIP, run.DuplicateOf)
		} else {
			tl.logf("result", "%s: the next pod got %s, a fresh address", what, run.NextPodIP)
		}
	}
	if tl.err != nil {
		return nil, tl.err
	}
	return res, nil
}

// wipeNode is the scenario's node: its files under root, its pods, and
// the runtime's CNI library calling the real plugin.
type wipeNode struct {
	root string
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	bin  string
	pods []snapshot.Pod
}

func newWipeNode(root, bin string) (*wipeNode, error) {
	// The configuration the node holds names its own paths; the runtime
	// here runs the plugin on the copy under root.
	for p, content := range map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": fmt.Sprintf(wipeConf, wipeDataDir),
		"run/.keep":                         "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(wipeConf, filepath.Join(root, wipeDataDir))))
	if err != nil {
		return nil, err
	}
	return &wipeNode{root: root, bin: bin, list: list,
		cni: libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(root, "var/lib/cni"), nil)}, nil
}

func (n *wipeNode) sandbox(pod string) string { return "sandbox-" + pod }

// start runs a pod sandbox's CNI ADD, as the runtime does, and records the
// pod as running with the address it got.
func (n *wipeNode) start(ctx context.Context, name string) (netip.Addr, error) {
	out, err := n.cni.AddNetworkList(ctx, n.list, &libcni.RuntimeConf{
		ContainerID: n.sandbox(name), NetNS: filepath.Join(n.root, "netns", name), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}},
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("CNI ADD for pod %s: %w", name, err)
	}
	r, err := current.NewResultFromResult(out)
	if err != nil || len(r.IPs) == 0 {
		return netip.Addr{}, fmt.Errorf("CNI ADD for pod %s: result %v: %v", name, out, err)
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	a = a.Unmap()
	now := time.Now()
	n.pods = append(n.pods, snapshot.Pod{UID: "uid-" + name, Namespace: "default", Name: name, Node: wipeNodeName,
		Phase: snapshot.PodRunning, IPs: []netip.Addr{a}, Created: now, StartTime: now})
	return a, nil
}

// audit reads the node's store as the agent does and runs the host-local
// rules and duplicate-pod-ip on its pods.
func (n *wipeNode) audit(ctx context.Context) (*audit.Result, error) {
	res := audit.Run(ctx, audit.Config{
		NodeName: wipeNodeName,
		Sources:  []source.Source{fixedKube{snapshot.Kube{Pods: n.pods, Nodes: []snapshot.Node{{Name: wipeNodeName}}}}, &hostlocal.Source{Root: n.root}},
		Rules:    []rule.Rule{&rule.IPAMUnbookedIP{}, &rule.IPAMLeakedIP{}, &rule.DuplicatePodIP{}},
	})
	return res, res.Incomplete()
}

// nextPod repairs the store when targets are given, as the agent's
// hostlocal-reserve does once the finding held through its grace period
// and its re-check, then starts the next pod.
func (n *wipeNode) nextPod(ctx context.Context, tl *timeline, targets []finding.Target) (WipeRun, error) {
	run := WipeRun{Repaired: targets != nil}
	act := &remedy.Reservations{Root: n.root}
	for _, t := range targets {
		if err := act.Verify(ctx, t); err != nil {
			return run, fmt.Errorf("hostlocal-reserve %s: %w", t, err)
		}
		if err := act.Act(ctx, t); err != nil {
			return run, fmt.Errorf("hostlocal-reserve %s: %w", t, err)
		}
		run.Written = append(run.Written, t.String())
		tl.logf("agent", "hostlocal-reserve wrote %s, under host-local's lock", t)
	}
	if targets != nil {
		tl.logf("ledger", "%s", n.describeStore())
		if r, err := n.audit(ctx); err == nil {
			tl.logf("ghostwatch", "%s", describeFindings(r.Findings))
		}
	}
	holders := map[netip.Addr]string{}
	for _, p := range n.pods {
		holders[p.IPs[0]] = p.Ref().String()
	}
	name := fmt.Sprintf("web-%d", len(n.pods))
	a, err := n.start(ctx, name)
	if err != nil {
		return run, err
	}
	run.NextPodIP, run.DuplicateOf = a.String(), holders[a]
	if run.DuplicateOf != "" {
		tl.logf("kubelet", "pod default/%s: CNI ADD -> %s, which pod %s still holds", name, a, run.DuplicateOf)
	} else {
		tl.logf("kubelet", "pod default/%s: CNI ADD -> %s", name, a)
	}
	r, err := n.audit(ctx)
	if err != nil {
		return run, err
	}
	for _, f := range r.Findings {
		if f.Rule == rule.DuplicatePodIPID {
			tl.logf("ghostwatch", "%s %s: %s", f.Severity, f.Rule, f.Message)
		}
	}
	return run, nil
}

// describeStore says what the store holds, as ghostwatch reads it.
func (n *wipeNode) describeStore() string {
	s := &snapshot.Snapshot{}
	if err := (&hostlocal.Source{Root: n.root}).Collect(context.Background(), s); err != nil {
		return err.Error()
	}
	net := s.HostLocal.Networks[0]
	if net.Missing {
		return fmt.Sprintf("%s does not exist: host-local sees an empty store", net.Dir)
	}
	last := "none"
	if a, ok := net.LastReserved[0]; ok {
		last = a.String()
	}
	if len(net.Reservations) == 0 {
		return fmt.Sprintf("%s holds no reservation; last_reserved_ip.0 %s", net.Dir, last)
	}
	var ips []string
	for _, r := range net.Reservations {
		ips = append(ips, r.IP.String())
	}
	return fmt.Sprintf("%s reserves %s; last_reserved_ip.0 %s", net.Dir, strings.Join(ips, ", "), last)
}

// copyTo copies the node's files and pods under a new root.
func (n *wipeNode) copyTo(root string) (*wipeNode, error) {
	c, err := newWipeNode(root, n.bin)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"run", "var/lib/cni"} {
		from := filepath.Join(n.root, sub)
		if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, sub)); err != nil {
			return nil, err
		}
		if err := os.CopyFS(filepath.Join(root, sub), os.DirFS(from)); err != nil {
			return nil, err
		}
	}
	c.pods = append([]snapshot.Pod(nil), n.pods...)
	return c, nil
}

// describeFindings says "no finding" or counts them by rule.
func describeFindings(fs []finding.Finding) string {
	if len(fs) == 0 {
		return "no finding"
	}
	by := map[string]int{}
	for _, f := range fs {
		by[f.Rule]++
	}
	var parts []string
	for r, c := range by {
		parts = append(parts, fmt.Sprintf("%d %s", c, r))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// fixedKube is a kube source of fixed objects: the scenario's cluster.
type fixedKube struct{ k snapshot.Kube }

func (fixedKube) Name() string { return "kube" }
func (f fixedKube) Collect(_ context.Context, s *snapshot.Snapshot) error {
	k := f.k
	s.Kube = &k
	return nil
}
