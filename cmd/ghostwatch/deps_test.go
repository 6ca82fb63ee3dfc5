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
// link: the lab (ghostwatch-lab's), and what only the lab needs. The agent
// runs this binary with NET_ADMIN on every node. github.com/miekg/dns is
// not among them only because the Serf RPC client reaches it
// (serfClientOnly).
var forbidden = []string{
	"github.com/ghostwatch/ghostwatch/lab",
	"github.com/google/nftables",
	"github.com/vishvananda/netns",
	"github.com/hashicorp/mdns",
	"github.com/Masterminds/sprig",
	"github.com/hashicorp/serf/cmd",
}

// serfClientOnly lists what the production binary links only because its
// Serf RPC client (source/gossip) needs it: serf/client uses serf/serf's
// types, serf/serf imports memberlist, and memberlist imports miekg/dns. For
// each of them (a prefix of import paths), the prefixes its importers may
// have; from anything else it is an error. Only serf/client may be imported
// from outside the Serf module.
var serfClientOnly = []struct{ pkg, from string }{
	{"github.com/miekg/dns", "github.com/hashicorp/memberlist"},
	{"github.com/hashicorp/memberlist", "github.com/hashicorp/serf/"},
	{"github.com/hashicorp/serf/", "github.com/hashicorp/serf/"},
}

// The production binary links no lab code, nor the modules only the lab
// uses: the dependency graph go list gives for ./cmd/ghostwatch, built as
// the image builds it (linux, no cgo).
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
		if p == "github.com/hashicorp/serf/client" {
			continue
		}
		for _, only := range serfClientOnly {
			if !strings.HasPrefix(p, only.pkg) {
				continue
			}
			for _, by := range importers[p] {
				if !strings.HasPrefix(by, only.from) {
					t.Errorf("the production binary links %s through %s: it may come only from %s*, for the Serf RPC client", p, by, only.from)
				}
			}
		}
	}
}
