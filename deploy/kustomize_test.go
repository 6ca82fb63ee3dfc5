package deploy

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/deploy/chart"
)

var update = flag.Bool("update", false, "rewrite deploy/agent, deploy/controller and deploy/kind from the chart")

// kustomizations are the folders rendered from the chart: each the
// chart with the other component off.
var kustomizations = []struct {
	dir, values, title string
}{
	{AgentDir, "controller: {enabled: false}\n", "ghostwatch agent: one Pod per node, report only"},
	{ControllerDir, "agent: {enabled: false}\n", "ghostwatch controller: the cluster-wide watcher, one leader of 2 replicas, report only"},
	{KindDir, "controller: {enabled: false}\n" + kindValues, "ghostwatch agent on kind (host-local's store under /run/cni-ipam-state), instead of deploy/agent: one Pod per node, report only"},
}

// kindValues are the chart's values for kind.
var kindValues = func() string {
	b, err := os.ReadFile(filepath.Join(chart.Dir(), "values-kind.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// helmOnly are the label lines that only a Helm release carries.
var helmOnly = []string{"app.kubernetes.io/managed-by: Helm", "helm.sh/chart: "}

// kustomization renders dir's files from the chart: one file per kind,
// the Helm-only labels left out, and the kustomization listing them.
func kustomization(t *testing.T, dir, values, title string) map[string]string {
	t.Helper()
	docs, err := chart.RenderDocs("ghostwatch", "ghostwatch", values)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var names []string
	for _, d := range docs {
		name := strings.ToLower(d.Kind) + ".yaml"
		if _, dup := out[name]; dup {
			t.Fatalf("%s: two %s objects: one file each is what deploy/%s holds", dir, d.Kind, dir)
		}
		var lines []string
		for _, l := range strings.Split(d.Text, "\n") {
			if !slices.ContainsFunc(helmOnly, func(h string) bool { return strings.Contains(l, h) }) {
				lines = append(lines, l)
			}
		}
		out[name] = "# Rendered from deploy/helm/ghostwatch: go test ./deploy -run TestKustomizationsAreTheChart -update\n" + strings.Join(lines, "\n")
		names = append(names, name)
	}
	slices.Sort(names)
	var k strings.Builder
	fmt.Fprintf(&k, "# %s.\n#   kubectl apply -k deploy/namespace && kubectl apply -k deploy/%s\n", title, dir)
	k.WriteString("# Rendered from deploy/helm/ghostwatch (the other component off):\n# go test ./deploy -run TestKustomizationsAreTheChart -update. For remedies, monitoring\n# and the rest, install the chart, or render it with your values (helm template).\n")
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: ghostwatch\nresources:\n")
	for _, n := range names {
		fmt.Fprintf(&k, "  - %s\n", n)
	}
	out["kustomization.yaml"] = k.String()
	return out
}

// deploy/agent and deploy/controller are the chart rendered, each with the
// other component off; neither holds the namespace (deploy/namespace
// does), so that deleting one leaves the other's objects alone.
func TestKustomizationsAreTheChart(t *testing.T) {
	for _, k := range kustomizations {
		want := kustomization(t, k.dir, k.values, k.title)
		if *update {
			old, _ := filepath.Glob(filepath.Join(k.dir, "*.yaml"))
			for _, f := range old {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			for name, text := range want {
				if err := os.WriteFile(filepath.Join(k.dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := read(k.dir); err != nil {
			t.Error(err) // every object decodes strictly
		}
		have, _ := filepath.Glob(filepath.Join(k.dir, "*.yaml"))
		if len(have) != len(want) {
			t.Errorf("deploy/%s holds %d files, the chart renders %d: go test ./deploy -run TestKustomizationsAreTheChart -update", k.dir, len(have), len(want))
		}
		for name, text := range want {
			b, err := os.ReadFile(filepath.Join(k.dir, name))
			if err != nil || string(b) != text {
				t.Errorf("deploy/%s/%s drifted from the chart: go test ./deploy -run TestKustomizationsAreTheChart -update", k.dir, name)
			}
		}
	}
}
