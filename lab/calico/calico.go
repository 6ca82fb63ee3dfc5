package calico

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/dynamic"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// BinEnv names the directory holding Calico's binaries;
// scripts/calico-binaries.sh prints it.
const BinEnv = "GHOSTWATCH_CALICO_BIN"

// Binaries are Calico's executables the package runs.
var Binaries = []string{"calico-kube-controllers", "calicoctl", "calico-ipam"}

// Script builds Binaries and prints the directory they are in.
const Script = "scripts/calico-binaries.sh"

// ErrNoBinaries is returned by FindBinaries when they are not built.
var ErrNoBinaries = errors.New("the Calico binaries are not built: run " + Script + " and set " + BinEnv + " to the directory it prints")

// FindBinaries returns the directory named by $GHOSTWATCH_CALICO_BIN, or
// ErrNoBinaries when it is unset. A directory that lacks a binary is an
// error naming it.
func FindBinaries() (string, error) {
	return testenv.BinDir(BinEnv, Script, ErrNoBinaries, Binaries...)
}

// CheckBinaries returns an error naming the first of Binaries that dir
// lacks and the script that builds them; what names the directory in the
// message (the flag that gave it: "--bin /x").
func CheckBinaries(what, dir string) error {
	return testenv.HasExecutables(what, dir, Script, Binaries...)
}

//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs are the crd.projectcalico.org/v1 CustomResourceDefinitions that
// calico-kube-controllers' node controller, calicoctl's IPAM commands and
// calico-ipam need, as Calico ships them (crds/README.md says from where).
func CRDs() fs.FS {
	sub, err := fs.Sub(crdFiles, "crds")
	if err != nil {
		panic(err) // the embedded tree always has crds/
	}
	return sub
}

// Cluster is Calico's datastore on a test control plane, and the means to
// run Calico's binaries against it.
type Cluster struct {
	cp  *controlplane.ControlPlane
	bin string
	// Kubeconfig is what every Calico component here connects with
	// (UserAdmin's).
	Kubeconfig string
	// Dir holds the components' files (status, nodename and lock files),
	// under the control plane's Dir.
	Dir string
	dyn dynamic.Interface
}

// Install installs Calico's CRDs into cp and returns the Cluster that runs
// the binaries in bin (FindBinaries) against it.
func Install(ctx context.Context, cp *controlplane.ControlPlane, bin string) (*Cluster, error) {
	if _, err := cp.InstallCRDs(ctx, CRDs()); err != nil {
		return nil, err
	}
	kubeconfig, err := cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "calico")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cp.Config(controlplane.UserAdmin))
	if err != nil {
		return nil, err
	}
	return &Cluster{cp: cp, bin: bin, Kubeconfig: kubeconfig, Dir: dir, dyn: dyn}, nil
}

// datastoreEnv points a Calico binary at the API server.
func (c *Cluster) datastoreEnv() []string {
	return []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + c.Kubeconfig}
}

// run runs one of the binaries to completion with env added to the
// datastore's, stdin as its input; it returns stdout, and an error that
// carries stderr.
func (c *Cluster) run(ctx context.Context, env []string, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Env = append(append(os.Environ(), c.datastoreEnv()...), env...)
	cmd.Dir = c.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		out := strings.TrimSpace(strings.Join([]string{stderr.String(), stdout.String()}, "\n"))
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return stdout.Bytes(), nil
}

// Calicoctl runs calicoctl against the cluster and returns its stdout.
func (c *Cluster) Calicoctl(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, nil, nil, "calicoctl", args...)
}

// Apply creates or updates the projectcalico.org/v3 resources in manifest
// (YAML) with calicoctl apply, which validates and defaults them as
// Calico's own clients do before storing them as crd.projectcalico.org/v1.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	_, err := c.run(ctx, nil, []byte(manifest), "calicoctl", "apply", "-f", "-")
	return err
}
