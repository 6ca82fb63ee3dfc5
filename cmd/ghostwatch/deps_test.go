package main

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// forbidden are the import path prefixes the production binary must not
// link: the lab (ghostwatch-lab's), and what only the lab and the tests
// need. The agent runs this binary with NET_ADMIN on every node. Serf's
// agent is read through source/gossip's own client of its RPC, so no
// package of the Serf module may appear, nor memberlist, which Serf's
// packages import, nor miekg/dns, which memberlist imports. Nor Helm.
var forbidden = []string{
	"github.com/ghostwatch/ghostwatch/lab",
	"github.com/google/nftables",
	"github.com/vishvananda/netns",
	"github.com/hashicorp/mdns",
	"github.com/Masterminds/sprig",
	"github.com/hashicorp/serf",
	"github.com/hashicorp/memberlist",
	"github.com/miekg/dns",
	// Helm's library renders and installs the chart in the tests and the
	// lab; its install action brings SQL drivers, an OCI registry client
	// and containerd's.
	"helm.sh/helm",
	"github.com/lib/pq",
	"oras.land",
	"github.com/containerd",
}

// The production binary links no lab code, nor the modules only the lab
// and the tests use: the dependency graph go list gives for
// ./cmd/ghostwatch, built as the image builds it (linux, no cgo).
func TestNoLabInTheProductionBinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "the go command is not on PATH: "+err.Error())
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps ./cmd/ghostwatch: %v\n%s", err, stderr)
	}
	importers := map[string][]string{} // package -> the packages importing it
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs = append(pkgs, f[0])
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	if !slices.Contains(pkgs, "github.com/ghostwatch/ghostwatch/cli") {
		t.Fatalf("go list -deps ./cmd/ghostwatch does not list the cli package; it gave:\n%s", out)
	}
	for _, p := range pkgs {
		for _, bad := range forbidden {
			if strings.HasPrefix(p, bad) {
				t.Errorf("the production binary links %s, imported by %s", p, strings.Join(importers[p], ", "))
			}
		}
	}
}
