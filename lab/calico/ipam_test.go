package calico

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestFindBinaries(t *testing.T) {
	t.Setenv(BinEnv, "")
	t.Setenv("GHOSTWATCH_KUBE_CACHE", t.TempDir()) // an empty build cache
	if _, err := FindBinaries(); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("unset: %v, want ErrNoBinaries", err)
	}
	dir := t.TempDir()
	for _, b := range Binaries[:len(Binaries)-1] {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(BinEnv, dir)
	last := Binaries[len(Binaries)-1]
	if _, err := FindBinaries(); err == nil || errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), last) {
		t.Errorf("without %s: %v, want an error naming it", last, err)
	}
	if err := os.WriteFile(filepath.Join(dir, last), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinaries(); err != nil || got != dir {
		t.Errorf("complete: %q, %v", got, err)
	}
}

func TestCRDsEmbedded(t *testing.T) {
	for _, plural := range []string{"ipamblocks", "ipamhandles", "blockaffinities", "ippools", "ipamconfigs",
		"ipreservations", "clusterinformations", "kubecontrollersconfigurations", "tiers"} {
		b, err := os.ReadFile(filepath.Join("crds", "crd.projectcalico.org_"+plural+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "name: "+plural+".crd.projectcalico.org") {
			t.Errorf("%s: not the CRD of %s.crd.projectcalico.org", plural, plural)
		}
	}
}

func TestAllocationsOf(t *testing.T) {
	handle := func(s string) *string { return &s }
	idx := func(i int) *int { return &i }
	// A block after churn: ordinal 3 points at attribute 0, ordinal 0 at
	// attribute 1; ordinals 1 and 2 are free.
	obj := &unstructured.Unstructured{Object: map[string]any{
		"kind": "IPAMBlock", "metadata": map[string]any{"name": "10-244-0-0-30"},
		"spec": map[string]any{
			"cidr": "10.244.0.0/30", "affinity": "host:node-a", "strictAffinity": false,
			"allocations": []any{int64(1), nil, nil, int64(0)},
			"unallocated": []any{int64(1), int64(2)},
			"attributes": []any{
				map[string]any{"handle_id": "k8s-pod-network.b", "secondary": map[string]any{"node": "node-a", "pod": "b", "namespace": "default"}},
				map[string]any{"handle_id": "k8s-pod-network.a", "secondary": map[string]any{"node": "node-b", "pod": "a", "namespace": "default"}},
			},
			"sequenceNumber": int64(1763900000000000003), "sequenceNumberForAllocation": map[string]any{"0": int64(1763900000000000000), "3": int64(1763900000000000002)},
		},
	}}
	b, err := Spec[IPAMBlock](obj)
	if err != nil {
		t.Fatal(err)
	}
	if b.Affinity == nil || *b.Affinity != "host:node-a" || b.SequenceNumberForAllocation["3"] != 1763900000000000002 {
		t.Errorf("spec decoded as %+v", b)
	}
	got, err := b.AllocationsOf()
	if err != nil {
		t.Fatal(err)
	}
	want := []Allocation{
		{IP: netip.MustParseAddr("10.244.0.0"), IPAMAttribute: IPAMAttribute{HandleID: handle("k8s-pod-network.a"), Secondary: map[string]string{"node": "node-b", "pod": "a", "namespace": "default"}}},
		{IP: netip.MustParseAddr("10.244.0.3"), IPAMAttribute: IPAMAttribute{HandleID: handle("k8s-pod-network.b"), Secondary: map[string]string{"node": "node-a", "pod": "b", "namespace": "default"}}},
	}
	if !slices.EqualFunc(got, want, func(a, b Allocation) bool {
		return a.IP == b.IP && *a.HandleID == *b.HandleID && a.Secondary["node"] == b.Secondary["node"] && a.Secondary["pod"] == b.Secondary["pod"]
	}) {
		t.Errorf("allocations %+v, want %+v", got, want)
	}

	b.Allocations[1] = idx(2)
	if _, err := b.AllocationsOf(); err == nil || !strings.Contains(err.Error(), "ordinal 1") {
		t.Errorf("an ordinal past the attributes: %v, want an error naming it", err)
	}
}

func TestHandleName(t *testing.T) {
	if got := HandleName("k8s-pod-network.ABC123"); got != "k8s-pod-network.abc123" {
		t.Errorf("HandleName = %q", got)
	}
	r := IPAMRequest{ContainerID: "abc"}
	if got := r.HandleID(); got != "k8s-pod-network.abc" {
		t.Errorf("HandleID = %q", got)
	}
}

// The plugin gets the calico entry of the node's configuration, as the
// runtime hands it over, with every path of the node under its Root.
func TestPluginConf(t *testing.T) {
	n := &Node{Name: "node-a", Root: t.TempDir()}
	if err := n.write(ConfFile, []byte(nodeConf)); err != nil {
		t.Fatal(err)
	}
	b, err := n.pluginConf()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name, CNIVersion, Type string
		NodenameFile           string `json:"nodename_file"`
		Nodename               *string
		LockFile               string `json:"ipam_lock_file"`
		LogFile                string `json:"log_file_path"`
		IPAM                   struct{ Type string }
		Kubernetes             struct{ Kubeconfig string }
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != NetworkName || got.CNIVersion != "0.3.1" || got.Type != "calico" || got.IPAM.Type != "calico-ipam" || got.Nodename != nil ||
		got.NodenameFile != filepath.Join(n.Root, "var/lib/calico/nodename") || got.LockFile != filepath.Join(n.Root, "var/run/calico/ipam.lock") ||
		got.LogFile != filepath.Join(n.Root, "var/log/calico/cni/cni.log") || got.Kubernetes.Kubeconfig != filepath.Join(n.Root, "etc/cni/net.d/calico-kubeconfig") {
		t.Errorf("plugin configuration %s", b)
	}

	if err := n.write(ConfFile, []byte(`{"name":"k8s-pod-network","plugins":[{"type":"portmap"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pluginConf(); err == nil || !strings.Contains(err.Error(), "no calico plugin") {
		t.Errorf("a configuration without calico: %v", err)
	}
}

func TestNodePools(t *testing.T) {
	got := NodePools("node-a", "node-b")
	for _, want := range []string{
		"name: node-a\nspec:\n  cidr: 10.244.0.0/30\n  blockSize: 30\n",
		"---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: node-b\nspec:\n  cidr: 10.244.0.4/30\n",
		"nodeSelector: kubernetes.io/hostname == 'node-b'\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("NodePools lacks %q:\n%s", want, got)
		}
	}
	if NodePoolCIDR(3).String() != "10.244.0.12/30" {
		t.Errorf("NodePoolCIDR(3) = %s", NodePoolCIDR(3))
	}
}
