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
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
)

// hostLocalNode is a node whose pods get their IPs from the real host-local
// plugin, called through libcni as containerd and CRI-O call it (so the
// runtime's result cache is written too), with kindnet's configuration:
// a data directory of its own, /run/cni-ipam-state, and 10.244.2.0/24.
// Its files live under root, as the node's / would.
type hostLocalNode struct {
	t    *testing.T
	root string
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	pods []snapshot.Pod
}

const kindnetConf = `{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"host-local",
 "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`

func newHostLocalNode(t *testing.T) *hostLocalNode {
	t.Helper()
	bin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	// The configuration the node holds names its own paths; the runtime
	// here runs the plugin on the copy under root.
	for p, content := range map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": fmt.Sprintf(kindnetConf, "/run/cni-ipam-state"),
		"run/.keep":                         "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(kindnetConf, filepath.Join(root, "run/cni-ipam-state"))))
	if err != nil {
		t.Fatal(err)
	}
	return &hostLocalNode{t: t, root: root, list: list,
		cni: libcni.NewCNIConfigWithCacheDir([]string{filepath.Dir(bin)}, filepath.Join(root, "var/lib/cni"), nil)}
}

// start runs the CNI ADD of a pod's sandbox, as the runtime does, and
// records the pod as running with the address it got.
func (n *hostLocalNode) start(name string) netip.Addr {
	n.t.Helper()
	a, err := n.add(name)
	if err != nil {
		n.t.Fatalf("ADD for pod %s: %v", name, err)
	}
	n.pods = append(n.pods, snapshot.Pod{UID: "uid-" + name, Namespace: "default", Name: name, Node: "kind-worker3",
		Phase: snapshot.PodRunning, IPs: []netip.Addr{a}, Created: time.Now(), StartTime: time.Now()})
	return a
}

func (n *hostLocalNode) add(name string) (netip.Addr, error) {
	res, err := n.cni.AddNetworkList(context.Background(), n.list, &libcni.RuntimeConf{
		ContainerID: "sandbox-" + name, NetNS: filepath.Join(n.root, "netns", name), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}},
	})
	if err != nil {
		return netip.Addr{}, err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	return a.Unmap(), nil
}

// audit reads the node's store as the agent does and runs the host-local
// rules against its pods.
func (n *hostLocalNode) audit() *audit.Result {
	n.t.Helper()
	kubeSrc := staticKube{Kube: snapshot.Kube{Pods: n.pods, Nodes: []snapshot.Node{{Name: "kind-worker3"}}}}
	return audit.Run(context.Background(), audit.Config{
		NodeName: "kind-worker3",
		Sources:  []source.Source{kubeSrc, &hostlocal.Source{Root: n.root}},
		Rules:    []rule.Rule{&rule.IPAMUnbookedIP{}, &rule.DuplicatePodIP{}},
	})
}

// staticKube is a kube source of fixed objects.
type staticKube struct{ snapshot.Kube }

func (staticKube) Name() string { return "kube" }
func (k staticKube) Collect(_ context.Context, s *snapshot.Snapshot) error {
	kk := k.Kube
	s.Kube = &kk
	return nil
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
		if got, want := n.start(name), netip.AddrFrom4([4]byte{10, 244, 2, byte(2 + i)}); got != want {
			t.Fatalf("pod %s got %s, want %s", name, got, want)
		}
	}
	if fs := n.audit().Findings; len(fs) != 0 {
		t.Fatalf("findings on a whole store: %+v", fs)
	}
	if err := os.RemoveAll(filepath.Join(n.root, "run/cni-ipam-state")); err != nil {
		t.Fatal(err)
	}
	alone := copyNode(t, n)

	res := n.audit()
	if err := res.Incomplete(); err != nil {
		t.Fatal(err)
	}
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
	if fs := n.audit().Findings; len(fs) != 0 {
		t.Errorf("findings after the repair: %+v", fs)
	}
	if got := n.start("web-3"); got != netip.MustParseAddr("10.244.2.5") {
		t.Errorf("after the repair the next pod got %s, want a fresh 10.244.2.5", got)
	}
	// The repaired reservations are the runtime's own: its DEL frees them.
	if err := n.cni.DelNetworkList(context.Background(), n.list, &libcni.RuntimeConf{
		ContainerID: "sandbox-web-1", NetNS: filepath.Join(n.root, "netns", "web-1"), IfName: "eth0",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.root, "run/cni-ipam-state/kindnet/10.244.2.3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DEL of web-1's sandbox left its repaired reservation: %v", err)
	}

	// Without the repair.
	if got := alone.start("web-3"); got != netip.MustParseAddr("10.244.2.2") {
		t.Errorf("without the repair the next pod got %s, want the duplicate 10.244.2.2", got)
	}
	dups := 0
	for _, f := range alone.audit().Findings {
		if f.Rule == rule.DuplicatePodIPID && f.Subject.IP == "10.244.2.2" {
			dups++
		}
	}
	if dups != 1 {
		t.Errorf("without the repair: %d duplicate-pod-ip findings on 10.244.2.2, want 1", dups)
	}
}

// copyNode copies n's files and pods to a new node.
func copyNode(t *testing.T, n *hostLocalNode) *hostLocalNode {
	t.Helper()
	c := newHostLocalNode(t)
	for _, sub := range []string{"run", "var/lib/cni"} {
		from := filepath.Join(n.root, sub)
		if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.root, sub)); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(c.root, sub), os.DirFS(from)); err != nil {
			t.Fatal(err)
		}
	}
	c.pods = append([]snapshot.Pod(nil), n.pods...)
	return c
}
