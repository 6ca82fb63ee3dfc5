package build

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/realnode"
)

// Set is one set of binaries a script of the repository builds from a
// module of tools/.
type Set struct {
	// Name is the set's name on the command line: ghostwatch-lab build NAME.
	Name string
	// What names the set in a sentence: "the Kubernetes binaries".
	What string
	// Binaries are the executables the set's directory holds.
	Binaries []string
	// Env names the variable that gives their directory instead of the
	// cache, and Flag the labs' flag that does.
	Env, Flag string
	// Script builds them (its path in the repository, and in the recipe).
	Script string
	// Tools is the module of tools/ that pins their versions.
	Tools string
	// Takes is how long a cold build takes, as the script's header comment
	// says (a test holds the two together), and Cost the rest of what that
	// comment says: cores, module and build cache.
	Takes time.Duration
	Cost  string
}

// Sets are the sets the lab may need, in the order `all` builds them.
var Sets = []Set{
	{
		Name: "kube", What: "the Kubernetes binaries",
		Binaries: controlplane.Binaries, Env: controlplane.BinEnv, Flag: "--kube-bin",
		Script: controlplane.Script, Tools: "tools/kube",
		Takes: 10 * time.Minute, Cost: "on 2 cores; ~1 GB of module cache and ~4 GB of build cache",
	},
	{
		Name: "calico", What: "the Calico binaries",
		Binaries: calico.Binaries, Env: calico.BinEnv, Flag: "--calico-bin",
		Script: calico.Script, Tools: "tools/calico",
		Takes: 8 * time.Minute, Cost: "on 2 cores; ~540 MB of module cache and ~1.1 GB of build cache",
	},
	{
		Name: "cni", What: "the CNI host-local plugin",
		Binaries: []string{cni.HostLocalBinary}, Env: cni.BinEnv, Flag: "--cni-bin",
		Script: cni.Script, Tools: "tools/cni",
		Takes: 15 * time.Second, Cost: "on 2 cores; ~20 MB of module cache and ~80 MB of build cache",
	},
	{
		Name: "crictl", What: "crictl, the container runtime's client",
		Binaries: []string{realnode.Crictl}, Env: realnode.CrictlEnv, Flag: "--crictl-bin",
		Script: realnode.CrictlScript, Tools: "tools/crictl",
		Takes: 2 * time.Minute, Cost: "on 2 cores; the binary is ~30 MB",
	},
	{
		Name: "prometheus", What: "Prometheus, with its Kubernetes service discovery",
		Binaries: []string{realnode.Prometheus}, Env: realnode.PrometheusEnv, Flag: "--prometheus-bin",
		Script: realnode.PrometheusScript, Tools: "tools/prometheus",
		Takes: 6 * time.Minute, Cost: "on 2 cores; the binary is ~76 MB",
	},
	{
		Name: "consul", What: "the consul binary",
		Binaries: []string{consultest.Binary}, Env: consultest.BinEnv, Flag: "--consul-bin",
		Script: consultest.Script, Tools: "tools/consul",
		Takes: 10 * time.Minute, Cost: "on 2 cores; the binary is ~160 MB",
	},
}

// All is the name that stands for every set.
const All = "all"

// Names are the sets' names, then All.
func Names() []string {
	var names []string
	for _, s := range Sets {
		names = append(names, s.Name)
	}
	return append(names, All)
}

// Lookup returns the sets name stands for: one, or every one for All.
func Lookup(name string) ([]Set, error) {
	if name == All {
		return Sets, nil
	}
	for _, s := range Sets {
		if s.Name == name {
			return []Set{s}, nil
		}
	}
	return nil, fmt.Errorf("nothing called %q to build: want %s", name, strings.Join(Names(), ", "))
}

// MustLookup returns the set named name; it panics for a name not in Sets.
func MustLookup(name string) Set {
	for _, s := range Sets {
		if s.Name == name {
			return s
		}
	}
	panic("build: no set " + name)
}

// About says how long a cold build takes: "about 10 minutes".
func (s Set) About() string {
	if s.Takes < time.Minute {
		return fmt.Sprintf("about %d seconds", int(s.Takes.Seconds()))
	}
	return fmt.Sprintf("about %d minutes", int(s.Takes.Minutes()))
}

// Needs says what a build needs besides time.
const Needs = "the go command on PATH, bash, and network to the Go module proxy"

// Command is the command that builds the set.
func (s Set) Command() string { return "ghostwatch-lab build " + s.Name }

// Plan says, before a build, what it builds, where, how long it takes and
// what it needs.
func (s Set) Plan(cache string) string {
	return fmt.Sprintf("building %s (%s) into %s: %s %s; it needs %s",
		s.What, strings.Join(s.Binaries, ", "), cache, s.About(), s.Cost, Needs)
}

// Question asks whether to build the set into cache now; no is the
// default.
func (s Set) Question(cache string) string {
	return fmt.Sprintf("%s%s %s not built. Building %s takes %s (%s) and needs %s. Build now into %s? [y/N] ",
		strings.ToUpper(s.What[:1]), s.What[1:], s.verb(), s.them(), s.About(), s.Cost, Needs, cache)
}

// ErrNotBuilt is wrapped by NotBuilt's errors.
var ErrNotBuilt = errors.New("not built")

// NotBuilt is the error a lab returns when the set is not built and it may
// not build it: it names the command that builds it, the flag that builds
// it first, the script of a checkout, and the flag and variable that name
// a directory.
func (s Set) NotBuilt() error {
	return notBuiltError{s}
}

type notBuiltError struct{ s Set }

func (e notBuiltError) Error() string {
	s := e.s
	return fmt.Sprintf("%s %s not built: build %s with `%s` (%s, once), or pass --build to build %s first "+
		"(in a checkout, %s builds the same); or name a directory holding %s with %s or $%s",
		s.What, s.verb(), s.them(), s.Command(), s.About(), s.them(), s.Script, s.them(), s.Flag, s.Env)
}

// verb and them make a sentence's verb and pronoun agree with What.
func (s Set) verb() string {
	if len(s.Binaries) > 1 {
		return "are"
	}
	return "is"
}

func (s Set) them() string {
	if len(s.Binaries) > 1 {
		return "them"
	}
	return "it"
}

func (notBuiltError) Unwrap() error { return ErrNotBuilt }
