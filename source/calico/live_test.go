package calico_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	labcalico "github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/kube/saved"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

// binaries returns the Kubernetes and Calico binaries' directories, or
// stops the test as internal/testenv says.
func binaries(t *testing.T) (kubeBin, calicoBin string) {
	t.Helper()
	kubeBin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	calicoBin, err = labcalico.FindBinaries()
	if errors.Is(err, labcalico.ErrNoBinaries) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return kubeBin, calicoBin
}

// pools are seed 002's, one block of four addresses per node, and a
// disabled one.
var pools = labcalico.NodePools("node-a", "node-b") + `---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: retired
spec:
  cidr: 10.245.0.0/24
  blockSize: 26
  disabled: true
`

// calicoOnly is a rule that reads Calico's objects, and no kind of the
// cluster's.
type calicoOnly struct{}

func (calicoOnly) KubeKinds() []string { return nil }

// readSaved reads Calico's objects from a file kubectl or calicoctl wrote,
// as a scan reads --kube-objects.
func readSaved(t *testing.T, ctx context.Context, file string) *snapshot.Calico {
	t.Helper()
	files := &kubectl.Files{Paths: []string{file}}
	kubeSrc := saved.NewFileSource(files)
	kubeSrc.Narrow([]any{calicoOnly{}})
	s := &snapshot.Snapshot{}
	source.CollectInto(ctx, time.Now, s, kubeSrc, calico.NewFileSource(files))
	if err := s.Ready("kube", "calico"); err != nil {
		t.Fatal(err)
	}
	return s.Calico
}

// The live source reads from a real API server exactly what the file path
// reads from kubectl's output of the same objects, written there by
// Calico's own binaries: calico-ipam's allocations, one of them booked
// under a stale node name and freed by calico-kube-controllers, as in
// seed 002. Before Calico's CRDs are installed the ledger is unsupported;
// a user without permission is told which resource and verb.
func TestLiveLedgerIsTheSavedOne(t *testing.T) {
	kubeBin, calicoBin := binaries(t)
	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: kubeBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.Config(controlplane.UserAdmin)

	// No Calico: unsupported, whether discovery or the list says so.
	live, err := calico.NewAPISource(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []*calico.APISource{live, {Client: live.Client}} {
		s := &snapshot.Snapshot{}
		if err := src.Collect(ctx, s); !errors.Is(err, source.ErrUnsupported) || s.Calico != nil {
			t.Errorf("without Calico's CRDs (discovery %t): %v", src.Discovery != nil, err)
		}
	}

	cl, err := labcalico.Install(ctx, cp, calicoBin)
	if err != nil {
		t.Fatal(err)
	}
	// A user the cluster grants nothing: Calico is there, the ledger not
	// readable.
	agent, err := calico.NewAPISource(cp.Config(controlplane.UserAgent))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Collect(ctx, &snapshot.Snapshot{}); err == nil || errors.Is(err, source.ErrUnsupported) ||
		!strings.Contains(err.Error(), "listing ipamblocks.crd.projectcalico.org: ") ||
		!strings.Contains(err.Error(), "(403 Forbidden): missing permission to list ipamblocks (API group crd.projectcalico.org)") {
		t.Errorf("without permission: %v", err)
	}

	nodes := map[string]*labcalico.Node{}
	for _, n := range []string{"node-a", "node-b"} {
		if nodes[n], err = cl.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Apply(ctx, pools); err != nil {
		t.Fatal(err)
	}
	const grace = 5 * time.Second
	kc, err := cl.StartKubeControllers(ctx, labcalico.KubeControllersOptions{LeakGracePeriod: grace})
	if err != nil {
		t.Fatal(err)
	}
	misbooked := runPod(t, nodes["node-b"], "misbooked", "node-a")
	control := runPod(t, nodes["node-b"], "control", "node-b")

	// Until the collector has freed the misbooked address, and reported
	// what it runs with.
	var got *snapshot.Calico
	poll.UntilNoted(t, poll.Patience, "the collector to free "+misbooked.String(), func() (bool, string) {
		s := &snapshot.Snapshot{}
		if err := live.Collect(ctx, s); err != nil {
			t.Fatal(err)
		}
		got = s.Calico
		if allocated(got, misbooked) == nil && got.LeakGC != nil && strings.HasPrefix(got.LeakGC.From, "status.") {
			return true, ""
		}
		if err := kc.Check(); err != nil {
			t.Fatal(err)
		}
		return false, fmt.Sprintf("%+v", got)
	})
	// Nothing writes the ledger from here on.
	kc.Stop(10 * time.Second)
	s := &snapshot.Snapshot{}
	if err := live.Collect(ctx, s); err != nil {
		t.Fatal(err)
	}
	got = s.Calico
	if d := live.Describe(s); d != "2 blocks (1 allocation), 1 handle, 2 affinities, 3 pools, leak grace period 5s" {
		t.Errorf("Describe = %q", d)
	}

	// What the ledger holds.
	if len(got.Blocks) != 2 || got.Blocks[0].Affinity != "node-a" || len(got.Blocks[0].Allocations) != 0 || len(got.Blocks[0].Free) != 4 {
		t.Errorf("node-a's block after the collector: %+v", got.Blocks)
	}
	if a := allocated(got, control); a == nil || a.Node != "node-b" || a.Pod != "control" || a.Namespace != "default" ||
		a.SequenceNumber == 0 || a.Timestamp.Before(started.Truncate(time.Second)) || !strings.HasPrefix(a.HandleID, "k8s-pod-network.") {
		t.Errorf("control's allocation %+v", a)
	}
	for _, b := range got.Blocks {
		if b.Malformed != nil || b.SequenceNumber < 1<<53 {
			t.Errorf("block %+v", b)
		}
	}
	if len(got.Handles) != 1 || len(got.Affinities) != 2 || got.Affinities[1].State != "confirmed" ||
		len(got.Pools) != 3 || !got.Pools[2].Disabled || got.Pools[2].BlockSize != 26 || got.Pools[0].NodeSelector != "kubernetes.io/hostname == 'node-a'" {
		t.Errorf("ledger %+v", got)
	}
	if want := (snapshot.LeakGC{GracePeriod: grace, From: "status.runningConfig.controllers.node.leakGracePeriod"}); !reflect.DeepEqual(*got.LeakGC, want) {
		t.Errorf("leak collector %+v", *got.LeakGC)
	}

	// The same objects as kubectl get ipamblocks.crd.projectcalico.org,...
	// -o yaml prints them, read as the scan reads --kube-objects.
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "calico.yaml")
	if err := os.WriteFile(file, kubectlGetYAML(t, ctx, dyn), 0o644); err != nil {
		t.Fatal(err)
	}
	if saved := readSaved(t, ctx, file); !reflect.DeepEqual(saved, got) {
		t.Errorf("from kubectl's output:\n%+v\nlive:\n%+v", saved, got)
	}

	// calicoctl prints the pools and the configuration as
	// projectcalico.org/v3: the same specs.
	var v3 bytes.Buffer
	for _, r := range []string{"ippools", "kubecontrollersconfigurations"} {
		out, err := cl.Calicoctl(ctx, "get", r, "-o", "yaml")
		if err != nil {
			t.Fatal(err)
		}
		v3.WriteString("---\n")
		v3.Write(out)
	}
	v3file := filepath.Join(t.TempDir(), "calicoctl.yaml")
	if err := os.WriteFile(v3file, v3.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := readSaved(t, ctx, v3file); !reflect.DeepEqual(o.Pools, got.Pools) || !reflect.DeepEqual(o.LeakGC, got.LeakGC) {
		t.Errorf("from calicoctl: pools %+v, leak collector %+v", o.Pools, o.LeakGC)
	}
}

// runPod runs a pod on n whose address calico-ipam books under bookedAs,
// the name n's nodename file holds meanwhile.
func runPod(t *testing.T, n *labcalico.Node, name, bookedAs string) netip.Addr {
	t.Helper()
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
	return p.IP
}

// allocated returns the allocation of ip, or nil.
func allocated(c *snapshot.Calico, ip netip.Addr) *snapshot.Allocation {
	for _, b := range c.Blocks {
		for i := range b.Allocations {
			if b.Allocations[i].IP == ip {
				return &b.Allocations[i]
			}
		}
	}
	return nil
}

// kubectlGetYAML is what kubectl get of the five resources -o yaml prints:
// a List of the objects as the API server returns them, through the
// printer kubectl uses.
func kubectlGetYAML(t *testing.T, ctx context.Context, dyn dynamic.Interface) []byte {
	t.Helper()
	list := &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""},
	}}
	for _, gr := range calico.Listed() {
		l, err := dyn.Resource(gr.WithVersion("v1")).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		list.Items = append(list.Items, l.Items...)
	}
	var b bytes.Buffer
	if err := (&printers.YAMLPrinter{}).PrintObj(list, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
